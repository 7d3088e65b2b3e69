#include "metadata/sparse_layout.h"

#include "gtest/gtest.h"
#include "metadata/planner.h"
#include "sim/plan_checker.h"

namespace mlaps {
namespace {

TEST(SparseLayout, PerTokenBoundsAndPadding) {
  // L = 3000, q = 4, topk 2048: L_j = 2997..3000 -> 2048 each; L = 2, q = 4: 0, 0, 1, 2.
  absl::StatusOr<SparseLayout> s =
      MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {3000, 2}, 4, 2048, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->batch.num_requests(), 12);
  EXPECT_EQ(s->token_bound, (std::vector<int32_t>{2997, 2998, 2999, 3000, 0, 0, 1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(s->token_to_seq, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1}));
  EXPECT_EQ(s->batch.kv_indptr, (std::vector<int32_t>{0, 2048, 4096, 6144, 8192, 8192, 8192, 8193,
                                                      8195, 8195, 8195, 8195, 8195}));
  ASSERT_TRUE(ValidateBatch(s->batch).ok()) << ValidateBatch(s->batch);
  absl::StatusOr<WorkPlan> plan = PlanDecode(s->batch, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(sim::CheckPlan(s->batch, *plan).empty());
  EXPECT_EQ(ComputeSparseCapacity(12, 2048).slots, 12 * 2048);
}

TEST(SparseLayout, Errors) {
  EXPECT_FALSE(MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5}, 0, 2048, 1).ok());
  EXPECT_FALSE(MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5, 6}, 2, 2048, 1).ok());
  EXPECT_FALSE(MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {-1}, 2, 2048, 1).ok());
  EXPECT_FALSE(MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5}, 2, 1 << 20, 4096).ok());
}

}  // namespace
}  // namespace mlaps
