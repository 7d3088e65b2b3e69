// The tensor-core rate of the wgmma shapes the sm90 decode kernels issue, alone and beside each
// other, on operands already in shared memory (no loads, no softmax, no barriers): the ceiling
// a kv-block shape can reach before any scheduling. It answers questions such as "is an S on
// 32-token blocks (m64n32k16, both operands from shared memory) as fast per FMA as on 64-token
// blocks?" before a kernel is built around the answer.
//
// One block an SM (216 KB of dynamic shared memory: the Q tile and two 72 KB kv slots, as the
// f16pv kernel), one or two warpgroups each issuing `iters` kv blocks' worth of one shape:
//   s32     S of a 32-token block: 9 chunks x 4 k steps of m64n32k16, A (Q) and B (K) shared
//   s64     S of a 64-token block: the same with m64n64k16 (the f16pv kernel's S)
//   pv64r   P V of a 64-token block, one consumer: 4 dims tiles x 4 k steps of m64n64k16 with A
//           (V^T) from registers, B (P^T) shared (the f16pv kernel's P V, A already there)
//   pv64v   the same with each tile's V^T loaded by ldmatrix .trans, scaled and widened to f16
//           first (the f16pv kernel's bf16 P V, Bf16PvT, without its barriers)
//   pv256   the same FMAs as 4 k steps of m64n256k16, A (P) and B (V, MN-major) shared
//   pv256r  the same with A (P) from registers
//   s64+pv64r, s64+pv64v, s32+pv64v  warpgroup 0 the S, warpgroup 1 the P V (the two
//           consumers' overlap)
// Each warpgroup commits a kv block's wgmmas as one group and waits for it before the next (as
// the kernels do). Printed: the busiest block's cycles, FMAs an SM a cycle and the share of the
// dense bf16 / f16 peak (2048 FMAs an SM a cycle on sm_90), best of three launches.
//
//   gpu_bundle/bin/kernels_decode_sm90_wgmma_rate [ITERS]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/decode/sm90_primitives.h"
#include "kernels/platform/hip_check.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps {
namespace {

enum class Shape : int { kS32, kS64, kPv64RegA, kPv64Vt, kPv256, kPv256RegA };

constexpr int kChunk = 64 * 128;          // 64 rows (or tokens) x 64 bf16 dims
constexpr int kTile = 9 * kChunk;         // the Q tile, or one 64-token kv block
constexpr int kUsed = 3 * kTile;          // Q + two kv slots
constexpr int kSmemBytes = kUsed + 1024;  // + the 1024-byte alignment of swizzled chunks
constexpr int kPeakFmaPerSmCycle = 2048;  // dense bf16 / f16 wgmma, sm_90

// FMAs of one kv block's worth of a shape, one warpgroup.
constexpr int64_t FmasOf(Shape s) {
  return s == Shape::kS32   ? int64_t{64} * 32 * 576
         : s == Shape::kS64 ? int64_t{64} * 64 * 576
                            : int64_t{64} * 256 * 64;
}
const char* NameOf(Shape s) {
  switch (s) {
    case Shape::kS32:
      return "s32";
    case Shape::kS64:
      return "s64";
    case Shape::kPv64RegA:
      return "pv64r";
    case Shape::kPv64Vt:
      return "pv64v";
    case Shape::kPv256:
      return "pv256";
    case Shape::kPv256RegA:
      return "pv256r";
  }
  return "?";
}

#if defined(__CUDA_ARCH__)
using namespace mla;  // NOLINT: the primitives

// One kv block's worth of `shape` by the calling warpgroup: `q` the Q tile, `kv` its kv slot.
template <Shape kShape>
__device__ __forceinline__ void OneBlock(uint32_t q, uint32_t kv, float (&acc)[128]) {
  // A fragments of the register-A shapes: any f16 bits (the rate does not depend on them).
  const uint32_t a[4] = {0x3c003c01u, 0x3c023c03u, 0x3c043c05u, 0x3c063c07u};
  float(&s)[32] = *reinterpret_cast<float(*)[32]>(&acc[0]);
  float(&s16)[16] = *reinterpret_cast<float(*)[16]>(&acc[0]);
  WgmmaFence();
  if constexpr (kShape == Shape::kS32 || kShape == Shape::kS64) {
    constexpr int kKvChunk = kShape == Shape::kS32 ? kChunk / 2 : kChunk;
#pragma unroll
    for (int c = 0; c < 9; ++c) {
      const uint64_t a0 = MatrixDesc(q + c * kChunk, 16, 1024, kSwizzle128B);
      const uint64_t b0 = MatrixDesc(kv + c * kKvChunk, 16, 1024, kSwizzle128B);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if constexpr (kShape == Shape::kS32) {
          WgmmaM64N32K16(s16, a0 + 2 * kk, b0 + 2 * kk, c + kk > 0);
        } else {
          WgmmaM64N64K16<true>(s, a0 + 2 * kk, b0 + 2 * kk, c + kk > 0);
        }
      }
    }
  } else if constexpr (kShape == Shape::kPv64RegA) {
    const uint64_t p0 = MatrixDesc(kv + 8 * kChunk, 16, 1024, kSwizzle128B);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      float(&o)[32] = *reinterpret_cast<float(*)[32]>(&acc[32 * m]);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) WgmmaM64N64K16F16RegA(o, a, p0 + 2 * kk, 1);
    }
  } else if constexpr (kShape == Shape::kPv64Vt) {
    // Dims tile m: chunk m of the slot, 16 dims a warp x 16 tokens a k step by ldmatrix .trans
    // (the addresses of LoadBf16VtTile), scaled by 2^-8 and widened; A double-buffered.
    const uint64_t p0 = MatrixDesc(kv + 8 * kChunk, 16, 1024, kSwizzle128B);
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int tok = 8 * (lane >> 4) + (lane & 7), unit = 2 * warp + ((lane >> 3) & 1);
    uint32_t a2[2][4][4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if (m >= 2) WgmmaWait<1>();
      uint32_t raw[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int t = 16 * kk + tok;
        LdMatrixX4TransShared(raw[kk], kv + m * kChunk + t * 128 + ((unit ^ (t & 7)) << 4));
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          a2[m & 1][kk][r] = Bf16x2ToF16x2(MulBf16x2(raw[kk][r], 0x3b803b80u));
        }
      }
      float(&o)[32] = *reinterpret_cast<float(*)[32]>(&acc[32 * m]);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) WgmmaM64N64K16F16RegA(o, a2[m & 1][kk], p0 + 2 * kk, 1);
      WgmmaCommit();
    }
  } else {
    // P (64 rows x 64 tokens, K-major) in the slot's last chunk; V (64 tokens x 256 dims,
    // MN-major): four dims chunks 8 KB apart, token rows 128 bytes apart.
    const uint64_t p0 = MatrixDesc(kv + 8 * kChunk, 16, 1024, kSwizzle128B);
    const uint64_t v0 = MatrixDesc(kv, kChunk, 1024, kSwizzle128B);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t v = v0 + ((16 * 128 * kk) >> 4);
      if constexpr (kShape == Shape::kPv256) {
        WgmmaM64N256K16F16TransB(acc, p0 + 2 * kk, v, 1);
      } else {
        WgmmaM64N256K16F16RegATransB(acc, a, v, 1);
      }
    }
  }
  WgmmaCommit();
  WgmmaWait<0>();
  PinAccumulators(acc);
}

