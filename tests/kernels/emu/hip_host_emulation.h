// A CPU emulation of the small part of the HIP/CUDA device dialect that
// kernels/decode/mla_decode_device.h uses, so that its kernels run unchanged on the host in CPU
// tests (tests/kernels/decode/mla_decode_emu_test.cc): the same tile code, MMA fragment layouts,
// cp.async ring and barriers, compared with the simulator without a GPU.
//
// Model: blocks run one after another; a block's threads are cooperatively scheduled fibers
// (ucontext) that switch only at barriers, so a run is deterministic. Warp collectives
// (shuffles, ldmatrix, mma.sync) gather the 32 lanes' operands at a warp barrier. A barrier
// that some threads never reach is reported as a deadlock instead of hanging.
// cp.async: the destination is poisoned (all bytes 0xff: NaN in bf16, f16, fp32 and fp8
// e4m3fn) when the copy is issued and filled when the issuing thread's wait retires its
// group, so reading a buffer before its copies are waited for, or refilling one that others
// still read, shows up as NaNs. Dynamic shared memory starts as 0xff bytes too.
// Addresses that the hardware requires aligned (ldmatrix rows, cp.async, 16-byte vector
// accesses through the helpers) abort with a message when they are not.
//
// Include this header before kernels/decode/mla_decode_device.h and after any library headers
// (its macros, e.g. __shared__, would otherwise reach them).
#ifndef MLAPS_TESTS_KERNELS_EMU_HIP_HOST_EMULATION_H_
#define MLAPS_TESTS_KERNELS_EMU_HIP_HOST_EMULATION_H_

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#define MLAPS_HOST_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// A function-local __shared__ array: one instance shared by the block's fibers (blocks run
// one after another).
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

namespace mlaps_emu {

struct ThreadState {
  dim3 thread_idx{0, 0, 0};
  dim3 block_idx{0, 0, 0};
};

// The running thread's indices (outside a launch: zeros).
ThreadState& Current();
extern dim3 g_block_dim;
extern dim3 g_grid_dim;

void SyncThreads();
void SyncWarp();
long long Clock();
uint8_t* DynamicSmem();

// Every lane of the calling warp passes `bytes` (<= 64) bytes; `all` receives the 32 lanes'
// values back to back (lane order).
void WarpExchange(const void* mine, size_t bytes, void* all);
template <typename T>
void WarpAllGather(const T& mine, T (&all)[32]) {
  static_assert(sizeof(T) <= 64, "warp exchange slots are 64 bytes");
  WarpExchange(&mine, sizeof(T), all);
}

// Tensor-core and async-copy primitives (PTX semantics, see the file comment).
void LdMatrixX4(uint32_t (&r)[4], const void* row, bool trans);
void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool f16);
void CpAsync16(void* dst, const void* src, bool valid);
void CpAsyncCommit();
void CpAsyncWait(int pending);
uint32_t PackF16x2(float lo, float hi);
uint32_t E4m3x2ToF16x2(uint32_t two);
float HalfBitsToFloat(uint16_t h);

// Runs `body` as every thread of `grid` x `block` with `smem_bytes` of dynamic shared
// memory. Returns "" or what went wrong (a deadlock at a barrier, cp.async copies a thread
// never waited for).
std::string Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body);

}  // namespace mlaps_emu

#define threadIdx (::mlaps_emu::Current().thread_idx)
#define blockIdx (::mlaps_emu::Current().block_idx)
#define blockDim (::mlaps_emu::g_block_dim)
#define gridDim (::mlaps_emu::g_grid_dim)

inline constexpr int warpSize = 32;

inline void __syncthreads() { mlaps_emu::SyncThreads(); }

template <typename T>
inline T __shfl_xor(T v, int lane_mask, int width = warpSize) {
  (void)width;  // the kernels shuffle whole warps
  T all[32];
  mlaps_emu::WarpAllGather(v, all);
  return all[(threadIdx.x % 32) ^ lane_mask];
}

inline int __ffs(int x) { return __builtin_ffs(x); }
inline int atomicCAS(int* p, int compare, int value) {
  const int old = *p;
  if (old == compare) *p = value;
  return old;
}
inline long long clock64() { return mlaps_emu::Clock(); }

#endif  // MLAPS_TESTS_KERNELS_EMU_HIP_HOST_EMULATION_H_
