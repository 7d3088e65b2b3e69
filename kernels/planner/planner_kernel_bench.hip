// The GPU planner's time next to the host planner's, on the batches of metadata/planner_bench.cc
// (sm90, 132 CUs, page 64, kv lengths U[1k, 16k], same seeds): batch 1, 32, 128, 1024 x qlen 1,
// 4 x H 16, 128. Counters:
//   kernel_us   GPU time per planner launch inside a graph of kGraphLaunches back-to-back
//               launches (what a decode-step graph pays), best of kTrials replays.
//   latency_us  launch-to-result on the host: LaunchGpuPlanner + the status word copied to
//               pinned memory + stream synchronize, wall clock, median (the benchmark's
//               own time is the mean of the same).
//   host_ns     PlanDecodeInto on the host CPU for the same batch (buffers preallocated).
//   works, rounds  work items of the plan; parallel-walk rounds the kernel took (1000 +
//               rounds: it did not converge and one warp finished the walk).
// BM_GpuPlannerPeerShape: FlashMLA's b = 32, ctx 1024, H 16, qlen 1 shape (uniform) on both
// grids, by max_scan_iterations.
// Each configuration is checked byte for byte against the host planner before timing.
//
//   tools/gpu_bundle.sh --only planner_kernel && gpu_bundle/run.sh --bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/planner/planner_kernel.h"
#include "kernels/planner/planner_params.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "metadata/registry.h"