template <Shape kShape>
__device__ __forceinline__ void Run(int iters, uint32_t q, uint32_t kv, float (&acc)[128]) {
#pragma unroll 1
  for (int i = 0; i < iters; ++i) OneBlock<kShape>(q, kv, acc);
}
#endif

// Warpgroup w runs shape kW0 (w = 0) or kW1 (w = 1); `cycles[block * 2 + w]`: its clock cycles
// from the block's common start. `sink` is written only if an accumulator is NaN (never: it
// keeps the results live).
template <Shape kW0, Shape kW1>
__global__ void __launch_bounds__(256, 1)
    WgmmaRateKernel(int iters, long long* cycles, float* sink) {
#if defined(__CUDA_ARCH__)
  extern __shared__ uint8_t smem[];
  const uint32_t base = (SmemAddr(smem) + 1023u) & ~1023u;
  uint8_t* aligned = smem + (base - SmemAddr(smem));
  // Small finite values in both readings (bf16 0x3c.. ~ 0.008-0.016, f16 0x3c.. ~ 1-1.25).
  for (int i = threadIdx.x; i < kUsed / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(aligned)[i] = 0x3c003c00u | ((i * 2654435761u >> 8) & 0x00ff00ffu);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma
  __syncthreads();
  const int w = threadIdx.x / 128;
  const uint32_t q = base, kv = base + kTile + w * kTile;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  const long long t0 = clock64();
  if (w == 0) {
    Run<kW0>(iters, q, kv, acc);
  } else {
    Run<kW1>(iters, q, kv, acc);
  }
  const long long t1 = clock64();
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 2 + w] = t1 - t0;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < 128; ++i) nan = nan || acc[i] != acc[i];
  if (nan) sink[threadIdx.x] = acc[0];
#endif
}

struct Case {
  Shape w0, w1;
  int warpgroups;  // 1: the launch has 128 threads (warpgroup 0 only)
};

