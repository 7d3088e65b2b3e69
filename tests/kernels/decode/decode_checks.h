// Checks shared by the decode kernel tests that run a kernel on the CPU emulation: the test
// plan, what a run left in its outputs, the run against the simulator's executor, the fp64
// reference and the plan's trace, and CP ranks merged against the unsharded reference. No
// device code: the emulation tests include the kernels after this header.
#ifndef MLAPS_TESTS_KERNELS_DECODE_DECODE_CHECKS_H_
#define MLAPS_TESTS_KERNELS_DECODE_DECODE_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "kernels/decode/mla_decode.h"
#include "metadata/batch.h"
#include "metadata/work_plan.h"
#include "sim/executor.h"
#include "sim/reference.h"
#include "sim/trace.h"

namespace mlaps::testing {

// PlanDecode with `num_cu` CUs and `fixed_overhead`, default options otherwise. On error a
// test failure and an empty plan.
WorkPlan PlanForTest(const Batch& batch, int num_cu, int fixed_overhead = 1);

// What one decode (+ reduce) run left in its outputs.
struct DecodeRunResult {
  std::vector<float> o, lse;  // O: bf16 values, or fp32 with o_fp32
  MlaStatus status{};
  sim::Trace trace;
  std::string error;  // the emulation's abort message; empty when the run ended normally
  std::vector<int32_t> merge_counters;  // after a run whose decode merged (MlaSplitMerge)
};

bool SameBits(absl::Span<const float> a, absl::Span<const float> b);

struct RunCheck {
  std::string vs_executor;  // the comparison's summary, for the test's progress line
  int64_t empty_rows = 0;   // rows that see no kv token
};

// Expects `got` to be a clean run (no emulation error, status kMlaOk) of `plan` over `batch`
// and `inputs`: O / LSE within `gates` of sim::ExecutePlan(options) and of the fp64 reference,
// the trace equal to the plan's, and every row the reference leaves without kv (LSE -inf)
// exactly O = 0, LSE = -inf (every other row a finite LSE).
RunCheck ExpectRunMatchesPlan(const Batch& batch, const WorkPlan& plan,
                              const sim::DecodeInputs& inputs, const sim::ExecutorOptions& options,
                              const sim::Gates& gates, const DecodeRunResult& got);

// The CP ranks' fp32 O / LSE merged (sim::MergeCpRanks), O rounded to bf16 once (the decode
// output's one rounding), against the unsharded fp64 reference of `global` under `gates`: no
// element may fail. Returns the comparison's summary.
std::string ExpectMergedRanksMatchReference(const Batch& global, const sim::DecodeInputs& inputs,
                                            const std::vector<std::vector<float>>& rank_o,
                                            const std::vector<std::vector<float>>& rank_lse,
                                            const sim::Gates& gates);

}  // namespace mlaps::testing

#endif  // MLAPS_TESTS_KERNELS_DECODE_DECODE_CHECKS_H_
