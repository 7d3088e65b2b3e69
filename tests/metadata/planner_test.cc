// The planner: layout, tiling, folding, causal trim, splits, capacity; every plan it makes
// is checked for exactly-once coverage by the simulator's plan checker.
#include "metadata/planner.h"

#include <algorithm>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "metadata/capacity.h"
#include "metadata/registry.h"
#include "sim/plan_checker.h"

namespace mlaps {
namespace {

void ExpectSound(const Batch& batch, const WorkPlan& plan) {
  std::vector<sim::Violation> v = sim::CheckPlan(batch, plan);
  EXPECT_TRUE(v.empty()) << sim::FormatViolations(v);
}

WorkPlan PlanOrDie(const Batch& batch, const PlanOptions& options = {}) {
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

TEST(Planner, UniformBatchCoversEverythingOnce) {
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 32, 32, 1, 1024, 64);
  WorkPlan plan = PlanOrDie(batch);
  EXPECT_EQ(plan.num_cu, 132);
  EXPECT_EQ(plan.work_indptr.size(), 133u);
  EXPECT_EQ(plan.head_fold, 1);
  ExpectSound(batch, plan);
}

TEST(Planner, DefaultGridFollowsTheRegistrysBlocksPerCu) {
  // The first registry TileCost entry of the rows in use sets the default grid's blocks a CU:
  // one on sm90 for every fill (16-row tiles run the narrow-tile kernel at one block an SM by
  // default; their two-blocks entry costs an explicit larger grid), so 132; an explicit num_cu
  // wins; the AMD registries keep one block a CU.
  struct Case {
    Arch arch;
    int heads, qlen, num_cu, want;
  };
  for (const Case& c : {Case{Arch::kSm90, 16, 1, 0, 132}, Case{Arch::kSm90, 16, 1, 264, 264},
                        Case{Arch::kSm90, 16, 2, 0, 132}, Case{Arch::kSm90, 128, 1, 0, 132},
                        Case{Arch::kSm90, 16, 1, 100, 100}, Case{Arch::kGfx950, 64, 1, 0, 256}}) {
    const Batch batch = MakeUniformBatch(c.arch, DType::kFp8, c.heads, 8, c.qlen, 3000, 64);
    PlanOptions options;
    options.num_cu = c.num_cu;
    const WorkPlan plan = PlanOrDie(batch, options);
    EXPECT_EQ(plan.num_cu, c.want) << ArchName(c.arch) << " H" << c.heads << " q" << c.qlen;
    ExpectSound(batch, plan);
    absl::StatusOr<PlanCapacity> cap = ComputePlanCapacity(
        {c.arch, DType::kFp8, DType::kFp8, c.heads, 8, c.qlen, c.num_cu, false, false});
    ASSERT_TRUE(cap.ok());
    // An upper bound over qlen <= c.qlen.
    EXPECT_GE(cap->work_indptr, c.want + 1);
    // ResolvePlan: the same grid and variant, a capacity that holds the plan.
    absl::StatusOr<ResolvedPlan> r = ResolvePlan(batch, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->options.num_cu, c.want);
    EXPECT_EQ(r->variant.name, plan.variant);
    EXPECT_EQ(r->capacity.work_indptr, c.want + 1);
    EXPECT_GE(r->capacity.work_info, static_cast<int64_t>(plan.work_info.size()));
    EXPECT_GE(r->capacity.reduce_partial_map, static_cast<int64_t>(plan.reduce_partial_map.size()));
  }
  PlanOptions bad;
  bad.kv_lanes = 65;
  EXPECT_FALSE(
      ResolvePlan(MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 8, 1, 3000, 64), bad).ok());
}

// Each CU of a lane plan as (lane, the kv ranges of its items in order).
std::vector<std::vector<std::pair<int, int>>> KvRangesPerCu(const WorkPlan& plan) {
  std::vector<std::vector<std::pair<int, int>>> cus(plan.num_cu);
  for (int c = 0; c < plan.num_cu; ++c) {
    for (int w = plan.work_indptr[c]; w < plan.work_indptr[c + 1]; ++w) {
      cus[c].push_back({plan.work_info[w].kv_start, plan.work_info[w].kv_end});
    }
  }
  return cus;
}

TEST(Planner, KvLanesFollowTilesPerRequestAndTheGrid) {
  struct Case {
    int heads, qlen, num_cu, max_lanes, want;
  };
  // (H, qlen) -> tiles per request: (16,1) 1; (64,2) 2; (32,3) 2 (64 + 32 rows); (128,1) 2
  // head groups; (128,2) 4; (48,3) 3 (one token a tile); (128,4) 8.
  for (const Case& c :
       {Case{16, 1, 132, 8, 1}, Case{64, 2, 132, 8, 2}, Case{32, 3, 132, 8, 2},
        Case{128, 1, 132, 8, 2}, Case{128, 2, 132, 8, 4}, Case{48, 3, 132, 8, 3},
        Case{128, 4, 132, 8, 4}, Case{128, 4, 128, 8, 8}, Case{128, 2, 130, 8, 2},
        Case{128, 2, 131, 8, 1}, Case{128, 2, 132, 1, 1}, Case{128, 2, 132, 3, 2}}) {
    const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, c.heads, 9, c.qlen, 700, 64);
    PlanOptions options;
    options.num_cu = c.num_cu;
    options.kv_lanes = c.max_lanes;
    absl::StatusOr<PlanOptions> resolved = ResolveOptions(batch, options);
    ASSERT_TRUE(resolved.ok());
    absl::StatusOr<ResolvedVariant> variant = ResolveVariant(VariantQueryOf(batch, false));
    ASSERT_TRUE(variant.ok());
    const std::vector<QoTile> tiles = BuildTiles(batch, *variant, resolved->kv_granularity);
    EXPECT_EQ(KvLanes(tiles, c.num_cu, c.max_lanes), c.want)
        << "H" << c.heads << " q" << c.qlen << " cu" << c.num_cu << " max " << c.max_lanes;
    // The same from the variant and qlen alone (a launch that did not see the tiles).
    EXPECT_EQ(UniformKvLanes(*variant, c.qlen, c.num_cu, c.max_lanes), c.want)
        << "H" << c.heads << " q" << c.qlen << " cu" << c.num_cu << " max " << c.max_lanes;
  }
  // A qlen past int range's tiles does not overflow: (16, 2^31 - 1) has 2^29 tiles of 4 tokens,
  // whose largest divisor <= 8 that divides 132 is 4.
  {
    const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 4, 700, 64);
    const ResolvedVariant v16 = *ResolveVariant(VariantQueryOf(batch, false));
    EXPECT_EQ(UniformKvLanes(v16, 2147483647, 132, 8), 4);
  }
  // Requests with different tile counts (varlen qlen): no lanes; requests without kv do not
  // count (sparse graph padding).
  const Batch mixed = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {500, 300}, 1, 64);
  Batch qlens = mixed;
  qlens.qo_indptr = {0, 1, 3};  // qlen 1 and 2
  const ResolvedVariant v64 = *ResolveVariant(VariantQueryOf(qlens, false));
  EXPECT_EQ(KvLanes(BuildTiles(qlens, v64, 64), 132, 8), 1);
  Batch sparse = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, {70, 0, 33}, 1, 1);
  sparse.sparse_topk = 2048;
  const ResolvedVariant v128 = *ResolveVariant(VariantQueryOf(sparse, false));
  EXPECT_EQ(KvLanes(BuildTiles(sparse, v128, 16), 132, 8), 2);
}

