// A CPU emulation of the small part of the HIP/CUDA device dialect that the kernels use, so
// that they run unchanged on the host in CPU tests: kernels/decode/mla_decode_device.h and the
// sm90 kernels (tests/kernels/decode: the same tile code, MMA and wgmma fragment layouts,
// cp.async rings, mbarriers, compared with the simulator) and the GPU planner
// (kernels/planner/planner_kernel_device.h in tests/kernels/planner/planner_kernel_emu_test.cc:
// shuffles, ballots, block scans, __syncthreads_or, compared with the host planner).
//
// Model: blocks run one after another; a block's threads are cooperatively scheduled fibers
// (own stacks, switched with __builtin_setjmp / longjmp) that switch only at barriers (and at an
// mbarrier arrival that completes a phase, below), so a run is deterministic. Warp collectives
// (shuffles, ldmatrix, mma.sync) gather the 32 lanes' operands at a warp barrier. A barrier that
// some threads never reach is reported as a deadlock instead of hanging. cp.async: the destination
// is poisoned (all bytes 0xff: NaN in bf16, f16, fp32 and fp8 e4m3fn) when the copy is issued and
// filled when the issuing thread's wait retires its group, so reading a buffer before its copies
// are waited for, or refilling one that others still read, shows up as NaNs. Dynamic shared memory
// starts as 0xff bytes too. Addresses that the hardware requires aligned (ldmatrix rows, cp.async,
// 16-byte vector accesses through the helpers) abort with a message when they are not.
//
// Hopper primitives (kernels/decode/sm90_primitives.h maps its wrappers onto these, for
// kernels/decode/mla_decode_sm90.h), with PTX semantics:
//   * Shared addresses (SmemAddr) are byte offsets from the block's dynamic shared memory.
//   * wgmma (m64nNk16, bf16 or f16, A and B from shared memory through matrix descriptors, or
//     A from registers) is a warpgroup collective (128 consecutive threads): the operands are
//     decoded from the descriptors as the hardware does (K-major and MN-major canonical layouts, no
//     swizzle and 32 / 64 / 128-byte swizzles, the swizzle applied to the shared address) and D = A
//     B (+ D) is computed in fp32 from exact products; each thread's accumulator fragment follows
//     the m64nN register layout. Completion is modeled: the operands are read when the wgmma is
//     issued and read again when a wgmma.wait_group retires it and must not have changed
//     (shared memory rewritten under an in-flight wgmma aborts); an operand holding poison
//     (0xffff: never written, or a cp.async that has not landed) aborts, and so does a change
//     of the A registers of a register-A wgmma before its retiring wait; the
//     accumulators read as NaN from issue until the retiring wait, and writing them in that
//     window aborts; a wgmma that starts an accumulator chain needs a wgmma.fence since the
//     warpgroup's last wait; swizzled operand atoms must lie on the swizzle's grid (1024 bytes
//     for 128B) of shared addresses, descriptor addresses and strides 16-byte aligned.
//   * mbarriers: arrival counts and phases (mbarrier.init / arrive / try_wait.parity); a
//     waiting thread yields, and a wait that can never complete is reported as a deadlock. A
//     thread's arrival that completes a phase yields too, so that the waiters may run before
//     it goes on: a release placed before the writes it publishes is then seen (under a
//     warpgroup-priority schedule the waiter reads, or a wgmma of it reads, the old bytes).
//     The barrier's 8 bytes of shared memory must not be overwritten while it is in use.
//   * cp.async.mbarrier.arrive.noinc: the thread's outstanding cp.async copies and then its
//     arrival complete as late as possible (when some thread waits on that barrier and needs
//     them), so that reading the copies' destinations without waiting shows the poison.
//   * bar.sync id, count: counted among the threads that reach it. Proxy fences: no-ops.
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
#define __noinline__  // inlining does not matter on the host (and the empty form keeps
                      // libstdc++'s __attribute__((__noinline__)) valid)
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
struct alignas(16) int4 {
  int32_t x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline int4 make_int4(int32_t x, int32_t y, int32_t z, int32_t w) { return {x, y, z, w}; }
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
// __syncthreads_or: a block barrier that also returns whether any thread passed a nonzero
// predicate.
int SyncThreadsOr(int predicate);
// __syncthreads_count: the same barrier, returning how many threads passed a nonzero predicate.
int SyncThreadsCount(int predicate);
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
// Two bf16 (low half first) -> two f16, round to nearest even (exact for magnitudes in
// [2^-14, 65504]; beyond 65504 -> inf).
uint32_t Bf16x2ToF16x2(uint32_t two);
float HalfBitsToFloat(uint16_t h);

// Hopper primitives (see the file comment). Shared addresses are byte offsets from the
// dynamic shared memory base.
uint32_t SmemAddr(const void* p);
// The bytes [addr, addr + bytes) of dynamic shared memory by shared address, for an access
// of that size: aborts unless aligned to it and inside the launch's dynamic shared memory.
uint8_t* SmemBytes(uint32_t addr, int bytes);
// Checks the arguments of a wgmma matrix descriptor (kernels/decode/sm90_primitives.h
// MatrixDesc encodes it): 16-byte aligned address and strides that fit the 14-bit fields.
void CheckMatrixDesc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle);
void MbarInit(uint32_t bar, int count);
void MbarArrive(uint32_t bar);
void MbarWait(uint32_t bar, uint32_t parity);
// mbarrier.test_wait: lands the barrier's in-flight arrivals (as a wait would), never yields.
bool MbarTest(uint32_t bar, uint32_t parity);
void CpAsyncArrive(uint32_t bar);
void NamedBarrierSync(int id, int threads);
// TMA: a 2-D tensor map in the 128 bytes at `map` (rows of `inner` elements of `elem_bytes`,
// `row_stride` bytes apart; boxes of box_rows x box_inner elements landing row after row, with
// the 64- or 128-byte swizzle when swizzle_bytes asks for one: 0, 64 or 128, the box's row), as
// cuTensorMapEncodeTiled makes on the GPU (aborts on what the emulation does not model);
// mbarrier.arrive.expect_tx; and the load of the box at element (x, y) into shared memory,
// completing `bytes` on `bar` when it lands (as late as a waiter on `bar` allows; elements outside
// the tensor read as zeros).
void EncodeTmaMap2D(void* map, const void* base, int elem_bytes, int64_t inner, int64_t rows,
                    int64_t row_stride, int box_inner, int box_rows, int swizzle_bytes);
