// Hopper (sm_90a) primitives of the sm90 decode kernel (mla_decode_sm90.h), each a thin
// wrapper over one PTX instruction so that the tile code reads like the math: shared-memory
// matrix descriptors, warpgroup MMAs (wgmma), mbarriers, cp.async completion on an
// mbarrier, proxy fences and named barriers. NVIDIA device pass; under MLAPS_HOST_EMULATION
// the same functions run on the CPU emulation of tests/kernels/emu instead.
#ifndef MLAPS_KERNELS_DECODE_SM90_PRIMITIVES_H_
#define MLAPS_KERNELS_DECODE_SM90_PRIMITIVES_H_

#include <cstdint>

#include "kernels/decode/mla_decode_device.h"

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

namespace mlaps {
namespace mla {

// Matrix descriptor swizzle modes (bits 62-63).
enum DescSwizzle : uint32_t { kSwizzleNone = 0, kSwizzle128B = 1, kSwizzle64B = 2 };

// Matrix descriptor of a wgmma operand at shared address `addr`: lbo / sbo are the "leading"
// and "stride" byte offsets of the layout (see each caller), all in 16-byte units. The
// device pass and the emulation share this encoding (the emulation checks the arguments).
__device__ __forceinline__ uint64_t MatrixDesc(uint32_t addr, uint32_t lbo, uint32_t sbo,
                                               DescSwizzle swizzle) {
#if defined(MLAPS_HOST_EMULATION)
  mlaps_emu::CheckMatrixDesc(addr, lbo, sbo, swizzle);
#endif
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (static_cast<uint64_t>(swizzle) << 62);
}

}  // namespace mla
}  // namespace mlaps

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

#if defined(MLAPS_HOST_EMULATION)