TEST(Planner, KvLanesWalkTheSameKvOnEveryLaneAtOnce) {
  // (128, 2): 4 tiles a request (2 head groups x 2 tokens), 4 lanes of 33 CUs. Every lane
  // walks the same requests' kv in the same pieces, so CU c of lane 0 and CU c of the other
  // lanes read the same pages one item after another.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128,
                                      {8192, 700, 5000, 64, 3000, 8192, 129, 4000}, 2, 64);
  PlanOptions options;
  options.num_cu = 132;
  options.kv_lanes = 8;
  absl::StatusOr<PlanSizes> sizes;
  const WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  // The same pieces: equal starts, equal ends but for a tile's last piece, which runs to the
  // tile's own causal end (token 1 of a request sees one kv token more than token 0).
  const auto cus = KvRangesPerCu(plan);
  for (int lane = 1; lane < 4; ++lane) {
    for (int c = 0; c < 33; ++c) {
      const auto& mine = cus[lane * 33 + c];
      ASSERT_EQ(mine.size(), cus[c].size()) << "lane " << lane << " cu " << c;
      for (size_t k = 0; k < mine.size(); ++k) {
        EXPECT_EQ(mine[k].first, cus[c][k].first) << "lane " << lane << " cu " << c;
        EXPECT_LE(mine[k].second - cus[c][k].second, 1) << "lane " << lane << " cu " << c;
        EXPECT_GE(mine[k].second, cus[c][k].second) << "lane " << lane << " cu " << c;
      }
    }
  }
  // Lane l's CUs hold exactly the tiles l mod 4 of each request: head group l / 2, token l % 2.
  for (int lane = 0; lane < 4; ++lane) {
    for (int c = lane * 33; c < (lane + 1) * 33; ++c) {
      for (int w = plan.work_indptr[c]; w < plan.work_indptr[c + 1]; ++w) {
        const WorkInfo& item = plan.work_info[w];
        const int b = item.batch_idx / 2, g = item.batch_idx % 2;
        EXPECT_EQ(g, lane / 2) << "cu " << c;
        EXPECT_EQ(item.qo_start - plan.qo_indptr[item.batch_idx], lane % 2) << "cu " << c;
        EXPECT_LT(b, 8);
      }
    }
  }
  // Without lanes, the old walk: a request's 4 tiles on neighbouring CUs.
  options.kv_lanes = 1;
  const WorkPlan flat = PlanOrDie(batch, options);
  ExpectSound(batch, flat);
  // Without lanes a CU runs two tiles of one request over the same pages (a second read);
  // with lanes no CU does.
  auto rereads = [](const WorkPlan& p) {
    int n = 0;
    for (int c = 0; c < p.num_cu; ++c) {
      for (int a = p.work_indptr[c]; a < p.work_indptr[c + 1]; ++a) {
        for (int b = a + 1; b < p.work_indptr[c + 1]; ++b) {
          const WorkInfo &x = p.work_info[a], &y = p.work_info[b];
          n += x.batch_idx / 2 == y.batch_idx / 2 && x.kv_start < y.kv_end && y.kv_start < x.kv_end;
        }
      }
    }
    return n;
  };
  EXPECT_GT(rereads(flat), 0);
  EXPECT_EQ(rereads(plan), 0);
}

