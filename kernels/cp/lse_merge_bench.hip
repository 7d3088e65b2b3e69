// CP merge kernel time and bandwidth: W in {2, 4, 8} ranks, up to 128k (token x head) rows,
// dim 512, bf16 output. Bytes = W * rows * (512 + 1) * 4 read + rows * (512 * 2 + 4) written.
// Inputs below ~60 MB fit the H200's L2 (noted in the label); larger ones stream from HBM.
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/platform/hip_runtime.h"

#define BENCH_HIP_OK(state, expr)                                                       \
  do {                                                                                  \
    hipError_t e_ = (expr);                                                             \
    if (e_ != hipSuccess) {                                                             \
      (state).SkipWithError((std::string(#expr ": ") + hipGetErrorString(e_)).c_str()); \
      return;                                                                           \
    }                                                                                   \
  } while (0)

// Clean-up calls: a failure (often an earlier asynchronous error) fails the run and the
// remaining releases still run. HIP >= 6.2 declares the API [[nodiscard]].
#define BENCH_HIP_CLEANUP(state, expr)                                                  \
  do {                                                                                  \
    hipError_t e_ = (expr);                                                             \
    if (e_ != hipSuccess) {                                                             \
      (state).SkipWithError((std::string(#expr ": ") + hipGetErrorString(e_)).c_str()); \
    }                                                                                   \
  } while (0)

namespace mlaps::kernels {
namespace {

void BM_LseMerge(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const int dim = 512;
  float *o = nullptr, *lse = nullptr, *lse_out = nullptr;
  void* out = nullptr;
  std::vector<float> host_lse(world * rows), host_o(world * rows * dim);
  std::mt19937 rng(world * 131 + rows);
  std::normal_distribution<float> normal;
  for (float& x : host_lse) x = normal(rng);
  for (float& x : host_o) x = normal(rng);
  if (hipMalloc(&o, host_o.size() * 4) != hipSuccess ||
      hipMalloc(&lse, host_lse.size() * 4) != hipSuccess ||
      hipMalloc(&out, rows * dim * 2) != hipSuccess ||
      hipMalloc(&lse_out, rows * 4) != hipSuccess) {
    state.SkipWithError("hipMalloc failed");
    return;
  }
  BENCH_HIP_OK(state, hipMemcpy(o, host_o.data(), host_o.size() * 4, hipMemcpyHostToDevice));
  BENCH_HIP_OK(state, hipMemcpy(lse, host_lse.data(), host_lse.size() * 4, hipMemcpyHostToDevice));
  LseMergeParams p;
  p.o_ranks = o;
  p.lse_ranks = lse;
  p.world_size = world;
  p.rows = rows;
  p.dim = dim;
  p.o_out = out;
  p.lse_out = lse_out;
  hipEvent_t start, stop;
  BENCH_HIP_OK(state, hipEventCreate(&start));
  BENCH_HIP_OK(state, hipEventCreate(&stop));
  for (int i = 0; i < 3; ++i) LaunchLseMerge(p, nullptr);  // warm up
  constexpr int kReps = 20;
  for (auto _ : state) {
    BENCH_HIP_OK(state, hipEventRecord(start, nullptr));
    for (int i = 0; i < kReps; ++i) {
      if (LaunchLseMerge(p, nullptr) != LseMergeError::kOk) {
        state.SkipWithError("launch failed");
        break;
      }
    }
    BENCH_HIP_OK(state, hipEventRecord(stop, nullptr));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3 / kReps);
  }
  const double bytes = double(world) * rows * (dim + 1) * 4 + double(rows) * (dim * 2 + 4);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["TB/s"] =
      benchmark::Counter(bytes * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  state.counters["input_MB"] = double(world) * rows * (dim + 1) * 4 / 1e6;
  BENCH_HIP_CLEANUP(state, hipEventDestroy(start));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(stop));
  BENCH_HIP_CLEANUP(state, hipFree(o));
  BENCH_HIP_CLEANUP(state, hipFree(lse));
  BENCH_HIP_CLEANUP(state, hipFree(out));
  BENCH_HIP_CLEANUP(state, hipFree(lse_out));
}

BENCHMARK(BM_LseMerge)
    ->ArgNames({"W", "rows"})
    ->ArgsProduct({{2, 4, 8}, {8192, 32768, 131072}})
    ->UseManualTime()
    ->Iterations(50)  // each iteration times kReps launches; 50 keep the whole run short
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaps::kernels

BENCHMARK_MAIN();