// The CPU emulation (tests/kernels/emu/hip_host_emulation.h, included first): the same
// functions on the emulated wgmma, mbarriers, named barriers and cp.async completion.
namespace mlaps {
namespace mla {

// A shared address: the byte offset from the block's dynamic shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) { return mlaps_emu::SmemAddr(p); }
__device__ __forceinline__ int WarpUniform(int x) {
  int all[32];
  mlaps_emu::WarpAllGather(x, all);
  return all[0];
}
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  mlaps_emu::MbarInit(bar, count);
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) { mlaps_emu::MbarArrive(bar); }
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  mlaps_emu::MbarWait(bar, parity);
}
__device__ __forceinline__ bool MbarTest(uint32_t bar, uint32_t parity) {
  return mlaps_emu::MbarTest(bar, parity);
}
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) { mlaps_emu::CpAsyncArrive(bar); }
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  mlaps_emu::MbarArriveExpectTx(bar, static_cast<int>(bytes));
}
template <bool kEvictFirst = false>  // an L2 hint: no effect on the emulated data
__device__ __forceinline__ void TmaLoad2D(uint32_t dst, const void* map, int x, int y,
                                          uint32_t bar) {
  mlaps_emu::TmaLoad2D(dst, map, x, y, bar);
}
__device__ __forceinline__ void FenceProxyAsync() {}
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  mlaps_emu::NamedBarrierSync(id, threads);
}
__device__ __forceinline__ void WgmmaFence() { mlaps_emu::WgmmaFence(); }
__device__ __forceinline__ void WgmmaCommit() { mlaps_emu::WgmmaCommit(); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  mlaps_emu::WgmmaWait(kPending);
}
// The accumulators are plain memory that the emulated wait writes: nothing to pin.
template <int kN>
__device__ __forceinline__ void PinAccumulators(float (&)[kN]) {}
__device__ __forceinline__ void WgmmaM64N32K16(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  mlaps_emu::Wgmma(d, 32, desc_a, desc_b, /*trans_b=*/false, accumulate != 0);
}
__device__ __forceinline__ void WgmmaM64N256K16TransB(float (&d)[128], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  mlaps_emu::Wgmma(d, 256, desc_a, desc_b, /*trans_b=*/true, accumulate != 0);
}
template <bool kBf16>
__device__ __forceinline__ void WgmmaM64N64K16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  mlaps_emu::Wgmma(d, 64, desc_a, desc_b, /*trans_b=*/false, accumulate != 0,
                   kBf16 ? mlaps_emu::WgmmaType::kBf16 : mlaps_emu::WgmmaType::kF16);
}
__device__ __forceinline__ void WgmmaM64N64K32E4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  mlaps_emu::Wgmma(d, 64, desc_a, desc_b, /*trans_b=*/false, accumulate != 0,
                   mlaps_emu::WgmmaType::kE4m3);
}
__device__ __forceinline__ void WgmmaM64N64K32E4m3Fresh(float (&d)[32], uint64_t desc_a,
                                                        uint64_t desc_b) {
  mlaps_emu::Wgmma(d, 64, desc_a, desc_b, /*trans_b=*/false, /*accumulate=*/false,
                   mlaps_emu::WgmmaType::kE4m3);
}
__device__ __forceinline__ void WgmmaM64N64K16F16RegA(float (&d)[32], const uint32_t (&a)[4],
                                                      uint64_t desc_b, int accumulate) {
  mlaps_emu::WgmmaRegA(d, 64, a, desc_b, /*trans_b=*/false, accumulate != 0,
                       mlaps_emu::WgmmaType::kF16);
}
__device__ __forceinline__ void LdMatrixX4TransShared(uint32_t (&r)[4], uint32_t addr) {
  mlaps_emu::LdMatrixX4(r, mlaps_emu::SmemBytes(addr, 16), /*trans=*/true);
}
__device__ __forceinline__ void WgmmaM64N256K16F16TransB(float (&d)[128], uint64_t desc_a,
                                                         uint64_t desc_b, int accumulate) {
  mlaps_emu::Wgmma(d, 256, desc_a, desc_b, /*trans_b=*/true, accumulate != 0,
                   mlaps_emu::WgmmaType::kF16);
}
__device__ __forceinline__ void WgmmaM64N256K16F16RegATransB(float (&d)[128],
                                                             const uint32_t (&a)[4],
                                                             uint64_t desc_b, int accumulate) {
  mlaps_emu::WgmmaRegA(d, 256, a, desc_b, /*trans_b=*/true, accumulate != 0,
                       mlaps_emu::WgmmaType::kF16);
}
template <bool kBf16, bool kTransA>
__device__ __forceinline__ void WgmmaM64N16K16(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  mlaps_emu::Wgmma(d, 16, desc_a, desc_b, /*trans_b=*/false, accumulate != 0,
                   kBf16 ? mlaps_emu::WgmmaType::kBf16 : mlaps_emu::WgmmaType::kF16, kTransA);
}
__device__ __forceinline__ void WgmmaM64N16K32E4m3(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  mlaps_emu::Wgmma(d, 16, desc_a, desc_b, /*trans_b=*/false, accumulate != 0,
                   mlaps_emu::WgmmaType::kE4m3);
}
__device__ __forceinline__ void WgmmaM64N16K32E4m3Fresh(float (&d)[8], uint64_t desc_a,
                                                        uint64_t desc_b) {
  mlaps_emu::Wgmma(d, 16, desc_a, desc_b, /*trans_b=*/false, /*accumulate=*/false,
                   mlaps_emu::WgmmaType::kE4m3);
}
__device__ __forceinline__ void WgmmaM64N16K16F16RegA(float (&d)[8], const uint32_t (&a)[4],
                                                      uint64_t desc_b, int accumulate) {
  mlaps_emu::WgmmaRegA(d, 16, a, desc_b, /*trans_b=*/false, accumulate != 0,
                       mlaps_emu::WgmmaType::kF16);
}
__device__ __forceinline__ uint2 LoadShared64(uint32_t addr) {
  uint2 v;
  memcpy(&v, mlaps_emu::SmemBytes(addr, 8), 8);
  return v;
}
// prmt.b32 (default mode): byte i of the result is byte (selector nibble i) of {b, a}
// (0-3: a's bytes, 4-7: b's).
__device__ __forceinline__ uint32_t PermuteBytes(uint32_t a, uint32_t b, uint32_t selector) {
  const uint64_t pool = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t pick = (selector >> (4 * i)) & 7u;
    out |= static_cast<uint32_t>((pool >> (8 * pick)) & 0xffu) << (8 * i);
  }
  return out;
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsInc() {}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsDec() {}
__device__ __forceinline__ void PrefetchL2Line(const void*) {}
__device__ __forceinline__ uint4 LoadGlobal16(const void* p) {
  uint4 v;
  memcpy(&v, p, 16);
  return v;
}
__device__ __forceinline__ uint32_t Bf16x2ToF16x2(uint32_t two) {
  return mlaps_emu::Bf16x2ToF16x2(two);
}
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  auto half = [&](int k) {
    const float x = Bf16ToFloat(static_cast<uint16_t>(a >> k));
    const float y = Bf16ToFloat(static_cast<uint16_t>(b >> k));
    return static_cast<uint32_t>(FloatToBf16(x * y)) << k;  // bf16 x bf16 is exact in fp32
  };
  return half(0) | half(16);
}
__device__ __forceinline__ void StoreShared16(uint32_t addr, uint16_t v) {
  memcpy(mlaps_emu::SmemBytes(addr, 2), &v, 2);
}
__device__ __forceinline__ void StoreShared32(uint32_t addr, uint32_t v) {
  memcpy(mlaps_emu::SmemBytes(addr, 4), &v, 4);
}
__device__ __forceinline__ void StoreShared128(uint32_t addr, uint4 v) {
  memcpy(mlaps_emu::SmemBytes(addr, 16), &v, 16);
}
__device__ __forceinline__ void StoreSharedF32(uint32_t addr, float v) {
  memcpy(mlaps_emu::SmemBytes(addr, 4), &v, 4);
}
__device__ __forceinline__ uint4 LoadShared128(uint32_t addr) {
  uint4 v;
  memcpy(&v, mlaps_emu::SmemBytes(addr, 16), 16);
  return v;
}
__device__ __forceinline__ float LoadSharedF32(uint32_t addr) {
  float v;
  memcpy(&v, mlaps_emu::SmemBytes(addr, 4), 4);
  return v;
}
// Per bf16 half: the larger magnitude of acc and two, NaN ignored, with the xor of their signs
// (max.xorsign.abs.bf16x2: one instruction); only the magnitude is meant to be read.
__device__ __forceinline__ uint32_t FoldMagnitudeBf16x2(uint32_t acc, uint32_t two) {
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t a = (acc >> (16 * h)) & 0xffffu, x = (two >> (16 * h)) & 0xffffu;
    const uint32_t am = a & 0x7fffu, xm = x & 0x7fffu;
    const bool a_nan = am > 0x7f80u, x_nan = xm > 0x7f80u;
    const uint32_t mag = a_nan ? xm : x_nan ? am : (am >= xm ? am : xm);
    out |= (mag | ((a ^ x) & 0x8000u)) << (16 * h);
  }
  return out;
}
// max(|x|) of two bf16 per half, NaN ignored (max.bf16x2 of the magnitudes).
__device__ __forceinline__ uint32_t MaxAbsBf16x2(uint32_t acc, uint32_t two) {
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t a = (acc >> (16 * h)) & 0x7fffu, x = (two >> (16 * h)) & 0x7fffu;
    out |= ((x > 0x7f80u || a >= x) ? a : x) << (16 * h);  // magnitudes compare as integers
  }
  return out;
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_HOST_EMULATION

