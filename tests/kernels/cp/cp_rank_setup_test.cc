// The host side of the CP rank runner (kernels/cp/cp_rank_setup.h), on the CPU:
//   * the GPU planner's static inputs the setup resolves (options, variant, grid,
//     capacities) give, through the host planner (PlanDecodeInto: the GPU planner's
//     contract is its bytes), exactly PlanDecode's plan of the shard, within the capacities;
//   * the rank's own KV cache (its sub-pages copied out of the global cache, local ids
//     0..n-1) gives the executor the same bits as the shard viewed in the global cache;
//   * the runner's data flow modelled on the host: every rank's fp32 (O, LSE) from the
//     executor placed at the gather offsets (the all-gather's layout), merged
//     (sim::MergeCpRanks, the GPU merge's contract), rounded to bf16 once, equals the
//     unsharded fp64 reference under docs/design.md's gates with no failing element.
// The decode kernels themselves run on the CPU emulation in tests/kernels/decode (CP ranks
// included); the GPU run of the same runner is cp_rank_runner_test.
#include "kernels/cp/cp_rank_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "metadata/work_plan.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/reference.h"
#include "tests/kernels/cp/cp_rank_cases.h"

namespace mlaps {
namespace {

using cp_testing::RankCase;

std::vector<RankCase> Cases() { return cp_testing::AllCases({70, 213}); }

class CpRankSetupTest : public ::testing::TestWithParam<int> {};

TEST_P(CpRankSetupTest, PlansMatchAndRanksMergeToTheUnshardedReference) {
  const RankCase rc = Cases()[GetParam()];
  SCOPED_TRACE(rc.Name());
  const sim::DecodeCase gc = rc.Case(500 + GetParam());
  const Batch& global = gc.batch;
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  std::vector<float> gather_o(rc.world * rows * kHeadDimV), gather_lse(rc.world * rows);
  for (int rank = 0; rank < rc.world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    absl::StatusOr<cp::CpRankSetup> s =
        cp::MakeCpRankSetup(global, gc.kv_indices, rc.Sharding(), rank);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->rows, rows);
    ASSERT_EQ(s->view.batch.page_size, rc.interleave);
    // The plan: PlanDecode's, and the host planner run on the resolved inputs the GPU
    // planner gets, into capacity-sized buffers, must write the same.
    absl::StatusOr<WorkPlan> plan = PlanDecode(s->view.batch, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_NE(plan->variant.find("cprr"), std::string::npos) << plan->variant;
    EXPECT_EQ(plan->num_cu, s->options.num_cu);
    EXPECT_EQ(plan->head_fold, s->variant.head_fold);
    EXPECT_EQ(plan->tokens_per_tile, s->variant.tokens_per_tile);
    EXPECT_EQ(plan->rows_per_tile, s->variant.rows_per_tile);
    const PlanCapacity& c = s->capacity;
    std::vector<int32_t> qo(c.qo_indptr), wi(c.work_indptr), ri(c.reduce_indptr),
        rf(c.reduce_final_map), rp(c.reduce_partial_map);
    std::vector<WorkInfo> info(c.work_info);
    PlanBuffers buffers{absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(info),
                        absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)};
    absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(s->view.batch, s->options, buffers);
    ASSERT_TRUE(sizes.ok()) << sizes.status();
    ASSERT_EQ(sizes->num_works, plan->num_works());
    EXPECT_EQ(std::vector<int32_t>(wi.begin(), wi.begin() + s->options.num_cu + 1),
              plan->work_indptr);
    for (int w = 0; w < sizes->num_works; ++w) {
      EXPECT_EQ(std::memcmp(&info[w], &plan->work_info[w], sizeof(WorkInfo)), 0) << "item " << w;
    }
    EXPECT_EQ(sizes->num_reduce_tiles, plan->num_reduce_tiles());
    EXPECT_LE(sizes->num_partial_rows, c.partial_rows);
    // The rank's own cache vs the shard viewed in the global cache: same executor bits.
    const std::vector<float> own = cp::GatherShardCache(*s, gc.kv_cache);
    sim::CpGlobalPositions hook;
    const CpSharding sh = rc.Sharding();
    hook.global_position = [sh, rank](int, int64_t j) { return CpGlobalPosition(rank, j, sh); };
    hook.global_kv_len = s->view.global_kv_len;
    sim::DecodeInputs in_global = gc.Inputs();
    in_global.kv_indices = s->view.kv_indices;
    in_global.cp = &hook;
    sim::DecodeInputs in_own = in_global;
    in_own.kv_cache = own;
    in_own.kv_indices = s->local_kv_indices;
    sim::ExecutorOptions exec;
    exec.final_o_bf16 = false;  // the rank's fp32 O (MlaDecodeParams::o_fp32)
    exec.kv_block = 32;
    absl::StatusOr<sim::ExecutorOutput> a = sim::ExecutePlan(s->view.batch, *plan, in_own, exec);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<sim::ExecutorOutput> b = sim::ExecutePlan(s->view.batch, *plan, in_global, exec);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->o.size(), static_cast<size_t>(rows * kHeadDimV));
    EXPECT_EQ(std::memcmp(a->o.data(), b->o.data(), a->o.size() * 4), 0);
    EXPECT_EQ(std::memcmp(a->lse.data(), b->lse.data(), a->lse.size() * 4), 0);
    std::copy(a->o.begin(), a->o.end(), gather_o.begin() + cp::GatherOffsetO(rank, rows));
    std::copy(a->lse.begin(), a->lse.end(), gather_lse.begin() + cp::GatherOffsetLse(rank, rows));
  }
  std::vector<absl::Span<const float>> os, ls;
  for (int r = 0; r < rc.world; ++r) {
    os.push_back(absl::MakeConstSpan(gather_o).subspan(cp::GatherOffsetO(r, rows), rows * 512));
    ls.push_back(absl::MakeConstSpan(gather_lse).subspan(cp::GatherOffsetLse(r, rows), rows));
  }
  std::vector<float> o(rows * kHeadDimV), lse(rows);
  ASSERT_TRUE(
      sim::MergeCpRanks(os, ls, rows, kHeadDimV, absl::MakeSpan(o), absl::MakeSpan(lse)).ok());
  for (float& x : o) x = sim::RoundToBf16(x);
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(global, gc.Inputs());
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<sim::Comparison> cmp =
      sim::CompareOutputs(o, lse, ref->o, ref->lse, sim::GatesFor(global.kv_dtype));
  ASSERT_TRUE(cmp.ok());
  EXPECT_TRUE(cmp->passed) << cmp->Summary();
  EXPECT_EQ(cmp->num_failing, 0) << cmp->Summary();
  std::printf("%s: host model of the rank runner vs unsharded reference: %s\n", rc.Name().c_str(),
              cmp->Summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(AllShapes, CpRankSetupTest,
                         ::testing::Range(0, static_cast<int>(Cases().size())));

TEST(CpRankSetup, RefusesThePolicyTheGpuPlannerDoesNotRun) {
  const Batch global = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {5, 40}, 1, 16);
  PlanOptions options;
  options.policy = PlanPolicy::kLongestFirst;
  absl::StatusOr<cp::CpRankSetup> s = cp::MakeCpRankSetup(global, {}, {2, 1}, 0, options);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(cp::MakeCpRankSetup(global, {}, {2, 1}, 0).ok());
  EXPECT_FALSE(cp::MakeCpRankSetup(global, {}, {2, 1}, 2).ok());  // rank outside [0, W)
}

TEST(CpRankSetup, AnEmptyShardStillHasACache) {
  // One request of 1 token, W = 2: rank 1 holds nothing.
  const Batch global = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {1}, 1, 16);
  const sim::DecodeCase gc = sim::MakeDecodeCase(global, 3);
  absl::StatusOr<cp::CpRankSetup> s = cp::MakeCpRankSetup(global, gc.kv_indices, {2, 1}, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->local_kv_indices.empty());
  EXPECT_EQ(cp::GatherShardCache(*s, gc.kv_cache).size(), static_cast<size_t>(kHeadDimQk));
}

}  // namespace
}  // namespace mlaps
