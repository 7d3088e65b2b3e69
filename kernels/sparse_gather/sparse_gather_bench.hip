// The GPU sparse gather's time and bandwidth at topk 2048 (DeepSeek V3.2), T = 128, 512, 2048,
// 16384 tokens (T / 4 requests x qlen 4 of context 8192, so every token keeps 2048 slots), in
// three maps: flat kv_indices (page 1), block table page 1, block table page 64. Positions are
// distinct and in random order (an indexer's topk output). Each configuration is first checked
// word for word against the CPU model.
//
// Counters:
//   hot_us    per launch, inside a graph of back-to-back launches (what a decode step's graph
//             pays), best of the benchmark's 20 graph replays. At T <= 2048 the inputs (<= 16 MB)
//             and outputs stay in the H200's 50 MB L2 between launches, so this is L2-warm; at T =
//             16384 the inputs alone are 128 MB and every launch streams from HBM.
//   cold_us   one launch after a 256 MB memset has flushed L2, timed by events around it,
//             median of kColdRuns.
//   hot_GBps / cold_GBps   bytes / time, bytes = topk_indices read + token_to_seq,
//             token_bound, indptr read + map entries read (4 B per distinct entry the batch
//             looks up, i.e. the useful bytes; a random gather moves whole 32 B sectors, so
//             the DRAM traffic of the flat / page-1 maps is up to 8x that) + packed, dense,
//             counts and status written.
//   MB        those bytes; map_MB the map's share.
// A second table comes from one launch with GpuSparseGatherParams::profile set: the kernel's
// span, mean block latency, mean blocks in flight per SM and mean cycles per phase (stage:
// row loads + map lookups issued; buckets: the filter; table: the exact table of contested
// columns; classify + compact; write), to see what bounds a configuration.
// Floor: BM_CopyFloor is a device-to-device copy of 128 MB (256 MB moved), the bandwidth a
// streaming kernel can hope for here.
//
//   tools/gpu_bundle.sh --only sparse_gather && gpu_bundle/run.sh --bench
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/platform/hip_runtime.h"
#include "kernels/sparse_gather/sparse_gather.h"
#include "metadata/sparse_gather_spec.h"
#include "sim/sparse_gather.h"