namespace mlaps {
namespace {

constexpr int kGraphLaunches = 50;
constexpr int kTrials = 10;

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

// The host bench's batch for (batch, qlen, H).
Batch BenchBatch(int batch, int qlen, int heads) {
  std::mt19937 rng(batch * 31 + qlen);
  std::uniform_int_distribution<int> len(1024, 16384);
  std::vector<int> lens(batch);
  for (int& l : lens) l = len(rng);
  return MakeVarlenBatch(Arch::kSm90, DType::kBf16, heads, lens, qlen, 64);
}

struct Row {
  int batch, qlen, heads, threads, ctx, num_cu, iterations, jump_positions;
  double kernel_us, exec_us, latency_us, host_ns;
  int works, rounds;
  double phase_kcycles[6];
  double mhz;
};
std::vector<Row>& Rows() {
  static std::vector<Row> rows;
  return rows;
}

// An empty one-block kernel of the planner's shape: the floor of kernel_us.
__global__ void EmptyKernel(int* out) {
  if (threadIdx.x == 0) *out = 1;
}

void BM_EmptyKernelFloor(benchmark::State& state) {
  int* d = nullptr;
  BENCH_HIP_OK(state, hipMalloc(&d, sizeof(int)));
  hipStream_t stream;
  BENCH_HIP_OK(state, hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  hipGraph_t graph;
  hipGraphExec_t exec;
  BENCH_HIP_OK(state, hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphLaunches; ++i) {
    hipLaunchKernelGGL(EmptyKernel, dim3(1), dim3(1024), 0, stream, d);
  }
  BENCH_HIP_OK(state, hipStreamEndCapture(stream, &graph));
  BENCH_HIP_OK(state, hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  hipEvent_t start, stop;
  BENCH_HIP_OK(state, hipEventCreate(&start));
  BENCH_HIP_OK(state, hipEventCreate(&stop));
  BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
  float best_ms = 1e30f;
  for (int t = 0; t < kTrials; ++t) {
    BENCH_HIP_OK(state, hipEventRecord(start, stream));
    BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
    BENCH_HIP_OK(state, hipEventRecord(stop, stream));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    hipLaunchKernelGGL(EmptyKernel, dim3(1), dim3(1024), 0, stream, d);
    BENCH_HIP_OK(state, hipStreamSynchronize(stream));
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.counters["kernel_us"] = 1000.0 * best_ms / kGraphLaunches;
  BENCH_HIP_CLEANUP(state, hipGraphExecDestroy(exec));
  BENCH_HIP_CLEANUP(state, hipGraphDestroy(graph));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(start));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(stop));
  BENCH_HIP_CLEANUP(state, hipStreamDestroy(stream));
  BENCH_HIP_CLEANUP(state, hipFree(d));
}
BENCHMARK(BM_EmptyKernelFloor)->UseManualTime()->Iterations(2000)->Unit(benchmark::kMicrosecond);

// One configuration: the batch `b` (of `batch` requests, `qlen` tokens, `heads` heads; `ctx`
// its uniform kv length, 0: varlen), planned with `host_options` (num_cu 0: the default grid)
// by a launch of `threads` threads, `iterations` parallel-walk rounds and jump tables of
// `jump_positions` positions (0: none, the warp windows finish).
void RunGpuPlanner(benchmark::State& state, const Batch& b, int ctx, PlanOptions host_options,
                   int threads, int iterations, int jump_positions) {
  const int batch = b.num_requests(), qlen = b.max_qlen(), heads = b.num_heads;
  const PlanOptions options = *ResolveOptions(b, host_options);
  VariantQuery vq;
  vq.arch = b.arch;
  vq.num_heads = heads;
  vq.qlen = qlen;
  const ResolvedVariant variant = *ResolveVariant(vq);
  CapacityQuery cq;
  cq.num_heads = heads;
  cq.max_batch = batch;
  cq.max_qlen = qlen;
  const PlanCapacity cap = *ComputePlanCapacity(cq);

  // Host buffers and the host plan (the reference and the host timing).
  std::vector<int32_t> qo(cap.qo_indptr), wi(cap.work_indptr), ri(cap.reduce_indptr),
      rf(cap.reduce_final_map), rp(cap.reduce_partial_map);
  std::vector<WorkInfo> works(cap.work_info);
  const PlanBuffers buffers{absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(works),
                            absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)};
  absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(b, host_options, buffers);
  if (!sizes.ok()) {
    state.SkipWithError(std::string(sizes.status().message()).c_str());
    return;
  }

  // Device inputs and outputs.
  int32_t *d_in = nullptr, *d_out = nullptr;
  const int64_t n_in = 3 * (batch + 1);
  const int64_t out_words[6] = {cap.qo_indptr,     cap.work_indptr,      8 * cap.work_info,
                                cap.reduce_indptr, cap.reduce_final_map, cap.reduce_partial_map};
  int64_t total_out = 16;  // status first (48 bytes, padded to 64)
  int64_t offset[6];
  for (int i = 0; i < 6; ++i) {
    offset[i] = total_out;
    total_out += (out_words[i] + 3) / 4 * 4;
  }
  BENCH_HIP_OK(state, hipMalloc(&d_in, n_in * sizeof(int32_t)));
  BENCH_HIP_OK(state, hipMalloc(&d_out, total_out * sizeof(int32_t)));
  std::vector<int32_t> in(b.qo_indptr);
  in.insert(in.end(), b.kv_indptr.begin(), b.kv_indptr.end());
  in.insert(in.end(), b.kv_last_page_lens.begin(), b.kv_last_page_lens.end());
  BENCH_HIP_OK(state,
               hipMemcpy(d_in, in.data(), in.size() * sizeof(int32_t), hipMemcpyHostToDevice));
  BENCH_HIP_OK(state, hipMemset(d_out, 0, total_out * sizeof(int32_t)));

  GpuPlannerParams p = StaticPlannerParams(b, options, variant, qlen);
  p.num_cu = sizes->num_cu;  // the default grid times the variant's blocks_per_cu
  p.qo_indptr = d_in;
  p.kv_indptr = d_in + (batch + 1);
  p.kv_last_page_lens = d_in + 2 * (batch + 1);
  p.out_qo_indptr = d_out + offset[0];
  p.out_qo_indptr_capacity = cap.qo_indptr;
  p.work_indptr = d_out + offset[1];
  p.work_indptr_capacity = cap.work_indptr;
  p.work_info = d_out + offset[2];
  p.work_info_capacity = cap.work_info;
  p.reduce_indptr = d_out + offset[3];
  p.reduce_indptr_capacity = cap.reduce_indptr;
  p.reduce_final_map = d_out + offset[4];
  p.reduce_final_map_capacity = cap.reduce_final_map;
  p.reduce_partial_map = d_out + offset[5];
  p.reduce_partial_map_capacity = cap.reduce_partial_map;
  p.status = reinterpret_cast<GpuPlanStatus*>(d_out);
  p.threads = threads;
  p.max_scan_iterations = iterations;
  p.jump_positions = jump_positions;

  hipStream_t stream;
  BENCH_HIP_OK(state, hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  GpuPlanStatus* status = nullptr;
  BENCH_HIP_OK(state, hipHostMalloc(&status, sizeof(GpuPlanStatus)));

  // Correctness first: the whole plan against the host's.
  BENCH_HIP_OK(state, static_cast<hipError_t>(LaunchGpuPlanner(p, stream)));
  std::vector<int32_t> got(total_out);
  BENCH_HIP_OK(state, hipMemcpyAsync(got.data(), d_out, total_out * sizeof(int32_t),
                                     hipMemcpyDeviceToHost, stream));
  BENCH_HIP_OK(state, hipStreamSynchronize(stream));
  GpuPlanStatus st;
  memcpy(&st, got.data(), sizeof(st));
  const bool same =
      st.code == kGpuPlanOk && st.num_works == sizes->num_works &&
      !memcmp(got.data() + offset[0], qo.data(), qo.size() * 4) &&
      !memcmp(got.data() + offset[1], wi.data(), wi.size() * 4) &&
      !memcmp(got.data() + offset[2], works.data(), sizes->num_works * sizeof(WorkInfo)) &&
      !memcmp(got.data() + offset[3], ri.data(), (sizes->num_reduce_tiles + 1) * 4) &&
      !memcmp(got.data() + offset[4], rf.data(), 2 * sizes->num_reduce_tiles * 4) &&
      !memcmp(got.data() + offset[5], rp.data(), sizes->num_reduce_pieces * 4);
  if (!same) {
    state.SkipWithError("GPU plan differs from the host plan");
    return;
  }

  // Kernel time: a graph of back-to-back launches, best replay.
  hipGraph_t graph;
  hipGraphExec_t exec;
  BENCH_HIP_OK(state, hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphLaunches; ++i) LaunchGpuPlanner(p, stream);
  BENCH_HIP_OK(state, hipStreamEndCapture(stream, &graph));
  BENCH_HIP_OK(state, hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  hipEvent_t start, stop;
  BENCH_HIP_OK(state, hipEventCreate(&start));
  BENCH_HIP_OK(state, hipEventCreate(&stop));
  BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));  // warm-up
  float best_ms = 1e30f;
  for (int t = 0; t < kTrials; ++t) {
    BENCH_HIP_OK(state, hipEventRecord(start, stream));
    BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
    BENCH_HIP_OK(state, hipEventRecord(stop, stream));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  const double kernel_us = 1000.0 * best_ms / kGraphLaunches;

  // One profiled run: cycles per phase, SM clock, execution time inside the kernel.
  long long* d_profile = nullptr;
  BENCH_HIP_OK(state, hipMalloc(&d_profile, kGpuPlanProfileSlots * sizeof(long long)));
  long long prof[kGpuPlanProfileSlots] = {};
  {
    GpuPlannerParams pp = p;
    pp.profile = d_profile;
    for (int warm = 0; warm < 3; ++warm) LaunchGpuPlanner(pp, stream);
    BENCH_HIP_OK(state,
                 hipMemcpyAsync(prof, d_profile, sizeof(prof), hipMemcpyDeviceToHost, stream));
    BENCH_HIP_OK(state, hipStreamSynchronize(stream));
  }
  BENCH_HIP_CLEANUP(state, hipFree(d_profile));
  const double exec_ns = static_cast<double>(prof[8] - prof[7]);
  const double mhz = exec_ns > 0 ? 1000.0 * (prof[5] - prof[0]) / exec_ns : 0.0;

  // Host planner time on the same batch.
  using Clock = std::chrono::steady_clock;
  int host_reps = 0;
  const auto h0 = Clock::now();
  while (Clock::now() - h0 < std::chrono::milliseconds(50) || host_reps < 3) {
    benchmark::DoNotOptimize(PlanDecodeInto(b, host_options, buffers));
    ++host_reps;
  }
  const double host_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - h0).count() / host_reps;

  // Launch-to-result latency (the benchmark's time); the table shows the median.
  std::vector<double> latencies;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    LaunchGpuPlanner(p, stream);
    BENCH_HIP_OK(state, hipMemcpyAsync(status, p.status, sizeof(GpuPlanStatus),
                                       hipMemcpyDeviceToHost, stream));
    BENCH_HIP_OK(state, hipStreamSynchronize(stream));
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(seconds);
    latencies.push_back(1e6 * seconds);
  }
  if (status->code != kGpuPlanOk) state.SkipWithError("status not ok");
  std::sort(latencies.begin(), latencies.end());
  const double latency_us = latencies.empty() ? 0.0 : latencies[latencies.size() / 2];
  state.counters["kernel_us"] = kernel_us;
  state.counters["latency_us"] = latency_us;
  state.counters["host_ns"] = host_ns;
  state.counters["exec_us"] = exec_ns / 1000.0;
  state.counters["sm_mhz"] = mhz;
  state.counters["works"] = st.num_works;
  state.counters["rounds"] = st.scan_iterations;
  Row row = {batch,        qlen,
             heads,        threads,
             ctx,          p.num_cu,
             iterations,   jump_positions,
             kernel_us,    exec_ns / 1000.0,
             latency_us,   host_ns,
             st.num_works, st.scan_iterations,
             {},           mhz};
  for (int i = 0; i < 5; ++i) {
    row.phase_kcycles[i] = (prof[i + 1] - prof[i]) / 1000.0;
    state.counters["kcyc_p" + std::to_string(i + 1)] = row.phase_kcycles[i];
  }
  // The walk's first round (when it ran rounds).
  row.phase_kcycles[5] = prof[6] > prof[1] ? (prof[6] - prof[1]) / 1000.0 : 0.0;
  Rows().push_back(row);

