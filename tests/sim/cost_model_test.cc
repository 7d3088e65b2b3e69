// The simulator's cost model: item costs (causal trim, kv granularity), per-CU loads and the
// makespan, the lower bound no plan beats, and the calibrated (ns) unit costs read from the
// registry, with the registry's checks on them.
#include "sim/cost_model.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/decode_route.h"
#include "metadata/planner.h"
#include "metadata/registry.h"

namespace mlaps::sim {
namespace {

using ::testing::HasSubstr;

WorkPlan PlanOrDie(const Batch& batch, const PlanOptions& options) {
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

PlanOptions Resolved(const Batch& batch, const PlanOptions& options) {
  absl::StatusOr<PlanOptions> o = ResolveOptions(batch, options);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : PlanOptions{};
}

TEST(WorkItemCost, CountsVisibleBlocksUnderTheCausalTrim) {
  // H = 64, qlen 2: one token per tile. Token 0 sees 960 kv tokens (15 blocks of 64), token 1
  // sees 961 (16 blocks). One CU, so both tiles are whole items.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 2, 961, 64);
  PlanOptions options;
  options.num_cu = 1;
  const WorkPlan plan = PlanOrDie(batch, options);
  ASSERT_EQ(plan.num_works(), 2);
  CostParams params;
  params.kv_granularity = 64;
  params.per_block = 10.0;
  params.per_item = 3.0;
  EXPECT_DOUBLE_EQ(WorkItemCost(batch, plan, plan.work_info[0], params), 15 * 10.0 + 3.0);
  EXPECT_DOUBLE_EQ(WorkItemCost(batch, plan, plan.work_info[1], params), 16 * 10.0 + 3.0);
}

TEST(WorkItemCost, PiecesOfASplitTileAddUpToTheTile) {
  // One long request over 8 CUs: its pieces cover the tile's blocks exactly once.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 40000, 64);
  PlanOptions options;
  options.num_cu = 8;
  const WorkPlan plan = PlanOrDie(batch, options);
  ASSERT_GT(plan.num_works(), 1);
  CostParams params;
  params.kv_granularity = 64;
  params.per_block = 1.0;
  params.per_item = 0.0;
  double blocks = 0;
  for (const WorkInfo& w : plan.work_info) blocks += WorkItemCost(batch, plan, w, params);
  EXPECT_DOUBLE_EQ(blocks, std::ceil(40000 / 64.0));
}

TEST(EvaluatePlan, LoadsMakespanAndBoundAgreeWithTheItems) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> lens(1 + rng() % 64);
    for (int& l : lens) l = 1 + static_cast<int>(rng() % 20000);
    const int qlen = 1 + static_cast<int>(rng() % 4);
    for (int& l : lens) l = std::max(l, qlen);
    const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, lens, qlen, 64);
    PlanOptions options;
    options.num_cu = 1 + static_cast<int>(rng() % 132);
    const WorkPlan plan = PlanOrDie(batch, options);
    const CostParams params = BlockCostParams(batch, Resolved(batch, options));
    const CostReport r = EvaluatePlan(batch, plan, params);
    SCOPED_TRACE(trial);
    ASSERT_EQ(static_cast<int>(r.cu_load.size()), plan.num_cu);
    double total = 0, makespan = 0;
    int works = 0;
    for (int c = 0; c < plan.num_cu; ++c) {
      double load = 0;
      for (int i = plan.work_indptr[c]; i < plan.work_indptr[c + 1]; ++i) {
        load += WorkItemCost(batch, plan, plan.work_info[i], params);
      }
      EXPECT_DOUBLE_EQ(r.cu_load[c], load);
      EXPECT_EQ(r.cu_items[c], plan.work_indptr[c + 1] - plan.work_indptr[c]);
      total += load;
      makespan = std::max(makespan, load);
      works += r.cu_items[c];
    }
    EXPECT_DOUBLE_EQ(r.total, total);
    EXPECT_DOUBLE_EQ(r.makespan, makespan);
    EXPECT_EQ(r.works, works);
    EXPECT_EQ(r.split_tiles, plan.num_reduce_tiles());
    // No plan beats the bound: the makespan is at least the bound, and the bound is at least
    // an even spread of the unsplit work.
    EXPECT_GE(r.makespan + 1e-9, r.lower_bound);
    EXPECT_GE(r.balance(), 1.0 - 1e-12);
  }
}