namespace mlaps {
namespace {

constexpr int kTopk = 2048;
constexpr int kQlen = 4;
constexpr int kContext = 8192;
constexpr int kColdRuns = 20;
constexpr int64_t kFlushBytes = int64_t{256} << 20;

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

enum MapKind { kFlatPage1 = 0, kTablePage1 = 1, kTablePage64 = 2 };
const char* MapName(int kind) {
  return kind == kFlatPage1    ? "flat, page 1"
         : kind == kTablePage1 ? "table, page 1"
                               : "table, page 64";
}

struct Host {
  int topk = kTopk;
  std::vector<int32_t> topk_indices, token_to_seq, token_bound, indptr;
  std::vector<int32_t> block_table, kv_indptr, kv_indices;
  sim::SparseGatherInputs inputs;
  int64_t map_bytes = 0;
};

Host MakeHost(int tokens, int kind) {
  Host h;
  const int batch = tokens / kQlen;
  const int page = kind == kTablePage64 ? 64 : 1;
  std::mt19937 rng(tokens * 7 + kind);
  // Physical slots: a random permutation of pages for the whole cache.
  const int pages_per_req = kContext / page;
  std::vector<int32_t> pages(int64_t{batch} * pages_per_req);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  if (kind == kFlatPage1) {
    h.kv_indices = pages;
    h.kv_indptr.resize(batch + 1);
    for (int b = 0; b <= batch; ++b) h.kv_indptr[b] = b * kContext;
  } else {
    h.block_table = pages;
  }
  std::vector<int32_t> pool(kContext);
  h.indptr = {0};
  for (int b = 0; b < batch; ++b) {
    std::vector<char> touched(pages_per_req, 0);
    for (int j = 0; j < kQlen; ++j) {
      const int bound = kContext - kQlen + j + 1;
      h.token_to_seq.push_back(b);
      h.token_bound.push_back(bound);
      std::iota(pool.begin(), pool.end(), 0);
      for (int i = 0; i < kTopk; ++i) std::swap(pool[i], pool[i + rng() % (bound - i)]);
      h.topk_indices.insert(h.topk_indices.end(), pool.begin(), pool.begin() + kTopk);
      for (int i = 0; i < kTopk; ++i) touched[pool[i] / page] = 1;
      h.indptr.push_back(h.indptr.back() + std::min(bound, kTopk));
    }
    h.map_bytes += 4 * std::count(touched.begin(), touched.end(), 1);
  }
  sim::SparseGatherInputs& in = h.inputs;
  in.topk = kTopk;
  in.topk_indices = h.topk_indices;
  in.token_to_seq = h.token_to_seq;
  in.token_bound = h.token_bound;
  in.sparse_kv_indptr = h.indptr;
  in.map.num_requests = batch;
  if (kind == kFlatPage1) {
    in.map.form = SparseMapForm::kFlat;
    in.map.kv_indptr = h.kv_indptr;
    in.map.kv_indices = h.kv_indices;
  } else {
    in.map.form = SparseMapForm::kBlockTable;
    in.map.block_table = h.block_table;
    in.map.max_blocks = pages_per_req;
    in.map.page_size = page;
  }
  return h;
}

template <typename T>
T* Upload(benchmark::State& state, const std::vector<T>& v, std::vector<void*>* owned) {
  if (v.empty()) return nullptr;
  T* d = nullptr;
  if (hipMalloc(&d, v.size() * sizeof(T)) != hipSuccess ||
      hipMemcpy(d, v.data(), v.size() * sizeof(T), hipMemcpyHostToDevice) != hipSuccess) {
    state.SkipWithError("upload failed");
    return nullptr;
  }
  owned->push_back(d);
  return d;
}

struct Row {
  int tokens, kind;
  double hot_us, cold_us, mb, map_mb;
  // From one profiled launch (GpuSparseGatherParams::profile): the kernel's span from the
  // first block's start to the last block's end, the mean block latency, the mean blocks in
  // flight per SM, and mean cycles of the phases (stage, bucket filter, contested table,
  // classify + compact, write).
  double span_us, block_us, blocks_per_sm, phase_kcycles[5];
};
std::vector<Row>& Rows() {
  static std::vector<Row> rows;
  return rows;
}

void BM_SparseGather(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0));
  const int kind = static_cast<int>(state.range(1));
  Host h = MakeHost(tokens, kind);
  absl::StatusOr<sim::SparseGatherResult> want = sim::SparseGather(h.inputs);
  if (!want.ok()) {
    state.SkipWithError(std::string(want.status().message()).c_str());
    return;
  }

