// The plan checker catches each class of defect: every test plants one into a sound plan.
#include "sim/plan_checker.h"

#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "metadata/planner.h"

namespace mlaps::sim {
namespace {

// A plan with whole tiles, split tiles, several CUs and a causal MTP trim.
struct Fixture {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {700, 90, 2000}, 4, 16);
  WorkPlan plan;
  Fixture() {
    PlanOptions o;
    o.num_cu = 6;
    plan = *PlanDecode(batch, o);
  }
};

int FirstSplit(const WorkPlan& p) {
  for (int i = 0; i < p.num_works(); ++i) {
    if (p.work_info[i].partial_qo_loc != kNoPartial) return i;
  }
  return -1;
}
int FirstWhole(const WorkPlan& p) {
  for (int i = 0; i < p.num_works(); ++i) {
    if (p.work_info[i].partial_qo_loc == kNoPartial) return i;
  }
  return -1;
}

bool Has(const std::vector<Violation>& v, Defect d) {
  for (const Violation& x : v) {
    if (x.defect == d) return true;
  }
  return false;
}

TEST(PlanChecker, SoundPlanHasNoViolations) {
  Fixture f;
  ASSERT_GT(f.plan.num_reduce_tiles(), 0) << "fixture must split tiles";
  ASSERT_GE(FirstWhole(f.plan), 0) << "fixture must have whole tiles";
  EXPECT_EQ(FormatViolations(CheckPlan(f.batch, f.plan)), "");
}

struct Planted {
  std::string name;
  Defect defect;
  std::function<void(Fixture&)> plant;
  CheckOptions options = {};
};

TEST(PlanChecker, CatchesEveryPlantedDefect) {
  const std::vector<Planted> cases = {
      {"indptr_short", Defect::kWorkIndptr, [](Fixture& f) { f.plan.work_indptr.pop_back(); }},
      {"indptr_decreasing", Defect::kWorkIndptr,
       [](Fixture& f) { std::swap(f.plan.work_indptr[1], f.plan.work_indptr[2]); }},
      {"indptr_end", Defect::kWorkIndptr, [](Fixture& f) { f.plan.work_indptr.back() -= 1; }},
      {"cu_count", Defect::kWorkIndptr, [](Fixture&) {}, CheckOptions{5}},
      {"batch_idx", Defect::kBatchIdx, [](Fixture& f) { f.plan.work_info[0].batch_idx = 3; }},
      {"qo_outside", Defect::kQoRange, [](Fixture& f) { f.plan.work_info[0].qo_end = 99; }},
      {"qo_empty", Defect::kQoRange,
       [](Fixture& f) { f.plan.work_info[0].qo_end = f.plan.work_info[0].qo_start; }},
      {"kv_outside", Defect::kKvRange, [](Fixture& f) { f.plan.work_info[0].kv_end += 1000; }},
      {"kv_empty", Defect::kKvRange,
       [](Fixture& f) { f.plan.work_info[0].kv_start = f.plan.work_info[0].kv_end; }},
      {"kv_offset", Defect::kKvOffset, [](Fixture& f) { f.plan.work_info[0].kv_offset += 1; }},
      {"pad", Defect::kPad, [](Fixture& f) { f.plan.work_info[0].pad = 9; }},
      {"uncovered", Defect::kUncovered,
       [](Fixture& f) {
         // Shorten a whole tile's kv end by one page (and fix its offset): a gap remains.
         WorkInfo& w = f.plan.work_info[FirstWhole(f.plan)];
         w.kv_end -= 1;
         w.kv_offset = static_cast<int32_t>(
             f.batch.kv_len(w.batch_idx) -
             std::min<int64_t>((w.kv_end - f.batch.kv_indptr[w.batch_idx]) * 16,
                               f.batch.kv_len(w.batch_idx)));
       }},
      {"covered_twice", Defect::kCoveredTwice,
       [](Fixture& f) {
         WorkInfo w = f.plan.work_info[FirstWhole(f.plan)];
         f.plan.work_info.push_back(w);
         f.plan.work_indptr.back() += 1;
       }},
      {"causal_dead_item", Defect::kCausal,
       [](Fixture& f) {
         // One token per tile (H = 64), page size 1: token 0 sees kv < 61 of 64. An extra
         // item over kv [62, 63) for token 0 does nothing under the causal rule.
         f.batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {64}, 4, 1);
         PlanOptions o;
         o.num_cu = 1;
         f.plan = *PlanDecode(f.batch, o);
         f.plan.work_info.push_back({0, kNoPartial, 0, 1, 62, 63, 1, 0});
         f.plan.work_indptr.back() += 1;
       }},
      {"tile_overlap", Defect::kTileOverlap,
       [](Fixture& f) { f.plan.work_info[FirstSplit(f.plan)].qo_end -= 1; }},
      {"partial_row_capacity", Defect::kPartialRow, [](Fixture&) {}, CheckOptions{-1, -1, 1}},
      {"partial_row_shared", Defect::kPartialRow,
       [](Fixture& f) {
         const int i = FirstSplit(f.plan);
         for (int j = i + 1; j < f.plan.num_works(); ++j) {
           if (f.plan.work_info[j].partial_qo_loc != kNoPartial) {
             f.plan.work_info[j].partial_qo_loc = f.plan.work_info[i].partial_qo_loc;
             break;
           }
         }
       }},
      {"mixed_tile", Defect::kMixedTile,
       [](Fixture& f) { f.plan.work_info[FirstSplit(f.plan)].partial_qo_loc = kNoPartial; }},
      {"reduce_final_wrong", Defect::kReduceMap,
       [](Fixture& f) { f.plan.reduce_final_map[1] += 1; }},
      {"reduce_partial_wrong", Defect::kReduceMap,
       [](Fixture& f) { f.plan.reduce_partial_map[0] += 1000; }},
      {"reduce_missing_tile", Defect::kReduceMap,
       [](Fixture& f) {
         f.plan.reduce_indptr.pop_back();
         f.plan.reduce_final_map.resize(f.plan.reduce_final_map.size() - 2);
         f.plan.reduce_partial_map.resize(f.plan.reduce_indptr.back());
       }},
      {"reduce_indptr_bad", Defect::kReduceMap, [](Fixture& f) { f.plan.reduce_indptr[0] = 1; }},
  };
  for (const Planted& c : cases) {
    Fixture f;
    c.plant(f);
    std::vector<Violation> v = CheckPlan(f.batch, f.plan, c.options);
    EXPECT_TRUE(Has(v, c.defect)) << c.name << ": expected " << DefectName(c.defect) << ", got:\n"
                                  << FormatViolations(v);
    for (const Violation& x : v) EXPECT_FALSE(x.message.empty()) << c.name;
  }
}

TEST(PlanChecker, ReportsTheWorkItemAndField) {
  Fixture f;
  f.plan.work_info[2].kv_offset += 3;
  std::vector<Violation> v = CheckPlan(f.batch, f.plan);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0].work, 2);
  EXPECT_EQ(v[0].field, "kv_offset");
}

}  // namespace
}  // namespace mlaps::sim