void MbarArriveExpectTx(uint32_t bar, int bytes);
void TmaLoad2D(uint32_t dst, const void* map, int x, int y, uint32_t bar);
void WgmmaFence();
void WgmmaCommit();
void WgmmaWait(int pending);
// The element type of a wgmma's A and B operands (both the same).
enum class WgmmaType { kBf16, kF16, kE4m3 };
// d (m64n`n`, fp32 fragment) = A B (+ d with `accumulate`): A 64 x K K-major or, with
// trans_a, MN-major; B K x n K-major or, with trans_b, MN-major (MN-major: 16-bit types only);
// operands in shared memory. K = 16 for bf16 /
// f16, 32 for e4m3 (one k step is 32 bytes of a row either way). The exact products are summed
// in fp32 here; the H200's e4m3 wgmma keeps fewer accumulator bits (see
// kernels/decode/notes.md, session 8), so e4m3 accuracy is checked on the GPU only.
void Wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_b, bool accumulate,
           WgmmaType type = WgmmaType::kBf16, bool trans_a = false);
// The same with A (64 x 16) from registers: each thread passes its four 32-bit registers of
// the A fragment (warp w of the warpgroup holds rows 16 w .. 16 w + 15; lane l: a[0] = row
// 16 w + l / 4, k = 2 (l % 4) and + 1 (low half first); a[1] the row + 8; a[2], a[3] the same
// rows at k + 8). The registers must not change until the wait that retires the wgmma
// (checked there).
void WgmmaRegA(float* d, int n, const uint32_t (&a)[4], uint64_t desc_b, bool trans_b,
               bool accumulate, WgmmaType type);

// The order in which a block's threads run between barriers. Every order is a legal
// execution (nothing bounds how far one warp runs ahead of another), and a race-free kernel
// computes the same bits under each: kRoundRobin runs every thread once a pass;
// kLowWarpgroupsFirst lets the lowest warpgroups (128 threads) run as far ahead as their
// synchronization allows before the next warpgroup gets a turn (and starts over as soon as
// one of them can continue); kHighWarpgroupsFirst the same from the highest warpgroup down;
// kOneWarpLast runs warp `last_warp` of the block only while every other thread is blocked (a
// warp whose arrivals nobody waits for falls behind by any number of mbarrier phases: its
// parity waits must not depend on it staying close).
enum class Schedule { kRoundRobin, kLowWarpgroupsFirst, kHighWarpgroupsFirst, kOneWarpLast };