  std::vector<void*> owned;
  GpuSparseGatherParams p;
  p.dims = sim::DimsOf(h.inputs, h.indptr.back());
  p.topk_indices = Upload(state, h.topk_indices, &owned);
  p.token_to_seq = Upload(state, h.token_to_seq, &owned);
  p.token_bound = Upload(state, h.token_bound, &owned);
  p.sparse_kv_indptr = Upload(state, h.indptr, &owned);
  p.block_table = Upload(state, h.block_table, &owned);
  p.kv_indptr = Upload(state, h.kv_indptr, &owned);
  p.kv_indices = Upload(state, h.kv_indices, &owned);
  const int64_t topk_entries = int64_t{tokens} * kTopk;
  const int64_t status_entries = int64_t{tokens} * kSparseGatherStatusWords;
  std::vector<int32_t> zeros_packed(h.indptr.back()), zeros_counts(tokens),
      zeros_dense(topk_entries), zeros_status(status_entries);
  p.packed = Upload(state, zeros_packed, &owned);
  p.counts = Upload(state, zeros_counts, &owned);
  p.dense = Upload(state, zeros_dense, &owned);
  p.status = Upload(state, zeros_status, &owned);
  char* flush = nullptr;
  BENCH_HIP_OK(state, hipMalloc(&flush, kFlushBytes));
  owned.push_back(flush);
  hipStream_t stream;
  BENCH_HIP_OK(state, hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));

  // Correctness first.
  if (absl::Status s = LaunchGpuSparseGather(p, stream); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  BENCH_HIP_OK(state, hipStreamSynchronize(stream));
  std::vector<int32_t> got;
  auto same = [&](const int32_t* d, const std::vector<int32_t>& w) {
    got.resize(w.size());
    return hipMemcpy(got.data(), d, w.size() * 4, hipMemcpyDeviceToHost) == hipSuccess && got == w;
  };
  if (!same(p.packed, want->packed) || !same(p.counts, want->counts) ||
      !same(p.dense, want->dense) || !same(p.status, want->status)) {
    state.SkipWithError("GPU output differs from the CPU model");
    return;
  }

  // Hot: a graph of back-to-back launches.
  const int launches = tokens >= 16384 ? 20 : tokens >= 2048 ? 100 : 200;
  hipGraph_t graph;
  hipGraphExec_t exec;
  BENCH_HIP_OK(state, hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) (void)LaunchGpuSparseGather(p, stream);
  BENCH_HIP_OK(state, hipStreamEndCapture(stream, &graph));
  BENCH_HIP_OK(state, hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  hipEvent_t start, stop;
  BENCH_HIP_OK(state, hipEventCreate(&start));
  BENCH_HIP_OK(state, hipEventCreate(&stop));
  BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));  // warm up
  float best_ms = 1e30f;
  for (auto _ : state) {
    BENCH_HIP_OK(state, hipEventRecord(start, stream));
    BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
    BENCH_HIP_OK(state, hipEventRecord(stop, stream));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
    state.SetIterationTime(ms / 1000.0 / launches);
  }
  const double hot_us = 1000.0 * best_ms / launches;

  // Cold: flush L2, then one launch between events.
  std::vector<float> cold;
  for (int i = 0; i < kColdRuns; ++i) {
    BENCH_HIP_OK(state, hipMemsetAsync(flush, i, kFlushBytes, stream));
    BENCH_HIP_OK(state, hipEventRecord(start, stream));
    (void)LaunchGpuSparseGather(p, stream);
    BENCH_HIP_OK(state, hipEventRecord(stop, stream));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    cold.push_back(ms);
  }
  std::sort(cold.begin(), cold.end());
  const double cold_us = 1000.0 * cold[cold.size() / 2];

  // One profiled launch.
  Row row{};
  {
    std::vector<long long> prof(int64_t{tokens} * kGpuSparseGatherProfileSlots, 0);
    long long* d_prof = nullptr;
    BENCH_HIP_OK(state, hipMalloc(&d_prof, prof.size() * sizeof(long long)));
    owned.push_back(d_prof);
    GpuSparseGatherParams pp = p;
    pp.profile = d_prof;
    (void)LaunchGpuSparseGather(pp, stream);
    BENCH_HIP_OK(state, hipStreamSynchronize(stream));
    BENCH_HIP_OK(state, hipMemcpy(prof.data(), d_prof, prof.size() * sizeof(long long),
                                  hipMemcpyDeviceToHost));
    long long first = prof[0], last = prof[6];
    double latency = 0, phase[5] = {};
    for (int t = 0; t < tokens; ++t) {
      const long long* r = prof.data() + int64_t{t} * kGpuSparseGatherProfileSlots;
      first = std::min(first, r[0]);
      last = std::max(last, r[6]);
      latency += r[6] - r[0];
      for (int k = 0; k < 5; ++k) phase[k] += r[k + 1] - (k == 0 ? 0 : r[k]);
    }
    hipDeviceProp_t prop;
    BENCH_HIP_OK(state, hipGetDeviceProperties(&prop, 0));
    row.span_us = (last - first) / 1e3;
    row.block_us = latency / tokens / 1e3;
    row.blocks_per_sm = latency / std::max<double>(last - first, 1) / prop.multiProcessorCount;
    for (int k = 0; k < 5; ++k) row.phase_kcycles[k] = phase[k] / tokens / 1e3;
  }

  const double bytes = 4.0 * topk_entries          // topk_indices
                       + 4.0 * (3.0 * tokens + 1)  // token_to_seq, token_bound, indptr
                       + h.map_bytes               // map entries read
                       + 4.0 * h.indptr.back()     // packed
                       + 4.0 * topk_entries        // dense
                       + 4.0 * tokens              // counts
                       + 4.0 * status_entries;     // status
  state.counters["hot_us"] = hot_us;
  state.counters["cold_us"] = cold_us;
  state.counters["hot_GBps"] = bytes / hot_us / 1e3;
  state.counters["cold_GBps"] = bytes / cold_us / 1e3;
  state.counters["MB"] = bytes / 1e6;
  state.counters["map_MB"] = h.map_bytes / 1e6;
  row.tokens = tokens;
  row.kind = kind;
  row.hot_us = hot_us;
  row.cold_us = cold_us;
  row.mb = bytes / 1e6;
  row.map_mb = h.map_bytes / 1e6;
  Rows().push_back(row);

  BENCH_HIP_CLEANUP(state, hipGraphExecDestroy(exec));
  BENCH_HIP_CLEANUP(state, hipGraphDestroy(graph));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(start));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(stop));
  BENCH_HIP_CLEANUP(state, hipStreamDestroy(stream));
  for (void* d : owned) BENCH_HIP_CLEANUP(state, hipFree(d));
}