TEST(Planner, KvLanePlansAreSoundOnRandomUniformQlenBatches) {
  std::mt19937 rng(17);
  const int shapes[][2] = {{64, 2}, {32, 3}, {128, 1}, {128, 2}, {16, 8}, {48, 3}, {64, 4}};
  for (int trial = 0; trial < 60; ++trial) {
    const auto& shape = shapes[trial % 7];
    const int page = 1 << (rng() % 7);  // 1 .. 64
    std::vector<int> lens(1 + rng() % 40);
    for (int& l : lens) l = shape[1] + static_cast<int>(rng() % 9000);
    const Batch batch = MakeVarlenBatch(Arch::kSm90, trial % 2 ? DType::kFp8 : DType::kBf16,
                                        shape[0], lens, shape[1], page);
    PlanOptions options;
    options.num_cu = 132 - static_cast<int>(rng() % 3) * 4;  // 132, 128, 124
    options.kv_lanes = 8;
    const WorkPlan plan = PlanOrDie(batch, options);
    SCOPED_TRACE("trial " + std::to_string(trial));
    ExpectSound(batch, plan);
    absl::StatusOr<PlanCapacity> cap =
        ComputePlanCapacity(CapacityQueryOf(batch, options.num_cu, false));
    ASSERT_TRUE(cap.ok());
    EXPECT_LE(plan.work_info.size(), static_cast<size_t>(cap->work_info));
    EXPECT_LE(plan.reduce_partial_map.size(), static_cast<size_t>(cap->reduce_partial_map));
    EXPECT_LE(plan.num_reduce_tiles() + 1, cap->reduce_indptr);
  }
}

TEST(Planner, SplitsLongRequestsAcrossCusWithReduceMaps) {
  // One 16k request on 8 CUs: its single tile must be split into about 8 pieces.
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 16384, 1);
  PlanOptions options;
  options.num_cu = 8;
  WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  EXPECT_EQ(plan.num_works(), 8);
  ASSERT_EQ(plan.num_reduce_tiles(), 1);
  EXPECT_EQ(plan.reduce_final_map, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan.reduce_partial_map.size(), 8u);
  EXPECT_EQ(plan.num_partial_rows, 8);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(plan.work_indptr[c + 1] - plan.work_indptr[c], 1) << "cu " << c;
    EXPECT_EQ(plan.work_info[c].partial_qo_loc, c);
  }
}

TEST(Planner, MaxSplitPerBatchBoundsPieces) {
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 16384, 1);
  PlanOptions options;
  options.num_cu = 64;
  options.max_split_per_batch = 5;
  WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  EXPECT_EQ(plan.num_works(), 5);
}

