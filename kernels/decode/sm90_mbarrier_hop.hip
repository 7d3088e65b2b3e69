// The latency of one mbarrier hand-off between two warpgroups of a block (an arrival that
// completes a phase, seen by the other's wait), the step the sm90 kernels' relays are made of:
// consumer free -> producer copy threads -> landed -> converters -> full -> consumer.
//
// Two warpgroups ping-pong `rounds` times over two mbarriers: warpgroup 0 arrives on `ping` and
// waits for `pong`, warpgroup 1 the reverse, so a round is two hops. Printed per width (the
// threads of each warpgroup that arrive and wait: 1, a warp, the producer's 64 converters
// publishing full, a consumer warpgroup): cycles a hop (clock64 of one thread over all rounds / 2
// rounds, the busiest of the grid's blocks, one block an SM). Every waiting thread also arrives,
// so none can fall two phases behind (a parity wait cannot tell those apart).
//
// Then the latency of one kv chunk's load (8 KB by cp.async.bulk, completing on an mbarrier, the
// way a TMA chunk lands) from issue to the wait's return, one load at a time per SM: from DRAM
// (each load a new 8 KB of a 1 GiB buffer) and from the L2 (the same 8 KB again): the floor of
// a refill's latency, without the load of a running kernel.
//
//   gpu_bundle/bin/kernels_decode_sm90_mbarrier_hop [ROUNDS]
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

// Dynamic shared memory (unused) over half an SM's: one block an SM, as the decode kernels run.
constexpr int kOneBlockAnSm = 120 * 1024;

// kWidth threads of each warpgroup arrive (the barriers' count) and wait; the others idle.
template <int kWidth>
__global__ void __launch_bounds__(256, 1) MbarrierHopKernel(int rounds, long long* cycles) {
#if defined(__CUDA_ARCH__)
  __shared__ uint64_t bars[2];
  const uint32_t ping = mla::SmemAddr(&bars[0]), pong = mla::SmemAddr(&bars[1]);
  if (threadIdx.x == 0) {
    mla::MbarInit(ping, kWidth);
    mla::MbarInit(pong, kWidth);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const long long t0 = clock64();
  if (t < kWidth) {
    for (int r = 0; r < rounds; ++r) {
      const uint32_t parity = r & 1;
      if (wg == 0) {
        mla::MbarArrive(ping);
        mla::MbarWait(pong, parity);
      } else {
        mla::MbarWait(ping, parity);
        mla::MbarArrive(pong);
      }
    }
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

// One thread a block loads `loads` 8 KB chunks one after another (chunk k of the block at
// src + (fresh ? (k * grid + block) * 8 KB : block * 8 KB)), each waited for before the next;
// cycles[block]: the mean cycles from issue to the wait's return.
__global__ void __launch_bounds__(32, 1)
    BulkLoadLatencyKernel(const uint8_t* src, int loads, bool fresh, long long* cycles) {
#if defined(__CUDA_ARCH__)
  __shared__ alignas(128) uint8_t chunk[8192];
  __shared__ uint64_t bar;
  if (threadIdx.x != 0) return;
  const uint32_t b = mla::SmemAddr(&bar), dst = mla::SmemAddr(chunk);
  mla::MbarInit(b, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  long long sum = 0;
  for (int k = 0; k < loads; ++k) {
    const int64_t at = fresh ? (static_cast<int64_t>(k) * gridDim.x + blockIdx.x) * 8192
                             : static_cast<int64_t>(blockIdx.x) * 8192;
    const long long t0 = clock64();
    mla::MbarArriveExpectTx(b, 8192);
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 8192, "
        "[%2];\n" ::"r"(dst),
        "l"(src + at), "r"(b)
        : "memory");
    mla::MbarWait(b, k & 1);
    sum += clock64() - t0;
  }
  cycles[blockIdx.x] = sum / loads;
#endif
}

template <int kWidth>
void Measure(int rounds, int sms, long long* cycles_d) {
  MLAPS_CHECK_HIP(hipFuncSetAttribute(MbarrierHopKernel<kWidth>,
                                      hipFuncAttributeMaxDynamicSharedMemorySize, kOneBlockAnSm));
  MbarrierHopKernel<kWidth><<<sms, 256, kOneBlockAnSm>>>(rounds, cycles_d);
  MLAPS_CHECK_HIP(hipGetLastError());
  MLAPS_CHECK_HIP(hipDeviceSynchronize());
  std::vector<long long> cycles(sms);
  MLAPS_CHECK_HIP(
      hipMemcpy(cycles.data(), cycles_d, sms * sizeof(long long), hipMemcpyDeviceToHost));
  const long long busiest = *std::max_element(cycles.begin(), cycles.end());
  std::printf("| %3d | %8.1f |\n", kWidth, static_cast<double>(busiest) / (2.0 * rounds));
  std::fflush(stdout);
}

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (rounds <= 0) {
    std::fprintf(stderr, "usage: %s [ROUNDS > 0]\n", argv[0]);
    return 2;
  }
  int sms = 0;
  MLAPS_CHECK_HIP(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, 0));
  long long* cycles_d = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&cycles_d, sms * sizeof(long long)));
  std::printf("mbarrier hop between two warpgroups, %d SMs, %d rounds\n\n", sms, rounds);
  std::printf("| threads arriving and waiting a side | cycles a hop |\n|---|---|\n");
  mlaps::Measure<1>(rounds, sms, cycles_d);
  mlaps::Measure<32>(rounds, sms, cycles_d);
  mlaps::Measure<64>(rounds, sms, cycles_d);
  mlaps::Measure<128>(rounds, sms, cycles_d);
  // 1 GiB: 132 SMs x 8 KB x 992 loads fit.
  const int64_t bytes = int64_t{1} << 30;
  uint8_t* src = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&src, bytes));
  MLAPS_CHECK_HIP(hipMemset(src, 1, bytes));
  const int loads = static_cast<int>(bytes / (int64_t{8192} * sms));
  std::printf(
      "\n8 KB cp.async.bulk load to mbarrier completion, one at a time an SM (%d loads)\n\n",
      loads);
  std::printf("| source | mean cycles (busiest SM) |\n|---|---|\n");
  MLAPS_CHECK_HIP(hipFuncSetAttribute(mlaps::BulkLoadLatencyKernel,
                                      hipFuncAttributeMaxDynamicSharedMemorySize,
                                      mlaps::kOneBlockAnSm));
  for (bool fresh : {true, false}) {
    // A write of the whole buffer first: none of it is left in the L2 for the fresh loads.
    MLAPS_CHECK_HIP(hipMemset(src, 2, bytes));
    mlaps::BulkLoadLatencyKernel<<<sms, 32, mlaps::kOneBlockAnSm>>>(src, loads, fresh, cycles_d);
    MLAPS_CHECK_HIP(hipGetLastError());
    MLAPS_CHECK_HIP(hipDeviceSynchronize());
    std::vector<long long> cycles(sms);
    MLAPS_CHECK_HIP(
        hipMemcpy(cycles.data(), cycles_d, sms * sizeof(long long), hipMemcpyDeviceToHost));
    std::printf("| %s | %lld |\n", fresh ? "DRAM (each chunk new)" : "L2 (the same chunk again)",
                *std::max_element(cycles.begin(), cycles.end()));
  }
  MLAPS_CHECK_HIP(hipFree(src));
  MLAPS_CHECK_HIP(hipFree(cycles_d));
  return 0;
}