BENCHMARK(BM_SparseGather)
    ->ArgNames({"T", "map"})
    ->ArgsProduct({{128, 512, 2048, 16384}, {kFlatPage1, kTablePage1, kTablePage64}})
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

double g_copy_gbps = 0;

// A 128 MB device-to-device copy in a graph of 10: the streaming bandwidth of this machine.
void BM_CopyFloor(benchmark::State& state) {
  const int64_t bytes = int64_t{128} << 20;
  char *a = nullptr, *b = nullptr;
  BENCH_HIP_OK(state, hipMalloc(&a, bytes));
  BENCH_HIP_OK(state, hipMalloc(&b, bytes));
  BENCH_HIP_OK(state, hipMemset(a, 1, bytes));
  hipStream_t stream;
  BENCH_HIP_OK(state, hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  hipGraph_t graph;
  hipGraphExec_t exec;
  constexpr int kCopies = 10;
  BENCH_HIP_OK(state, hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCopies; ++i) {
    BENCH_HIP_OK(state, hipMemcpyAsync(b, a, bytes, hipMemcpyDeviceToDevice, stream));
  }
  BENCH_HIP_OK(state, hipStreamEndCapture(stream, &graph));
  BENCH_HIP_OK(state, hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  hipEvent_t start, stop;
  BENCH_HIP_OK(state, hipEventCreate(&start));
  BENCH_HIP_OK(state, hipEventCreate(&stop));
  BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
  float best_ms = 1e30f;
  for (auto _ : state) {
    BENCH_HIP_OK(state, hipEventRecord(start, stream));
    BENCH_HIP_OK(state, hipGraphLaunch(exec, stream));
    BENCH_HIP_OK(state, hipEventRecord(stop, stream));
    BENCH_HIP_OK(state, hipEventSynchronize(stop));
    float ms = 0;
    BENCH_HIP_OK(state, hipEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
    state.SetIterationTime(ms / 1000.0 / kCopies);
  }
  g_copy_gbps = 2.0 * bytes / (best_ms / kCopies * 1e-3) / 1e9;
  state.counters["GBps"] = g_copy_gbps;
  BENCH_HIP_CLEANUP(state, hipGraphExecDestroy(exec));
  BENCH_HIP_CLEANUP(state, hipGraphDestroy(graph));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(start));
  BENCH_HIP_CLEANUP(state, hipEventDestroy(stop));
  BENCH_HIP_CLEANUP(state, hipStreamDestroy(stream));
  BENCH_HIP_CLEANUP(state, hipFree(a));
  BENCH_HIP_CLEANUP(state, hipFree(b));
}
BENCHMARK(BM_CopyFloor)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, 0) == hipSuccess) {
    std::printf("device: %s, %d SMs/CUs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize / 1e6);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\ncopy floor: %.0f GB/s (128 MB device-to-device copy, read + write)\n",
              mlaps::g_copy_gbps);
  std::printf(
      "\n| T | map | MB moved | map MB | hot us | hot GB/s | hot %% of 4.8 TB/s | cold us | "
      "cold GB/s |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const mlaps::Row& r : mlaps::Rows()) {
    std::printf("| %d | %s | %.1f | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f |\n", r.tokens,
                mlaps::MapName(r.kind), r.mb, r.map_mb, r.hot_us, r.mb / r.hot_us * 1e3,
                r.mb / r.hot_us / 4.8 * 100, r.cold_us, r.mb / r.cold_us * 1e3);
  }
  std::printf(
      "\nOne profiled launch each (wall clock per block; cycles per phase, block means):\n"
      "| T | map | span us | block us | blocks in flight per SM | kcycles: stage buckets "
      "table classify+compact write |\n|---:|---|---:|---:|---:|---|\n");
  for (const mlaps::Row& r : mlaps::Rows()) {
    std::printf("| %d | %s | %.1f | %.2f | %.2f | %.1f %.1f %.1f %.1f %.1f |\n", r.tokens,
                mlaps::MapName(r.kind), r.span_us, r.block_us, r.blocks_per_sm, r.phase_kcycles[0],
                r.phase_kcycles[1], r.phase_kcycles[2], r.phase_kcycles[3], r.phase_kcycles[4]);
  }
  benchmark::Shutdown();
  return 0;
}