TEST(Planner, MaxSplitOneStillSpreadsTilesOverCus) {
  // No tile may be split, but tiles must still move on to the next CU when one is full
  // (an earlier planner put the whole batch on CU 0).
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 64, 1, 4096, 64);
  PlanOptions options;
  options.max_split_per_batch = 1;
  WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  EXPECT_EQ(plan.num_reduce_tiles(), 0);
  for (int c = 0; c < plan.num_cu; ++c) {
    EXPECT_LE(plan.work_indptr[c + 1] - plan.work_indptr[c], 1) << "cu " << c;
  }
  // A split limit of 2 on one long request over 8 CUs: 2 pieces on 2 CUs, not 1 overflow.
  Batch one = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 3, 1, 16384, 1);
  options.num_cu = 8;
  options.max_split_per_batch = 2;
  plan = PlanOrDie(one, options);
  ExpectSound(one, plan);
  for (int t = 0; t < plan.num_reduce_tiles(); ++t) {
    EXPECT_LE(plan.reduce_indptr[t + 1] - plan.reduce_indptr[t], 2);
  }
}

TEST(Planner, SmallPayloadStillSplitsOnPageBoundaries) {
  // Page 64 with 16-token blocks: ceil(total / 132) is below one page of blocks, so the
  // payload must grow to one page or no split can happen and the tile walks to CU 131.
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 4096, 64);
  PlanOptions options;
  options.kv_granularity = 16;
  WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  EXPECT_GT(plan.num_works(), 30);
  EXPECT_EQ(plan.work_indptr[131], plan.work_indptr[132]) << "the last CU should be idle";
}

TEST(Planner, CausalTrimAndKvOffset) {
  // gfx950 fp8 (32, 3): tiles of 2 and 1 tokens; kv trimmed to L - q + t1.
  Batch batch = MakeUniformBatch(Arch::kGfx950, DType::kFp8, 32, 1, 3, 100, 16);
  PlanOptions options;
  options.num_cu = 1;
  WorkPlan plan = PlanOrDie(batch, options);
  ExpectSound(batch, plan);
  ASSERT_EQ(plan.num_works(), 2);
  EXPECT_EQ(plan.tokens_per_tile, 2);
  const WorkInfo& a = plan.work_info[0];
  EXPECT_EQ(a.qo_start, 0);
  EXPECT_EQ(a.qo_end, 2);
  // Tokens 0, 1 see < 98 and < 99: pages [0, ceil(99 / 16) = 7), kv_offset 100 - 99... the
  // page end is token 112 clipped to L = 100, so the offset is 0.
  EXPECT_EQ(a.kv_end, 7);
  EXPECT_EQ(a.kv_offset, 0);
  const WorkInfo& b = plan.work_info[1];
  EXPECT_EQ(b.qo_start, 2);
  EXPECT_EQ(b.qo_end, 3);
  EXPECT_EQ(b.kv_end, 7);
  // With page size 1 the trim is exact and kv_offset counts the hidden tail.
  Batch p1 = MakeUniformBatch(Arch::kGfx950, DType::kFp8, 32, 1, 3, 100, 1);
  WorkPlan plan1 = PlanOrDie(p1, options);
  ExpectSound(p1, plan1);
  EXPECT_EQ(plan1.work_info[0].kv_end, 99);
  EXPECT_EQ(plan1.work_info[0].kv_offset, 1);
  EXPECT_EQ(plan1.work_info[1].kv_end, 100);
  EXPECT_EQ(plan1.work_info[1].kv_offset, 0);
}

TEST(Planner, HeadFoldingMakesVirtualRequests) {
  // sm90 H = 128 runs as 2 groups of 64 heads: virtual request v = 2b + g.
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 128, 3, 2, 500, 64);
  WorkPlan plan = PlanOrDie(batch);
  ExpectSound(batch, plan);
  EXPECT_EQ(plan.head_fold, 2);
  EXPECT_EQ(plan.qo_indptr, (std::vector<int32_t>{0, 2, 4, 6, 8, 10, 12}));
  for (const WorkInfo& w : plan.work_info) {
    const int b = w.batch_idx / 2;
    EXPECT_GE(w.kv_start, batch.kv_indptr[b]);
    EXPECT_LE(w.kv_end, batch.kv_indptr[b + 1]);
  }
}

