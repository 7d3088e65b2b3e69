#include "metadata/cp_shard.h"

#include "gtest/gtest.h"
#include "metadata/planner.h"
#include "sim/plan_checker.h"

namespace mlaps {
namespace {

TEST(CpShard, OwnerLocalAndGlobalAreInverse) {
  for (int w : {1, 2, 3, 4, 7, 8}) {
    for (int i : {1, 2, 16}) {
      CpSharding s{w, i};
      std::vector<int64_t> next_local(w, 0);
      for (int64_t p = 0; p < 1000; ++p) {
        const int r = CpOwner(p, s);
        ASSERT_EQ(CpLocalIndex(p, s), next_local[r]++) << "p=" << p;  // dense, in order
        ASSERT_EQ(CpGlobalPosition(r, CpLocalIndex(p, s), s), p);
      }
      for (int r = 0; r < w; ++r) EXPECT_EQ(CpLocalLength(1000, r, s), next_local[r]);
    }
  }
}

TEST(CpShard, Errors) {
  EXPECT_FALSE(ValidateSharding({0, 1}).ok());
  EXPECT_FALSE(ValidateSharding({2, 3}).ok());
  EXPECT_FALSE(ValidateSharding({2, 32}, 16).ok());
  EXPECT_TRUE(ValidateSharding({7, 16}, 64).ok());
  Batch g = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 2, 4, 13, 1);
  EXPECT_FALSE(MakeCpShardBatch(g, {4, 1}, 4).ok());
}

TEST(CpShard, ShardBatchesPlanSoundly) {
  Batch g = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {13, 23, 64, 1200}, 4, 16);
  for (int w : {2, 3, 7}) {
    int64_t total = 0;
    for (int r = 0; r < w; ++r) {
      absl::StatusOr<Batch> shard = MakeCpShardBatch(g, {w, 1}, r);
      ASSERT_TRUE(shard.ok()) << shard.status();
      ASSERT_TRUE(ValidateBatch(*shard).ok());
      for (int b = 0; b < 4; ++b) total += shard->kv_len(b);
      absl::StatusOr<WorkPlan> plan = PlanDecode(*shard, {});
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_TRUE(sim::CheckPlan(*shard, *plan).empty());
    }
    EXPECT_EQ(total, 13 + 23 + 64 + 1200);
  }
}

}  // namespace
}  // namespace mlaps
