// Host planning time: PlanDecodeInto into preallocated buffers (what an engine does per decode
// step), for batch 1..1024, qlen 1..4, H 16..128 on sm90 (132 CUs), varlen kv 1k..16k.
// bazel run -c opt //metadata:planner_bench
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"

namespace mlaps {
namespace {

void BM_PlanDecode(benchmark::State& state) {
  const int batch = state.range(0), qlen = state.range(1), heads = state.range(2);
  std::mt19937 rng(batch * 31 + qlen);
  std::uniform_int_distribution<int> len(1024, 16384);
  std::vector<int> lens(batch);
  for (int& l : lens) l = len(rng);
  const Batch b = MakeVarlenBatch(Arch::kSm90, DType::kBf16, heads, lens, qlen, 64);
  CapacityQuery q;
  q.num_heads = heads;
  q.max_batch = batch;
  q.max_qlen = qlen;
  const PlanCapacity cap = *ComputePlanCapacity(q);
  std::vector<int32_t> qo(cap.qo_indptr), wi(cap.work_indptr), ri(cap.reduce_indptr),
      rf(cap.reduce_final_map), rp(cap.reduce_partial_map);
  std::vector<WorkInfo> works(cap.work_info);
  const PlanBuffers buffers{absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(works),
                            absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)};
  int num_works = 0;
  for (auto _ : state) {
    absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(b, PlanOptions{}, buffers);
    if (!sizes.ok()) {
      state.SkipWithError(std::string(sizes.status().message()).c_str());
      return;
    }
    num_works = sizes->num_works;
    benchmark::DoNotOptimize(works.data());
  }
  state.counters["works"] = num_works;
}

BENCHMARK(BM_PlanDecode)
    ->ArgNames({"batch", "qlen", "H"})
    ->ArgsProduct({{1, 32, 128, 1024}, {1, 4}, {16, 128}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaps

BENCHMARK_MAIN();