TEST(Planner, TailOfASplitTileHoldsAtLeastItsTokens) {
  // qlen 4, H 16 on sm90: 4-token tiles. Every last piece must leave each token a kv token.
  for (int kv_len : {37, 64, 100, 129}) {
    Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 4, kv_len, 1);
    for (int num_cu : {2, 3, 5, 7}) {
      PlanOptions options;
      options.num_cu = num_cu;
      options.kv_granularity = 1;
      options.fixed_overhead = 0;
      WorkPlan plan = PlanOrDie(batch, options);
      ExpectSound(batch, plan);
    }
  }
}

TEST(Planner, RefusesTooSmallBuffersWithoutWriting) {
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 4, 1, 4096, 16);
  PlanOptions options;
  options.num_cu = 16;
  std::vector<int32_t> qo(5, 7), wi(17, 7), ri(17, 7), rf(32, 7), rp(32, 7);
  std::vector<WorkInfo> works(3, WorkInfo{7, 7, 7, 7, 7, 7, 7, 7});
  absl::StatusOr<PlanSizes> s =
      PlanDecodeInto(batch, options,
                     {absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(works),
                      absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)});
  ASSERT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("work_info holds 3"), std::string::npos)
      << s.status();
  for (auto* v : {&qo, &wi, &ri, &rf, &rp}) {
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](int32_t x) { return x == 7; }));
  }
  for (const WorkInfo& w : works) EXPECT_EQ(w.batch_idx, 7);
}

// A 64-row variant costing 1000 ns a 64-token block and 3500 an item (item charge 4 blocks),
// with a reduce of 4000 ns + 0.5 a row: on 132 CUs, the split charge is ceil((3500 + 12448) /
// 1000) = 16 blocks.
ResolvedVariant CostedVariant() {
  ResolvedVariant v;
  v.heads_per_group = 64;
  v.tokens_per_tile = 1;
  v.cost.set_kv_granularity(64);
  v.cost.set_ns_per_block(1000);
  v.cost.set_ns_per_item(3500);
  v.reduce.set_ns_per_launch(4000);
  v.reduce.set_ns_per_partial_row(0.5);
  return v;
}

TEST(Planner, DefaultFixedOverheadIsTheCalibratedItemCostInBlocks) {
  // 64-row tiles cost 1000 ns a 64-token block and 3500 ns an item: 3.5 -> 4 blocks of 64
  // tokens, 14 of 16 tokens; 16-row tiles have a one-block entry (200 / 50: at least 1) and a
  // two-blocks one (100 / 1000: 10), which a grid of more than one block an SM takes. The
  // reduce's cost is not charged here (BatchFixedOverhead weighs it).
  ResolvedVariant v = CostedVariant();
  proto::TileCost* t16 = v.cost.add_tile();
  t16->set_rows(16);
  t16->set_ns_per_block(200);
  t16->set_ns_per_item(50);
  proto::TileCost* t16x2 = v.cost.add_tile();
  t16x2->set_rows(16);
  t16x2->set_ns_per_block(100);
  t16x2->set_ns_per_item(1000);
  t16x2->set_blocks_per_cu(2);
  const int sms = DefaultNumCu(Arch::kSm90);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, 0), 4);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 1, 16, 0), 14);
  v.heads_per_group = 16;
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, 0), 1);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, sms), 1);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, 2 * sms), 10);
  v.blocks_per_cu = 2;  // the default grid is then two blocks a CU
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, 0), 10);
  // Not calibrated: AITER's max(1, ceil(16 / page_size)).
  v.cost = proto::CostModel();
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 64, 64, 0), 1);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 4, 16, 0), 4);
  EXPECT_EQ(DefaultFixedOverhead(v, Arch::kSm90, 1, 16, 0), 16);
}

TEST(Planner, SplitReduceNsIsTheReduceOfASplitAtEveryCuBoundary) {
  proto::ReduceCost reduce;
  reduce.set_ns_per_launch(4000);
  reduce.set_ns_per_partial_row(0.5);
  // 4000 + 132 splits x 2 x 64 rows x 0.5 ns.
  EXPECT_DOUBLE_EQ(SplitReduceNs(reduce, 64, 132), 4000 + 8448.0);
  EXPECT_DOUBLE_EQ(SplitReduceNs(reduce, 16, 66), 4000 + 1056.0);
  EXPECT_DOUBLE_EQ(SplitReduceNs(proto::ReduceCost(), 64, 132), 0);
}

PlanOptions ItemCharged(int num_cu) {
  PlanOptions o;
  o.num_cu = num_cu;
  o.kv_granularity = 64;
  o.fixed_overhead = 4;
  o.kv_lanes = 1;
  return o;
}