template <Shape kW0, Shape kW1>
void Measure(const Case& c, int iters, int sms, long long* cycles_d, float* sink_d) {
  auto* kernel = WgmmaRateKernel<kW0, kW1>;
  MLAPS_CHECK_HIP(
      hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  std::vector<long long> cycles(2 * sms);
  long long best = 0;
  float best_ms = 0.0f;
  hipEvent_t start, stop;
  MLAPS_CHECK_HIP(hipEventCreate(&start));
  MLAPS_CHECK_HIP(hipEventCreate(&stop));
  for (int rep = 0; rep < 3; ++rep) {
    MLAPS_CHECK_HIP(hipEventRecord(start, nullptr));
    // Warpgroup 1 runs kW1 `iters` times, or (one warpgroup) 128 threads only.
    kernel<<<sms, 128 * c.warpgroups, kSmemBytes>>>(iters, cycles_d, sink_d);
    MLAPS_CHECK_HIP(hipGetLastError());
    MLAPS_CHECK_HIP(hipEventRecord(stop, nullptr));
    MLAPS_CHECK_HIP(hipEventSynchronize(stop));
    MLAPS_CHECK_HIP(hipMemcpy(cycles.data(), cycles_d, cycles.size() * sizeof(long long),
                              hipMemcpyDeviceToHost));
    long long busiest = 0;
    for (int b = 0; b < sms; ++b) {
      for (int w = 0; w < c.warpgroups; ++w) busiest = std::max(busiest, cycles[2 * b + w]);
    }
    float ms = 0.0f;
    MLAPS_CHECK_HIP(hipEventElapsedTime(&ms, start, stop));
    if (rep == 0 || busiest < best) {
      best = busiest;
      best_ms = ms;
    }
  }
  MLAPS_CHECK_HIP(hipEventDestroy(start));
  MLAPS_CHECK_HIP(hipEventDestroy(stop));
  int64_t fmas = FmasOf(c.w0) * iters;
  if (c.warpgroups == 2) fmas += FmasOf(c.w1) * iters;
  const double per_cycle = static_cast<double>(fmas) / static_cast<double>(best);
  char name[32];
  std::snprintf(name, sizeof(name), "%s%s%s", NameOf(c.w0), c.warpgroups == 2 ? "+" : "",
                c.warpgroups == 2 ? NameOf(c.w1) : "");
  std::printf("| %-12s | %d | %10lld | %7.1f | %5.1f%% | %8.3f | %6.0f |\n", name, c.warpgroups,
              best, per_cycle, 100.0 * per_cycle / kPeakFmaPerSmCycle, best_ms,
              best / (best_ms * 1e3));
  std::fflush(stdout);
}

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  using mlaps::Shape;
  const int iters = argc > 1 ? std::atoi(argv[1]) : 4000;
  if (iters <= 0) {
    std::fprintf(stderr, "usage: %s [ITERS > 0]\n", argv[0]);
    return 2;
  }
  int sms = 0;
  MLAPS_CHECK_HIP(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, 0));
  long long* cycles_d = nullptr;
  float* sink_d = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&cycles_d, 2 * sms * sizeof(long long)));
  MLAPS_CHECK_HIP(hipMalloc(&sink_d, 256 * sizeof(float)));
  std::printf("wgmma rate, %d SMs, %d kv blocks a warpgroup, best of 3 launches\n\n", sms, iters);
  // ms: the launch's event time (with the launch and the shared-memory fill); MHz: busiest
  // cycles over it, so a little under the SM clock.
  std::printf("| shape | warpgroups | busiest cycles | FMA/SM/cycle | of peak | ms | ~MHz |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  using mlaps::Measure;
  for (int wgs = 1; wgs <= 2; ++wgs) {
    Measure<Shape::kS32, Shape::kS32>({Shape::kS32, Shape::kS32, wgs}, iters, sms, cycles_d,
                                      sink_d);
    Measure<Shape::kS64, Shape::kS64>({Shape::kS64, Shape::kS64, wgs}, iters, sms, cycles_d,
                                      sink_d);
    Measure<Shape::kPv64RegA, Shape::kPv64RegA>({Shape::kPv64RegA, Shape::kPv64RegA, wgs}, iters,
                                                sms, cycles_d, sink_d);
    Measure<Shape::kPv64Vt, Shape::kPv64Vt>({Shape::kPv64Vt, Shape::kPv64Vt, wgs}, iters, sms,
                                            cycles_d, sink_d);
    Measure<Shape::kPv256, Shape::kPv256>({Shape::kPv256, Shape::kPv256, wgs}, iters, sms, cycles_d,
                                          sink_d);
    Measure<Shape::kPv256RegA, Shape::kPv256RegA>({Shape::kPv256RegA, Shape::kPv256RegA, wgs},
                                                  iters, sms, cycles_d, sink_d);
  }
  Measure<Shape::kS64, Shape::kPv64RegA>({Shape::kS64, Shape::kPv64RegA, 2}, iters, sms, cycles_d,
                                         sink_d);
  Measure<Shape::kS64, Shape::kPv64Vt>({Shape::kS64, Shape::kPv64Vt, 2}, iters, sms, cycles_d,
                                       sink_d);
  Measure<Shape::kS32, Shape::kPv64Vt>({Shape::kS32, Shape::kPv64Vt, 2}, iters, sms, cycles_d,
                                       sink_d);
  MLAPS_CHECK_HIP(hipFree(cycles_d));
  MLAPS_CHECK_HIP(hipFree(sink_d));
  return 0;
}