proto::CostModel TwoTileModel() {
  proto::CostModel cost;
  cost.set_ns_per_block(100.0);
  cost.set_ns_per_item(50.0);
  proto::TileCost* t16 = cost.add_tile();
  t16->set_rows(16);
  t16->set_ns_per_block(700.0);
  t16->set_ns_per_item(900.0);
  proto::TileCost* t64 = cost.add_tile();
  t64->set_rows(64);
  t64->set_ns_per_block(1000.0);
  t64->set_ns_per_item(1200.0);
  return cost;
}

TEST(TimeCostParams, PicksTheTileEntryForTheRowsInUse) {
  const proto::CostModel cost = TwoTileModel();
  struct Case {
    int heads, qlen;
    double per_block, per_item;
  };
  // (16, 1): 16 rows; (16, 4): 4 tokens x 16 heads = 64; (128, 1): folded into 2 groups of
  // 64; (32, 1): 32 rows, no entry -> the kernel-wide costs.
  for (const Case& c : {Case{16, 1, 700, 900}, Case{16, 4, 1000, 1200}, Case{128, 1, 1000, 1200},
                        Case{32, 1, 100, 50}}) {
    const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, c.heads, 4, c.qlen, 500, 64);
    PlanOptions options;
    options.num_cu = 8;
    const WorkPlan plan = PlanOrDie(batch, options);
    absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
    ASSERT_TRUE(p.ok()) << p.status();
    SCOPED_TRACE(c.heads * 100 + c.qlen);
    EXPECT_DOUBLE_EQ(p->per_block, c.per_block);
    EXPECT_DOUBLE_EQ(p->per_item, c.per_item);
    EXPECT_EQ(p->kv_granularity, 64);
    // The makespan is then in ns: blocks x ns_per_block + items x ns_per_item on the worst CU.
    const CostReport r = EvaluatePlan(batch, plan, *p);
    EXPECT_GT(r.makespan, 0);
  }
}

TEST(TimeCostParams, AnEntryForTwoBlocksACuNeedsTheGridThatRunsIt) {
  // The 16-row entry describes two blocks a CU (the compact layout), which the kernels run
  // only when the grid has more than one block a CU: a grid of at most DefaultNumCu blocks
  // runs the one-block-a-CU kernel, at the kernel-wide costs.
  proto::CostModel cost = TwoTileModel();
  cost.mutable_tile(0)->set_blocks_per_cu(2);
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 300, 1, 500, 64);
  struct Case {
    int num_cu;
    double per_block, per_item;
  };
  const int sms = DefaultNumCu(Arch::kSm90);
  for (const Case& c :
       {Case{8, 100, 50}, Case{sms, 100, 50}, Case{sms + 1, 700, 900}, Case{2 * sms, 700, 900}}) {
    SCOPED_TRACE(c.num_cu);
    PlanOptions options;
    options.num_cu = c.num_cu;
    const WorkPlan plan = PlanOrDie(batch, options);
    ASSERT_EQ(plan.num_cu, c.num_cu);
    absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_DOUBLE_EQ(p->per_block, c.per_block);
    EXPECT_DOUBLE_EQ(p->per_item, c.per_item);
  }
}