#if defined(__CUDA_ARCH__) && !defined(MLAPS_HOST_EMULATION)

namespace mlaps {
namespace mla {

// x as a value the compiler knows to be the same in every lane (lane 0's): a warpgroup's
// role branch on it is not divergent, so ptxas keeps the wgmma pipeline inside it
// (otherwise it serializes every wgmma: C7520).
__device__ __forceinline__ int WarpUniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival (release semantics: this thread's earlier shared-memory writes are visible
// to a thread whose wait sees the phase complete).
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Whether the barrier's phase with parity `parity` has completed, without waiting (acquire,
// like a wait that returns). Several tests issue back to back, their latencies overlapping,
// where waits one after another would each take a round trip.
__device__ __forceinline__ bool MbarTest(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (the
// barrier's count includes this arrival: .noinc).
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` more transaction bytes in the current phase (the
// phase completes when both the arrivals and the bytes are in).
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// TMA: the box at element (x, y) of the 2-D tensor map at `map` (a __grid_constant__ kernel
// parameter) into shared memory at `dst`, completing its bytes on `bar`. kEvictFirst: its L2
// lines are the first to be evicted (data read once, or by a kv lane partner soon after).
template <bool kEvictFirst = false>
__device__ __forceinline__ void TmaLoad2D(uint32_t dst, const void* map, int x, int y,
                                          uint32_t bar) {
  if constexpr (kEvictFirst) {
    asm volatile(
        "{\n.reg .b64 pol;\ncreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], pol;\n}\n" ::"r"(dst),
        "l"(map), "r"(x), "r"(y), "r"(bar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];\n" ::"r"(dst),
        "l"(map), "r"(x), "r"(y), "r"(bar)
        : "memory");
  }
}
// Orders this thread's generic-proxy shared memory accesses before later async-proxy ones
// (wgmma operand reads).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Named barrier `id` (1..15; __syncthreads is 0) over `threads` threads (whole warps), all of
// them at this one instruction (bar.sync is barrier.sync.aligned).
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma wait or
// issue: the registers are rewritten by the asynchronous MMA behind its back.
template <int kN>
__device__ __forceinline__ void PinAccumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (m64n32, fp32) = A B (accumulate 0) or d + A B with A = 64 x 16 and B = 16 x 32 bf16
// from shared memory, both K-major.
__device__ __forceinline__ void WgmmaM64N32K16(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void WgmmaM64N256K16TransB(float (&d)[128], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (m64n64, fp32) = A B (+ d) with A = 64 x 16 and B = 16 x 64 bf16 (kBf16) or f16 from shared
// memory, both K-major.
#define MLAPS_WGMMA_M64N64K16(type)                                                                \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." type "." type                                  \
      " {"                                                                                         \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"             \
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <bool kBf16>
__device__ __forceinline__ void WgmmaM64N64K16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  if constexpr (kBf16) {
    MLAPS_WGMMA_M64N64K16("bf16");
  } else {
    MLAPS_WGMMA_M64N64K16("f16");
  }
}
#undef MLAPS_WGMMA_M64N64K16

// D (+)= A B over 32 e4m3 values of K (QGMMA): A 64 x 32 and B 32 x 64, both K-major in shared
// memory (fp8 wgmma reads no MN-major operand); products exact, but the H200 accumulates with
// less than fp32 precision (an S over 576 dims in one accumulator missed the LSE gate by 4x;
// notes.md, session 8), which the CPU emulation (fp32 sums) does not model.
__device__ __forceinline__ void WgmmaM64N64K32E4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The same starting a chain, d = A B: d is an output only, so the caller need not zero it
// (a non-wgmma write of an accumulator while other wgmmas are in flight serializes them:
// ptxas C7515).
__device__ __forceinline__ void WgmmaM64N64K32E4m3Fresh(float (&d)[32], uint64_t desc_a,
                                                        uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, 0, 1, 1;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
        "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
        "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
        "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "l"(desc_a), "l"(desc_b));
}

// d (m64n64, fp32) = A B (+ d) with A = 64 x 16 f16 from registers (the m64k16 A fragment: four
// 32-bit registers of f16 pairs) and B = 16 x 64 f16 K-major from shared memory.
__device__ __forceinline__ void WgmmaM64N64K16F16RegA(float (&d)[32], const uint32_t (&a)[4],
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// Four 8 x 8 matrices of 16-bit elements, transposed (ldmatrix .trans): lanes 8 j .. 8 j + 7
// give the shared addresses of matrix j's eight 16-byte rows; r[j] is matrix j's fragment.
__device__ __forceinline__ void LdMatrixX4TransShared(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

#define MLAPS_WGMMA_D128                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define MLAPS_WGMMA_D128_REGS                                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d (m64n256, fp32) += A B with A = 64 x 16 f16 K-major and B = 16 x 256 f16 MN-major
// (transposed), both from shared memory.
__device__ __forceinline__ void WgmmaM64N256K16F16TransB(float (&d)[128], uint64_t desc_a,
                                                         uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" MLAPS_WGMMA_D128_REGS
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : MLAPS_WGMMA_D128
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The same with A from registers (the m64k16 A fragment: four 32-bit registers of f16 pairs).
__device__ __forceinline__ void WgmmaM64N256K16F16RegATransB(float (&d)[128],
                                                             const uint32_t (&a)[4],
                                                             uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" MLAPS_WGMMA_D128_REGS
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : MLAPS_WGMMA_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
#undef MLAPS_WGMMA_D128
#undef MLAPS_WGMMA_D128_REGS

// d (m64n16, fp32) = A B (+ d) with A = 64 x 16 (K-major, or MN-major with kTransA) and B = 16
// x 16 (K-major), bf16 or f16, both from shared memory.
template <bool kBf16, bool kTransA>
__device__ __forceinline__ void WgmmaM64N16K16(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA ? 1 : 0));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA ? 1 : 0));
  }
}

// d (m64n16, fp32) = A B (+ d) over 32 e4m3 values of K (QGMMA): A 64 x 32 and B 32 x 16, both
// K-major in shared memory. Exact products; the H200 sums them with fewer than fp32's bits
// (see WgmmaM64N64K32E4m3), so callers keep one k step an accumulator and add in fp32.
__device__ __forceinline__ void WgmmaM64N16K32E4m3(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The same starting a chain, d = A B: d is an output only, so the caller need not zero it
// (a non-wgmma write of an accumulator while other wgmmas are in flight serializes them:
// ptxas C7515).
__device__ __forceinline__ void WgmmaM64N16K32E4m3Fresh(float (&d)[8], uint64_t desc_a,
                                                        uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, 0, 1, 1;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7])
      : "l"(desc_a), "l"(desc_b));
}

// d (m64n16, fp32) = A B (+ d) with A = 64 x 16 f16 from registers (the m64k16 A fragment) and
// B = 16 x 16 f16 K-major from shared memory.
__device__ __forceinline__ void WgmmaM64N16K16F16RegA(float (&d)[8], const uint32_t (&a)[4],
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// Register budget of the calling warpgroup (sm_90a; the kernel needs a launch-bounds cap).
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Starts moving the 128-byte line holding `p` into the L2.
__device__ __forceinline__ void PrefetchL2Line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// 16 bytes of read-only global memory, not kept in L1 (each kv row is read once per SM).
__device__ __forceinline__ uint4 LoadGlobal16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Shared memory by 32-bit shared address (no 64-bit generic pointer to keep in registers).
__device__ __forceinline__ void StoreShared16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}
__device__ __forceinline__ void StoreShared32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void StoreShared128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void StoreSharedF32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ float LoadSharedF32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 LoadShared128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ uint2 LoadShared64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

// prmt.b32: byte i of the result is byte (selector nibble i) of {b, a} (0-3: a's, 4-7: b's).
__device__ __forceinline__ uint32_t PermuteBytes(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(out) : "r"(a), "r"(b), "r"(selector));
  return out;
}

// Two bf16 (low half first) as two f16, round to nearest even: exact for magnitudes in
// [2^-14, 65504], the f16 quantum 2^-24 below, inf from 65520 up.
__device__ __forceinline__ uint32_t Bf16x2ToF16x2(uint32_t two) {
  uint32_t out;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n"
      : "=r"(out)
      : "f"(__uint_as_float(two & 0xffff0000u)), "f"(__uint_as_float(two << 16)));
  return out;
}

// a x b per bf16 half, round to nearest even (mul.rn.bf16x2: sm_90).
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t out;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(a), "r"(b));
  return out;
}

// Per bf16 half: max(|acc|, |two|) with the xor of their signs, NaN ignored; read the
// magnitude.
__device__ __forceinline__ uint32_t FoldMagnitudeBf16x2(uint32_t acc, uint32_t two) {
  uint32_t out;
  asm("max.xorsign.abs.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(acc), "r"(two));
  return out;
}

// max(acc, |two|) per bf16 half (max.bf16x2 ignores NaN).
__device__ __forceinline__ uint32_t MaxAbsBf16x2(uint32_t acc, uint32_t two) {
  uint32_t out;
  asm("max.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(acc), "r"(two & 0x7fff7fffu));
  return out;
}

}  // namespace mla
}  // namespace mlaps

#endif  // __CUDA_ARCH__ && !MLAPS_HOST_EMULATION

#endif  // MLAPS_KERNELS_DECODE_SM90_PRIMITIVES_H_