// Runs `body` as every thread of `grid` x `block` with `smem_bytes` of dynamic shared
// memory. Returns "" or what went wrong (a deadlock at a barrier or mbarrier, cp.async copies a
// thread never waited for, wgmmas never waited for).
std::string Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body,
                   Schedule schedule = Schedule::kRoundRobin, int last_warp = 0);

}  // namespace mlaps_emu

#define threadIdx (::mlaps_emu::Current().thread_idx)
#define blockIdx (::mlaps_emu::Current().block_idx)
#define blockDim (::mlaps_emu::g_block_dim)
#define gridDim (::mlaps_emu::g_grid_dim)

inline constexpr int warpSize = 32;

inline void __syncthreads() { mlaps_emu::SyncThreads(); }
// Programmatic dependent launch (kernels/platform/hip_runtime.h): the emulation runs one
// launch at a time, so the previous kernel has always completed.
inline void mlapsGridDependencyWait() {}
inline void mlapsTriggerDependents() {}

template <typename T>
inline T __shfl_xor(T v, int lane_mask, int width = warpSize) {
  (void)width;  // the kernels shuffle whole warps
  T all[32];
  mlaps_emu::WarpAllGather(v, all);
  return all[(threadIdx.x % 32) ^ lane_mask];
}

inline int __syncthreads_or(int predicate) { return mlaps_emu::SyncThreadsOr(predicate); }
inline int __syncthreads_count(int predicate) { return mlaps_emu::SyncThreadsCount(predicate); }

// Lane `src_lane` of the warp (modulo the warp size; width: whole warps only).
template <typename T>
inline T __shfl(T v, int src_lane, int width = warpSize) {
  (void)width;
  T all[32];
  mlaps_emu::WarpAllGather(v, all);
  return all[src_lane & 31];
}
// Lane - delta, or the caller's own value below lane delta.
template <typename T>
inline T __shfl_up(T v, unsigned delta, int width = warpSize) {
  (void)width;
  T all[32];
  mlaps_emu::WarpAllGather(v, all);
  const unsigned lane = threadIdx.x % 32;
  return lane >= delta ? all[lane - delta] : v;
}
// Lane + delta, or the caller's own value past the last lane.
template <typename T>
inline T __shfl_down(T v, unsigned delta, int width = warpSize) {
  (void)width;
  T all[32];
  mlaps_emu::WarpAllGather(v, all);
  const unsigned lane = threadIdx.x % 32;
  return lane + delta < 32 ? all[lane + delta] : v;
}
// Bit l: lane l's predicate (a 32-lane warp: the high 32 bits are 0).
inline unsigned long long __ballot64(int predicate) {
  int all[32];
  mlaps_emu::WarpAllGather(predicate, all);
  unsigned long long bits = 0;
  for (int l = 0; l < 32; ++l) bits |= static_cast<unsigned long long>(all[l] != 0) << l;
  return bits;
}

inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline float __fdividef(float a, float b) { return a / b; }
// CUDA's min / max overloads for mixed integer types: the usual arithmetic conversions.
template <typename A, typename B>
inline auto min(A a, B b) -> decltype(a + b) {
  return b < a ? b : a;
}
template <typename A, typename B>
inline auto max(A a, B b) -> decltype(a + b) {
  return a < b ? b : a;
}

// Atomics: threads switch only at barriers, so a read-modify-write is atomic as it stands.
inline int atomicCAS(int* p, int compare, int value) {
  const int old = *p;
  if (old == compare) *p = value;
  return old;
}
template <typename T>
inline T atomicMin(T* p, T value) {
  const T old = *p;
  if (value < old) *p = value;
  return old;
}
template <typename T>
inline T atomicMax(T* p, T value) {
  const T old = *p;
  if (old < value) *p = value;
  return old;
}
template <typename T>
inline T atomicAdd(T* p, T value) {
  const T old = *p;
  *p = old + value;
  return old;
}
template <typename T>
inline T atomicExch(T* p, T value) {
  const T old = *p;
  *p = value;
  return old;
}
// Memory fences: blocks run one after another and a block's threads switch only at barriers,
// so every write is visible to every later read already.
inline void __threadfence() {}
inline long long clock64() { return mlaps_emu::Clock(); }
inline long long wall_clock64() { return mlaps_emu::Clock(); }

#endif  // MLAPS_TESTS_KERNELS_EMU_HIP_HOST_EMULATION_H_