// The split tiles of `batch`'s plan on 132 CUs with `charge` blocks an item.
int64_t SplitTilesCharged(const Batch& batch, int charge) {
  PlanOptions o = ItemCharged(132);
  o.fixed_overhead = charge;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->num_reduce_tiles() : -1;
}

TEST(Planner, BatchFixedOverheadTakesTheSplitChargeWhereWholeTilesBalance) {
  const ResolvedVariant v = CostedVariant();
  // 256 tiles of 128 blocks on 132 CUs: charged 4, the walk splits a tile at almost every CU
  // boundary (busiest CU ~ 256 x 132 / 132 + 4 + 4 blocks, and a reduce of ~130 split tiles);
  // charged 16, two whole tiles a CU on 128 CUs (2 x 132 blocks, no reduce): 16 is faster.
  const Batch uniform = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 256, 1, 8192, 64);
  EXPECT_EQ(BatchFixedOverhead(uniform, v, ItemCharged(132)), 16);
  EXPECT_EQ(SplitTilesCharged(uniform, 16), 0);
  EXPECT_GT(SplitTilesCharged(uniform, 4), 100);

  // Short items (64 tiles of 16 blocks: pieces of 10 and 6 blocks, a reduce of 8.1 us against
  // a busiest CU of 13.5). fp8 runs them on the f16 P V kernel: whole tiles (19.5 us, no
  // reduce) against 21.6, at the least charge that splits none: with 15 the mean load is
  // ceil((1024 + 64 x 15) / 132) = 16 blocks, a whole tile's.
  const Batch few = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 64, 1, 1024, 64);
  EXPECT_EQ(BatchFixedOverhead(few, v, ItemCharged(132)), 15);
  EXPECT_EQ(SplitTilesCharged(few, 15), 0);
  EXPECT_GT(SplitTilesCharged(few, 14), 0);  // one less: the walk splits
  // bf16 short requests run on the hi + lo kernel, whose reduce the registry overstates: the
  // item charge, even where whole tiles are predicted faster.
  const Batch few_bf16 = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 64, 1, 1024, 64);
  EXPECT_EQ(BatchFixedOverhead(few_bf16, v, ItemCharged(132)), 4);
  // fp8 where whole tiles are predicted slower (3 us a block: 51.5 against 33.5 + 8.1): the item
  // charge.
  ResolvedVariant slow_blocks = v;
  slow_blocks.cost.set_ns_per_block(3000);
  EXPECT_EQ(BatchFixedOverhead(few, slow_blocks, ItemCharged(132)), 4);
  // A long request among short ones: split anyway; the item charge stays.
  std::vector<int> lens(96, 700);
  for (int i = 0; i < 8; ++i) lens[i * 12] = 32768;
  const Batch mixed = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, lens, 1, 64);
  EXPECT_EQ(BatchFixedOverhead(mixed, v, ItemCharged(132)), 4);

  // Pages of fewer than 64 tokens (gathered blocks): the item charge.
  PlanOptions page1 = ItemCharged(132);
  page1.kv_granularity = 16;
  const Batch uniform_page1 = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 256, 1, 8192, 1);
  EXPECT_EQ(BatchFixedOverhead(uniform_page1, v, page1), 4);

  // No calibrated reduce: the split charge is the item charge.
  ResolvedVariant free_reduce = v;
  free_reduce.reduce = proto::ReduceCost();
  EXPECT_EQ(BatchFixedOverhead(uniform, free_reduce, ItemCharged(132)), 4);
  // No calibrated cost at all: the options' charge.
  ResolvedVariant uncalibrated;
  PlanOptions aiter = ItemCharged(132);
  aiter.fixed_overhead = 1;
  EXPECT_EQ(BatchFixedOverhead(uniform, uncalibrated, aiter), 1);
}

// Short fp8 requests of mixed lengths (64-row tiles of 1-70 blocks): a charge other than the item
// and split charges is the whole-tile one, whose plan splits no tile. The least charge with
// which an empty CU holds the largest tile still splits some of these batches on partly filled
// CUs (seed 7: trials 51, 61, 135 and 160, which BatchFixedOverhead's last check keeps on the
// item charge).
TEST(Planner, BatchFixedOverheadOfShortItemsSplitsNoTileOrKeepsTheItemCharge) {
  const ResolvedVariant v = CostedVariant();
  std::mt19937 rng(7);
  int whole = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int b = 8 + static_cast<int>(rng() % 120);
    std::vector<int> lens(b);
    const int spread = 256 + static_cast<int>(rng() % 4096);
    for (int& len : lens) len = 64 + static_cast<int>(rng() % spread);
    const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, lens, 1, 64);
    const int charge = BatchFixedOverhead(batch, v, ItemCharged(132));
    if (charge == 4 || charge == 16) continue;
    ++whole;
    EXPECT_EQ(SplitTilesCharged(batch, charge), 0) << "trial " << trial << ": charge " << charge;
  }
  EXPECT_GT(whole, 0);
}