  BENCH_HIP_CLEANUP(state, hipGraphExecDestroy(exec));
  BENCH_HIP_CLEANUP(state, hipGraphDestroy(graph));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(start));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(stop));
  BENCH_HIP_CLEANUP(state, hipHostFree(status));
  BENCH_HIP_CLEANUP(state, hipStreamDestroy(stream));
  BENCH_HIP_CLEANUP(state, hipFree(d_in));
  BENCH_HIP_CLEANUP(state, hipFree(d_out));
}

void BM_GpuPlanner(benchmark::State& state) {
  const int batch = state.range(0), qlen = state.range(1), heads = state.range(2);
  RunGpuPlanner(state, BenchBatch(batch, qlen, heads), 0, PlanOptions{}, state.range(3),
                GpuPlannerParams{}.max_scan_iterations, state.range(4));
}

// The peer's small shape (FlashMLA's b = 32, ctx 1024, H 16, qlen 1; page 64) on the default
// grid (0: two blocks an SM for 16-row tiles) and one block an SM (132, the sm90 kernel), by
// parallel-walk rounds (8: the default; 0: none) and jump tables (8192: the default; 0: none,
// the one-warp finish).
void BM_GpuPlannerPeerShape(benchmark::State& state) {
  PlanOptions options;
  options.num_cu = state.range(0);
  RunGpuPlanner(state, MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 32, 1, 1024, 64), 1024,
                options, 0, state.range(1), state.range(2));
}
BENCHMARK(BM_GpuPlannerPeerShape)
    ->ArgNames({"num_cu", "iterations", "jump"})
    ->ArgsProduct({{0, 132}, {8, 0, 2}, {8192, 0}})
    ->UseManualTime()
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_GpuPlanner)
    ->ArgNames({"batch", "qlen", "H", "threads", "jump"})
    ->ArgsProduct({{1, 32, 128, 1024}, {1, 4}, {16, 128}, {0}, {8192, 0}})
    ->UseManualTime()
    ->Iterations(2000)  // one run per configuration (the setup above is not free)
    ->Unit(benchmark::kMicrosecond);