TEST(TimeCostParams, TwoEntriesForOneRowsValueSplitByTheGrid) {
  // rows 16 at one block a CU (300 / 400) and at two (700 / 900, the compact layout): a grid
  // of at most DefaultNumCu blocks takes the first, a larger one the second, whatever the
  // order of the entries.
  const int sms = DefaultNumCu(Arch::kSm90);
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 300, 1, 500, 64);
  for (bool one_block_first : {true, false}) {
    proto::CostModel cost = TwoTileModel();
    cost.mutable_tile(0)->set_blocks_per_cu(2);
    proto::TileCost one;
    one.set_rows(16);
    one.set_ns_per_block(300.0);
    one.set_ns_per_item(400.0);
    *cost.add_tile() = one;
    if (one_block_first) std::swap(*cost.mutable_tile(0), *cost.mutable_tile(2));
    struct Case {
      int num_cu;
      double per_block, per_item;
    };
    for (const Case& c : {Case{8, 300, 400}, Case{sms, 300, 400}, Case{sms + 1, 700, 900},
                          Case{2 * sms, 700, 900}}) {
      SCOPED_TRACE(absl::StrCat(c.num_cu, one_block_first ? " one-block entry first" : ""));
      PlanOptions options;
      options.num_cu = c.num_cu;
      const WorkPlan plan = PlanOrDie(batch, options);
      absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_DOUBLE_EQ(p->per_block, c.per_block);
      EXPECT_DOUBLE_EQ(p->per_item, c.per_item);
    }
  }
}

TEST(TimeCostParams, ScalesBlockCostsToThePlansGranularity) {
  // Fitted for 64-token blocks; a page-1 batch plans 16-token blocks (kv_granularity
  // max(16, page)), each a quarter of the fitted block. The per-item cost does not scale.
  proto::CostModel cost = TwoTileModel();
  cost.set_kv_granularity(64);
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 4, 1, 500, 1);
  PlanOptions options;
  options.num_cu = 8;
  const WorkPlan plan = PlanOrDie(batch, options);
  absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kv_granularity, 16);
  EXPECT_DOUBLE_EQ(p->per_block, 700.0 / 4);
  EXPECT_DOUBLE_EQ(p->per_item, 900.0);
}

TEST(TimeCostParams, TakesTheRoutedEntryOfTheKernelThePlanRunsOn) {
  // A model with tile entries for 64 rows and routed entries for the hi + lo kernel ("bf16")
  // at 64-token blocks and for gathered 16-token blocks of f16 P V.
  proto::CostModel cost;
  cost.set_kv_granularity(64);
  proto::TileCost* t = cost.add_tile();
  t->set_rows(64);
  t->set_ns_per_block(1000);
  t->set_ns_per_item(5000);
  auto routed = [&](const char* kernel, int g, double block, double item) {
    proto::RoutedTileCost* r = cost.add_routed();
    r->set_kernel(kernel);
    r->set_rows(64);
    r->set_kv_granularity(g);
    r->set_ns_per_block(block);
    r->set_ns_per_item(item);
  };
  routed("bf16", 64, 1300, 4000);
  routed("f16pv", 16, 400, 7000);
  struct Case {
    const char* what;
    DType dtype;
    int batch, ctx, page;
    double block, item;
  };
  const Case cases[] = {
      // bf16 long requests on whole pages: f16 P V, no routed entry at 64: the tile entry.
      {"bf16 long", DType::kBf16, 8, 8192, 64, 1000, 5000},
      // bf16 short requests: hi + lo.
      {"bf16 short", DType::kBf16, 8, 1024, 64, 1300, 4000},
      // fp8 on pages of 1 token: f16 P V on gathered blocks of 16 tokens.
      {"fp8 page 1", DType::kFp8, 8, 1024, 1, 400, 7000},
      // fp8 on whole pages: the tile entry (scaled by nothing: granularity 64).
      {"fp8 page 64", DType::kFp8, 8, 1024, 64, 1000, 5000},
      // bf16 on pages of 1 token: hi + lo, without an entry at 16: the tile entry scaled to 16.
      {"bf16 page 1", DType::kBf16, 8, 1024, 1, 250, 5000},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Batch batch = MakeUniformBatch(Arch::kSm90, c.dtype, 64, c.batch, 1, c.ctx, c.page);
    PlanOptions options;
    options.num_cu = 16;
    const WorkPlan plan = PlanOrDie(batch, options);
    absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_DOUBLE_EQ(p->per_block, c.block);
    EXPECT_DOUBLE_EQ(p->per_item, c.item);
  }
}

TEST(TimeCostParams, RefusesAnUncalibratedModel) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 32, 4, 1, 500, 64);
  PlanOptions options;
  options.num_cu = 8;
  const WorkPlan plan = PlanOrDie(batch, options);
  proto::CostModel cost = TwoTileModel();
  cost.set_ns_per_block(0);  // no 32-row entry and no kernel-wide cost
  absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, cost);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("32-row tiles"));
}