TEST(Planner, ResolveOptionsTakesTheVariantsDefaultFixedOverhead) {
  for (Arch arch : {Arch::kSm90, Arch::kGfx950}) {
    for (int page : {1, 64}) {
      for (int heads : {16, 64, 128}) {
        const Batch batch = MakeUniformBatch(arch, DType::kFp8, heads, 4, 2, 3000, page);
        for (int num_cu : {0, 40}) {
          PlanOptions options;
          options.num_cu = num_cu;
          absl::StatusOr<PlanOptions> o = ResolveOptions(batch, options);
          ASSERT_TRUE(o.ok()) << o.status();
          absl::StatusOr<ResolvedVariant> v = ResolveVariant(VariantQueryOf(batch, false));
          ASSERT_TRUE(v.ok()) << v.status();
          // The batch's choice, starting from the item charge, on the grid planned.
          PlanOptions planned = *o;
          planned.fixed_overhead = DefaultFixedOverhead(*v, arch, page, o->kv_granularity, num_cu);
          if (num_cu == 0) planned.num_cu *= v->blocks_per_cu;
          const int want = BatchFixedOverhead(batch, *v, planned);
          EXPECT_EQ(o->fixed_overhead, want)
              << ArchName(arch) << " page " << page << " H" << heads << " num_cu " << num_cu;
          // The AMD registries carry no costs: AITER's default.
          if (arch != Arch::kSm90) EXPECT_EQ(want, std::max(1, (16 + page - 1) / page));
          // An explicit value wins.
          options.fixed_overhead = 7;
          EXPECT_EQ(ResolveOptions(batch, options)->fixed_overhead, 7);
        }
      }
    }
  }
}

TEST(Planner, OptionErrorsNameTheOption) {
  Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 4, 1, 4096, 16);
  PlanOptions o;
  o.kv_granularity = 24;
  EXPECT_NE(std::string(PlanDecode(batch, o).status().message()).find("kv_granularity = 24"),
            std::string::npos);
  o = {};
  o.num_cu = -3;
  EXPECT_NE(std::string(PlanDecode(batch, o).status().message()).find("num_cu = -3"),
            std::string::npos);
  o = {};
  o.max_split_per_batch = -1;
  EXPECT_EQ(PlanDecode(batch, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePolicy("fastest").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Planner, UnsupportedShapeIsNotFound) {
  Batch batch = MakeUniformBatch(Arch::kGfx950, DType::kFp8, 48, 4, 1, 4096, 16);
  EXPECT_EQ(PlanDecode(batch, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST(Planner, CpShardsPlanWithoutLocalTrimAndSkipEmptyRequests) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {0, 3, 700}, 4, 1);
  batch.cp_round_robin = true;
  WorkPlan plan = PlanOrDie(batch);
  ExpectSound(batch, plan);
  for (const WorkInfo& w : plan.work_info) {
    EXPECT_NE(w.batch_idx, 0) << "request 0 has no local kv";
    EXPECT_EQ(w.kv_end - w.kv_start + w.kv_offset > 0, true);
  }
}

TEST(Planner, SparsePerTokenBatch) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {2048, 0, 17, 2048}, 1, 1);
  batch.sparse_topk = 2048;
  batch.causal = false;
  WorkPlan plan = PlanOrDie(batch);
  ExpectSound(batch, plan);
}

