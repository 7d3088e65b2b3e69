// The numeric executor against the fp64 reference over the seed matrix at reduced context:
// (nhead, qlen) x arch {sm90, gfx950} x dtype {bf16, fp8 e4m3fn with non-unit scales} x
// layouts {uniform / varlen kv} x page sizes {1, 16, 64}, with few CUs so tiles split and the
// reduce path runs. Each case prints one "[matrix]" line with its measures.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"

namespace mlaps::sim {
namespace {

struct Shape {
  int nhead, qlen;
};
constexpr Shape kShapes[] = {{16, 1}, {16, 3}, {16, 4}, {16, 6}, {32, 2},  {32, 3},
                             {32, 4}, {64, 1}, {64, 2}, {64, 3}, {128, 1}, {128, 2}};

struct Layout {
  bool varlen;
  int page_size;
};
constexpr Layout kLayouts[] = {{false, 1}, {true, 1}, {false, 16}, {true, 64}};

using Param = std::tuple<Arch, DType, int /*shape*/, int /*layout*/>;

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [arch, dtype, shape, layout] = info.param;
  const Shape& s = kShapes[shape];
  const Layout& l = kLayouts[layout];
  return absl::StrCat(ArchName(arch), "_", DTypeName(dtype), "_h", s.nhead, "_q", s.qlen, "_",
                      l.varlen ? "varlen" : "uniform", "_p", l.page_size);
}

// About this many (q row x kv token) pairs per case keeps the suite fast.
constexpr int64_t kRowKvBudget = 60000;

class ExecutorMatrixTest : public ::testing::TestWithParam<Param> {};

TEST_P(ExecutorMatrixTest, MatchesReference) {
  const auto [arch, dtype, shape_i, layout_i] = GetParam();
  const Shape& shape = kShapes[shape_i];
  const Layout& layout = kLayouts[layout_i];
  const uint64_t seed = 1000 + 97 * shape_i + 13 * layout_i + 7 * static_cast<int>(arch) +
                        3 * static_cast<int>(dtype);
  std::mt19937_64 rng(seed);
  const int rows = shape.nhead * shape.qlen;
  // kv lengths in the hundreds; batch 1-4 within the budget.
  const int kv_hint = std::uniform_int_distribution<int>(130, 420)(rng);
  const int batch_size =
      std::clamp<int>(static_cast<int>(kRowKvBudget / (int64_t{rows} * kv_hint)), 1, 4);
  Batch batch;
  if (layout.varlen) {
    std::vector<int> kv_lens(batch_size);
    for (int& l : kv_lens) l = std::uniform_int_distribution<int>(100, 420)(rng);
    batch = MakeVarlenBatch(arch, dtype, shape.nhead, kv_lens, shape.qlen, layout.page_size);
  } else {
    batch = MakeUniformBatch(arch, dtype, shape.nhead, batch_size, shape.qlen, kv_hint,
                             layout.page_size);
  }
  const DecodeCase c = MakeDecodeCase(batch, seed, /*q_scale=*/0.7,
                                      /*kv_scale=*/1.3);
  // Few CUs so that tiles split: the seed's choice in 5..16, else the first of 5..16, 2..4
  // (the default per-item overhead, then overhead 1) whose plan splits a tile.
  std::vector<int> cus = {5 + static_cast<int>(seed % 12)};
  for (int n = 5; n <= 16; ++n) cus.push_back(n);
  for (int n = 2; n <= 4; ++n) cus.push_back(n);
  absl::StatusOr<WorkPlan> plan = absl::InternalError("no plan");
  for (int overhead : {-1, 1}) {
    for (int num_cu : cus) {
      PlanOptions options;
      options.num_cu = num_cu;
      options.fixed_overhead = overhead;
      plan = PlanDecode(batch, options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      if (plan->num_reduce_tiles() > 0) break;
    }
    if (plan->num_reduce_tiles() > 0) break;
  }
  const std::vector<Violation> violations = CheckPlan(batch, *plan);
  ASSERT_TRUE(violations.empty()) << FormatViolations(violations);

  absl::StatusOr<ExecutorOutput> got = ExecutePlan(batch, *plan, c.Inputs());
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<ReferenceOutput> want = ReferenceDecode(batch, c.Inputs());
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->stats.unwritten_tokens, 0);
  EXPECT_EQ(got->stats.rewritten_tokens, 0);
  EXPECT_EQ(got->stats.reduce_tiles, plan->num_reduce_tiles());

  absl::StatusOr<Comparison> cmp =
      CompareOutputs(got->o, got->lse, want->o, want->lse, GatesFor(dtype));
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  // Tighter than the gates: the fp32 executor rounds to the same bf16 as the fp64 result
  // almost everywhere (a missing kv token or a mis-weighted piece would break this).
  int64_t same_bf16 = 0;
  for (size_t i = 0; i < got->o.size(); ++i) {
    same_bf16 += got->o[i] == RoundToBf16(static_cast<float>(want->o[i]));
  }
  const double same_fraction = static_cast<double>(same_bf16) / got->o.size();
  EXPECT_GT(same_fraction, 0.995);
  std::printf(
      "[matrix] %s B=%d cu=%d variant=%s rows/tile=%d fold=%d works=%d reduce=%d "
      "cos_diff=%.3e max_abs_err=%.3e lse_err=%.3e same_bf16=%.5f\n",
      Name({GetParam(), 0}).c_str(), batch.num_requests(), plan->num_cu, plan->variant.c_str(),
      plan->rows_per_tile, plan->head_fold, plan->num_works(), plan->num_reduce_tiles(),
      cmp->cos_diff, cmp->max_abs_err, cmp->lse_max_abs_err, same_fraction);
  EXPECT_TRUE(cmp->passed) << cmp->Summary();
  EXPECT_LT(cmp->lse_max_abs_err, 1e-4) << cmp->Summary();  // fp32 LSE: far inside the gate
  // Few CUs: the plan splits tiles, so the partial / reduce path is part of the comparison.
  EXPECT_GT(plan->num_reduce_tiles(), 0) << "no split tile; raise the work or lower num_cu";
}

INSTANTIATE_TEST_SUITE_P(Matrix, ExecutorMatrixTest,
                         ::testing::Combine(::testing::Values(Arch::kSm90, Arch::kGfx950),
                                            ::testing::Values(DType::kBf16, DType::kFp8),
                                            ::testing::Range(0, 12), ::testing::Range(0, 4)),
                         Name);

}  // namespace
}  // namespace mlaps::sim