TEST(PredictedDecodeNs, IsTheMakespanUnderTheRegistrysCosts) {
  // sm90: the plan's makespan under its variant's registry costs plus one launch; gfx950's
  // registry has no calibrated costs, so no prediction.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 16, 1, 4000, 64);
  PlanOptions options;
  options.num_cu = 20;
  const WorkPlan plan = PlanOrDie(batch, options);
  absl::StatusOr<proto::CostModel> cost = VariantCost(Arch::kSm90, plan.variant);
  ASSERT_TRUE(cost.ok());
  absl::StatusOr<CostParams> p = TimeCostParams(batch, Resolved(batch, options), plan, *cost);
  ASSERT_TRUE(p.ok());
  absl::StatusOr<double> ns = PredictedDecodeNs(batch, options, plan);
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_GT(cost->ns_per_launch(), 0);
  EXPECT_DOUBLE_EQ(*ns, EvaluatePlan(batch, plan, *p).makespan + cost->ns_per_launch());
  EXPECT_GT(*ns, 0);

  const Batch amd = MakeUniformBatch(Arch::kGfx950, DType::kFp8, 16, 16, 2, 4000, 64);
  const WorkPlan amd_plan = PlanOrDie(amd, options);
  EXPECT_EQ(PredictedDecodeNs(amd, options, amd_plan).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReducePartialRows, CountsThePiecesOfSplitTilesTimesTheirRows) {
  // H = 128 folds into 2 groups of 64 heads; qlen 2 packs one token a tile. An item charge of
  // one block: 28 tiles on 20 CUs split at the CU boundaries; the reduce reads every piece of a
  // split tile.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 128, 7, 2, 3000, 64);
  PlanOptions options;
  options.num_cu = 20;
  options.fixed_overhead = 1;
  options.kv_lanes = 1;
  const WorkPlan plan = PlanOrDie(batch, options);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  int64_t want = 0;
  for (const WorkInfo& w : plan.work_info) {
    if (w.partial_qo_loc != kNoPartial) want += int64_t{w.qo_end - w.qo_start} * 64;
  }
  EXPECT_EQ(ReducePartialRows(batch, plan), want);
  options.max_split_per_batch = 1;  // whole tiles: nothing to reduce
  const WorkPlan whole = PlanOrDie(batch, options);
  EXPECT_EQ(ReducePartialRows(batch, whole), 0);

  proto::ReduceCost reduce;
  reduce.set_ns_per_launch(3000);
  reduce.set_ns_per_partial_row(1.5);
  EXPECT_DOUBLE_EQ(ReduceNs(reduce, want), 3000 + 1.5 * want);
  EXPECT_DOUBLE_EQ(ReduceNs(reduce, 0), 0);  // no split tile: no reduce launch
  absl::StatusOr<double> predicted = PredictedReduceNs(batch, plan);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  EXPECT_DOUBLE_EQ(*predicted, ReduceNs(LoadRegistry(Arch::kSm90)->reduce(), want));
  EXPECT_DOUBLE_EQ(*PredictedReduceNs(batch, whole), 0);
}

// The planner's choice of item charge (BatchFixedOverhead) against the simulator's own
// prediction of both candidate plans (makespan under the registry's costs + the reduce):
// the charge it resolves to is never the slower of the two.
TEST(BatchFixedOverhead, PicksThePlanTheSimulatorPredictsFaster) {
  std::mt19937 rng(24);
  const std::pair<int, int> shapes[] = {{16, 1}, {16, 4}, {32, 3}, {64, 2}, {128, 1}, {128, 2}};
  int split_charged = 0, item_charged = 0, whole_charged = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const auto [heads, qlen] = shapes[rng() % std::size(shapes)];
    const DType dtype = rng() % 2 ? DType::kFp8 : DType::kBf16;
    const int b = 16 + static_cast<int>(rng() % 240);
    std::vector<int> lens(b);
    const int kind = static_cast<int>(rng() % 3);  // uniform, varlen, mixed
    const int base = 512 + static_cast<int>(rng() % 16000);
    for (int i = 0; i < b; ++i) {
      lens[i] = kind == 0   ? base
                : kind == 1 ? 64 + static_cast<int>(rng() % 16384)
                            : (i % 12 == 0 ? 32768 : 64 + static_cast<int>(rng() % 2048));
      lens[i] = std::max(lens[i], qlen);
    }
    const Batch batch = MakeVarlenBatch(Arch::kSm90, dtype, heads, lens, qlen, 64);
    SCOPED_TRACE(absl::StrCat("trial ", trial, ": H", heads, " q", qlen, " b", b, " kind ", kind));
    const PlanOptions resolved = Resolved(batch, PlanOptions{});
    absl::StatusOr<ResolvedVariant> v = ResolveVariant(VariantQueryOf(batch, false));
    ASSERT_TRUE(v.ok()) << v.status();
    const int item = DefaultFixedOverhead(*v, Arch::kSm90, 64, resolved.kv_granularity, 0);
    const int rows = v->heads_per_group * v->tokens_per_tile;
    const WorkPlan chosen = PlanOrDie(batch, PlanOptions{});
    const int grid = chosen.num_cu;
    const UnitCosts unit = BatchUnitCosts(batch, v->cost, rows, grid, resolved.kv_granularity);
    const int split = static_cast<int>(
        std::ceil((unit.ns_per_item + SplitReduceNs(v->reduce, rows, grid)) / unit.ns_per_block));
    auto predicted = [&](int charge) {
      PlanOptions o;
      o.fixed_overhead = charge;
      const WorkPlan plan = PlanOrDie(batch, o);
      absl::StatusOr<double> decode = PredictedDecodeNs(batch, o, plan);
      absl::StatusOr<double> reduce = PredictedReduceNs(batch, plan);
      EXPECT_TRUE(decode.ok() && reduce.ok());
      return *decode + *reduce;
    };
    // Where the item plan's reduce is over a tenth of its busiest CU (short items; these
    // batches are on whole pages, where the choice is made): the item charge, or on the f16 P V
    // kernel a charge that splits no tile where the simulator predicts that plan no slower.
    PlanOptions item_options;
    item_options.fixed_overhead = item;
    const WorkPlan item_plan = PlanOrDie(batch, item_options);
    absl::StatusOr<CostParams> params =
        TimeCostParams(batch, Resolved(batch, item_options), item_plan,
                       *VariantCost(Arch::kSm90, item_plan.variant));
    ASSERT_TRUE(params.ok()) << params.status();
    if (10 * *PredictedReduceNs(batch, item_plan) >
        EvaluatePlan(batch, item_plan, *params).makespan) {
      if (resolved.fixed_overhead == item) {
        ++item_charged;
        continue;
      }
      const std::string kernel = Sm90DecodeKernelName(dtype == DType::kFp8, rows, false, 64,
                                                      batch.kv_indptr.back(), batch.num_requests());
      EXPECT_EQ(kernel, "f16pv");
      EXPECT_EQ(chosen.num_reduce_tiles(), 0);
      EXPECT_LE(predicted(resolved.fixed_overhead), predicted(item) * (1 + 1e-9));
      ++whole_charged;
      continue;
    }
    ASSERT_TRUE(resolved.fixed_overhead == item || resolved.fixed_overhead == split)
        << resolved.fixed_overhead << " is neither " << item << " nor " << split;
    (resolved.fixed_overhead == item ? item_charged : split_charged) += 1;
    const double mine = predicted(resolved.fixed_overhead);
    const double other = predicted(resolved.fixed_overhead == item ? split : item);
    EXPECT_LE(mine, other * (1 + 1e-9));
  }
  // Every choice occurs over these batches.
  EXPECT_GT(split_charged, 0);
  EXPECT_GT(item_charged, 0);
  EXPECT_GT(whole_charged, 0);
}