// Thousands of random batches over every registry-supported shape: each plan is sound and
// fits the capacity computed from the batch's maxima.
TEST(Planner, RandomBatchesAreSoundAndWithinCapacity) {
  std::mt19937 rng(20261129);
  const Arch archs[] = {Arch::kGfx942, Arch::kGfx950, Arch::kSm90};
  const DType dtypes[] = {DType::kBf16, DType::kFp8};
  const int heads[] = {16, 32, 48, 64, 128};
  const int pages[] = {1, 16, 64};
  int planned = 0, unsupported = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const Arch arch = archs[rng() % 3];
    const DType dtype = dtypes[rng() % 2];
    const int h = heads[rng() % 5];
    const int page = pages[rng() % 3];
    const int qlen = 1 + rng() % 8;
    const int b = 1 + rng() % 40;
    const bool cp = rng() % 5 == 0;
    std::vector<int> kv(b);
    for (int& k : kv) k = (cp ? 0 : qlen) + rng() % (rng() % 4 == 0 ? 20000 : 600);
    Batch batch = MakeVarlenBatch(arch, dtype, h, kv, qlen, page);
    batch.cp_round_robin = cp;
    PlanOptions options;
    options.num_cu = rng() % 3 == 0 ? 0 : 1 + rng() % 300;
    options.kv_granularity = 1 << (rng() % 8);
    options.max_split_per_batch = rng() % 4 == 0 ? 1 + rng() % 8 : 0;
    options.policy = rng() % 2 == 0 ? PlanPolicy::kGreedyPayload : PlanPolicy::kLongestFirst;
    absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
    if (plan.status().code() == absl::StatusCode::kNotFound) {
      ++unsupported;
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    ++planned;
    std::vector<sim::Violation> v = sim::CheckPlan(batch, *plan);
    ASSERT_TRUE(v.empty()) << "iter " << iter << "\n" << sim::FormatViolations(v);
    CapacityQuery q{arch, dtype, dtype, h, b, qlen, options.num_cu, cp, false};
    absl::StatusOr<PlanCapacity> cap = ComputePlanCapacity(q);
    ASSERT_TRUE(cap.ok()) << cap.status();
    EXPECT_LE(plan->work_info.size(), cap->work_info) << "iter " << iter;
    EXPECT_LE(plan->work_indptr.size(), cap->work_indptr) << "iter " << iter;
    EXPECT_LE(plan->qo_indptr.size(), cap->qo_indptr);
    EXPECT_LE(plan->reduce_indptr.size(), cap->reduce_indptr);
    EXPECT_LE(plan->reduce_partial_map.size(), cap->reduce_partial_map);
    EXPECT_LE(plan->num_partial_rows, cap->partial_rows);
    if (options.max_split_per_batch > 0) {
      for (int t = 0; t < plan->num_reduce_tiles(); ++t) {
        EXPECT_LE(plan->reduce_indptr[t + 1] - plan->reduce_indptr[t], options.max_split_per_batch);
      }
    }
  }
  EXPECT_GT(planned, 2000);
  std::printf("planned %d random batches, %d unsupported shapes\n", planned, unsupported);
}

}  // namespace
}  // namespace mlaps

namespace mlaps {
namespace {

// Capacity visits only the qlens where the registry's Serves ranges change; it must equal a
// brute-force maximum over every qlen, and stay cheap for huge max_qlen.
TEST(Capacity, MatchesBruteForceAndScales) {
  for (Arch arch : {Arch::kGfx942, Arch::kGfx950, Arch::kSm90}) {
    for (int heads : {16, 32, 64, 128}) {
      for (int max_qlen = 1; max_qlen <= 24; ++max_qlen) {
        int64_t tiles = 0, fold = 0;
        for (int q = 1; q <= max_qlen; ++q) {
          absl::StatusOr<ResolvedVariant> v =
              ResolveVariant({arch, DType::kFp8, DType::kFp8, heads, q, false, false});
          if (!v.ok()) continue;
          fold = std::max<int64_t>(fold, v->head_fold);
          tiles = std::max<int64_t>(
              tiles, int64_t{v->head_fold} * ((q + v->tokens_per_tile - 1) / v->tokens_per_tile));
        }
        absl::StatusOr<PlanCapacity> cap =
            ComputePlanCapacity({arch, DType::kFp8, DType::kFp8, heads, 10, max_qlen, 100});
        ASSERT_EQ(cap.ok(), fold > 0) << heads << " " << max_qlen;
        if (!cap.ok()) continue;
        EXPECT_EQ(cap->work_info, 10 * tiles + 100)
            << ArchName(arch) << " H=" << heads << " max_qlen=" << max_qlen;
        EXPECT_EQ(cap->qo_indptr, 10 * fold + 1);
      }
    }
  }
  absl::StatusOr<PlanCapacity> big =
      ComputePlanCapacity({Arch::kSm90, DType::kBf16, DType::kBf16, 16, 1, 50'000'000, 132});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->work_info, 12'500'000 + 132);  // 4 tokens per tile
}

}  // namespace
}  // namespace mlaps
