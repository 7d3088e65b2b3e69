#include "tests/kernels/decode/decode_checks.h"

#include <cstring>
#include <limits>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "metadata/planner.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"

namespace mlaps::testing {

WorkPlan PlanForTest(const Batch& batch, int num_cu, int fixed_overhead) {
  PlanOptions options;
  options.num_cu = num_cu;
  options.fixed_overhead = fixed_overhead;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

bool SameBits(absl::Span<const float> a, absl::Span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

RunCheck ExpectRunMatchesPlan(const Batch& batch, const WorkPlan& plan,
                              const sim::DecodeInputs& inputs, const sim::ExecutorOptions& options,
                              const sim::Gates& gates, const DecodeRunResult& got) {
  RunCheck check;
  EXPECT_TRUE(sim::CheckPlan(batch, plan).empty());
  EXPECT_EQ(got.error, "");
  if (!got.error.empty()) return check;
  EXPECT_EQ(got.status.code, kMlaOk)
      << "index " << got.status.index << " value " << got.status.value;
  const size_t rows = static_cast<size_t>(batch.total_q_tokens()) * batch.num_heads;
  EXPECT_EQ(got.lse.size(), rows);
  EXPECT_EQ(got.o.size(), rows * kHeadDimV);
  if (got.lse.size() != rows || got.o.size() != rows * kHeadDimV) return check;

  absl::StatusOr<sim::ExecutorOutput> exec = sim::ExecutePlan(batch, plan, inputs, options);
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (exec.ok()) {
    absl::StatusOr<sim::Comparison> vs_exec = sim::CompareOutputs(
        got.o, got.lse, sim::ToDouble(exec->o), sim::ToDouble(exec->lse), gates);
    EXPECT_TRUE(vs_exec.ok()) << vs_exec.status();
    if (vs_exec.ok()) {
      EXPECT_TRUE(vs_exec->passed) << "vs executor: " << vs_exec->Summary();
      check.vs_executor = vs_exec->Summary();
    }
  }
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(batch, inputs);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (ref.ok()) {
    absl::StatusOr<sim::Comparison> vs_ref =
        sim::CompareOutputs(got.o, got.lse, ref->o, ref->lse, gates);
    EXPECT_TRUE(vs_ref.ok()) << vs_ref.status();
    if (vs_ref.ok()) {
      EXPECT_TRUE(vs_ref->passed) << "vs reference: " << vs_ref->Summary();
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (size_t row = 0; row < rows; ++row) {
      if (ref->lse[row] != -std::numeric_limits<double>::infinity()) {
        EXPECT_NE(got.lse[row], -inf) << "row " << row;
        continue;
      }
      ++check.empty_rows;
      EXPECT_EQ(got.lse[row], -inf) << "row " << row;
      for (int d = 0; d < kHeadDimV; ++d) {
        if (got.o[row * kHeadDimV + d] != 0.0f) {
          ADD_FAILURE() << "row " << row << " sees no kv but O[" << d
                        << "] = " << got.o[row * kHeadDimV + d];
          break;
        }
      }
    }
  }
  absl::StatusOr<sim::Trace> want = sim::TraceOfPlan(plan);
  EXPECT_TRUE(want.ok()) << want.status();
  if (want.ok()) {
    EXPECT_EQ(sim::FormatTrace(got.trace), sim::FormatTrace(*want));
  }
  return check;
}

std::string ExpectMergedRanksMatchReference(const Batch& global, const sim::DecodeInputs& inputs,
                                            const std::vector<std::vector<float>>& rank_o,
                                            const std::vector<std::vector<float>>& rank_lse,
                                            const sim::Gates& gates) {
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  std::vector<absl::Span<const float>> os(rank_o.begin(), rank_o.end());
  std::vector<absl::Span<const float>> ls(rank_lse.begin(), rank_lse.end());
  std::vector<float> merged_o(rows * kHeadDimV), merged_lse(rows);
  const absl::Status merged_ok = sim::MergeCpRanks(
      os, ls, rows, kHeadDimV, absl::MakeSpan(merged_o), absl::MakeSpan(merged_lse));
  EXPECT_TRUE(merged_ok.ok()) << merged_ok;
  if (!merged_ok.ok()) return "";
  for (float& x : merged_o) x = sim::RoundToBf16(x);
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(global, inputs);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return "";
  absl::StatusOr<sim::Comparison> merged =
      sim::CompareOutputs(merged_o, merged_lse, ref->o, ref->lse, gates);
  EXPECT_TRUE(merged.ok()) << merged.status();
  if (!merged.ok()) return "";
  EXPECT_TRUE(merged->passed) << "merged vs unsharded reference: " << merged->Summary();
  EXPECT_EQ(merged->num_failing, 0) << merged->Summary();
  return merged->Summary();
}

}  // namespace mlaps::testing