TEST(RegistryCost, EverySm90RowIsCalibratedForEveryTileItServes) {
  // The sm90 kernels serve 16, 32, 48 and 64 rows in use (H x tokens per tile); each row of
  // the registry carries a fitted, positive cost for each (kernels/decode/mla_decode_calibrate).
  absl::StatusOr<proto::KernelRegistry> registry = LoadRegistry(Arch::kSm90);
  ASSERT_TRUE(registry.ok()) << registry.status();
  for (const proto::KernelRow& row : registry->kernel()) {
    SCOPED_TRACE(row.name());
    absl::StatusOr<proto::CostModel> cost = VariantCost(Arch::kSm90, row.name());
    ASSERT_TRUE(cost.ok()) << cost.status();
    for (int rows : {16, 32, 48, 64}) {
      bool found = false;
      for (const proto::TileCost& t : cost->tile()) {
        if (t.rows() != rows) continue;
        found = true;
        EXPECT_GT(t.ns_per_block(), 0);
        EXPECT_GE(t.ns_per_item(), 0);
      }
      EXPECT_TRUE(found) << rows << " rows";
    }
  }
  absl::StatusOr<proto::CostModel> missing = VariantCost(Arch::kSm90, "no_such_kernel");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(RegistryCost, ValidationRejectsBadCosts) {
  absl::StatusOr<proto::KernelRegistry> base = LoadRegistry(Arch::kSm90);
  ASSERT_TRUE(base.ok());
  struct Case {
    const char* what;
    void (*mutate)(proto::CostModel*);
    const char* message;
  };
  const Case cases[] = {
      {"negative block cost", [](proto::CostModel* c) { c->set_ns_per_block(-1); },
       "must be finite, >= 0"},
      {"NaN item cost",
       [](proto::CostModel* c) { c->set_ns_per_item(std::numeric_limits<double>::quiet_NaN()); },
       "must be finite, >= 0"},
      {"negative launch cost", [](proto::CostModel* c) { c->set_ns_per_launch(-5); },
       "ns_per_launch = -5 (must be finite, >= 0)"},
      {"tile rows 0", [](proto::CostModel* c) { c->add_tile()->set_rows(0); },
       "is outside [1, rows_per_tile = 64]"},
      {"tile rows past the tile", [](proto::CostModel* c) { c->add_tile()->set_rows(65); },
       "is outside [1, rows_per_tile = 64]"},
      {"blocks_per_cu past 8",
       [](proto::CostModel* c) {
         proto::TileCost* t = c->add_tile();
         t->set_rows(8);
         t->set_blocks_per_cu(9);
       },
       ".blocks_per_cu = 9 is outside [0, 8]"},
      {"kv_granularity not a power of two", [](proto::CostModel* c) { c->set_kv_granularity(48); },
       "cost.kv_granularity = 48 is not 0 or a power of two"},
      {"repeated rows",
       [](proto::CostModel* c) {
         c->add_tile()->set_rows(8);
         c->add_tile()->set_rows(8);
       },
       "repeats an earlier entry of one block a CU"},
      {"repeated rows, both of two blocks a CU",
       [](proto::CostModel* c) {
         for (int k = 0; k < 2; ++k) {
           proto::TileCost* t = c->add_tile();
           t->set_rows(8);
           t->set_blocks_per_cu(2 + k);
         }
       },
       "repeats an earlier entry of several blocks a CU"},
      {"infinite tile cost",
       [](proto::CostModel* c) {
         proto::TileCost* t = c->add_tile();
         t->set_rows(8);
         t->set_ns_per_block(std::numeric_limits<double>::infinity());
       },
       "must be finite, >= 0"},
  };
  // One rows value at one block a CU and at two is two occupancies, not a repeat.
  proto::KernelRegistry two = *base;
  for (int k = 0; k < 2; ++k) {
    proto::TileCost* t = two.mutable_kernel(0)->mutable_cost()->add_tile();
    t->set_rows(8);
    t->set_blocks_per_cu(k + 1);
  }
  EXPECT_TRUE(ValidateRegistry(two).ok()) << ValidateRegistry(two);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    proto::KernelRegistry registry = *base;
    c.mutate(registry.mutable_kernel(0)->mutable_cost());
    const absl::Status s = ValidateRegistry(registry);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_THAT(s.message(), HasSubstr("cost"));
  }
}

}  // namespace
}  // namespace mlaps::sim