// Block size at batch 128 (0 above: the launcher's choice).
BENCHMARK(BM_GpuPlanner)
    ->ArgNames({"batch", "qlen", "H", "threads", "jump"})
    ->ArgsProduct({{128}, {1, 4}, {16, 128}, {64, 128, 256}, {8192}})
    ->UseManualTime()
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, 0) == hipSuccess) {
    std::printf("device: %s, %d SMs/CUs\n", prop.name, prop.multiProcessorCount);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  const auto& rows = mlaps::Rows();
  std::printf(
      "\n| batch | kv | qlen | H | CUs | threads | walk rounds max | jump positions | GPU kernel "
      "us "
      "| in-kernel us | "
      "launch-to-result us | host planner ns | works | rounds | kcycles: validate+tiles walk "
      "layout-scan checks+qo writes (walk round 1) | SM MHz |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
  for (const mlaps::Row& r : rows) {
    const std::string kv = r.ctx > 0 ? std::to_string(r.ctx) : "U[1k,16k]";
    std::printf(
        "| %d | %s | %d | %d | %d | %d | %d | %d | %.2f | %.2f | %.2f | %.0f | %d | %d | %.1f %.1f "
        "%.1f %.1f %.1f %.1f | %.0f |\n",
        r.batch, kv.c_str(), r.qlen, r.heads, r.num_cu, r.threads, r.iterations, r.jump_positions,
        r.kernel_us, r.exec_us, r.latency_us, r.host_ns, r.works, r.rounds, r.phase_kcycles[0],
        r.phase_kcycles[1], r.phase_kcycles[2], r.phase_kcycles[3], r.phase_kcycles[4],
        r.phase_kcycles[5], r.mhz);
  }
  benchmark::Shutdown();
  return 0;
}
