// CP round-robin in the simulator: every rank of the seed's round-robin matrix plans soundly
// (structural), and on a subset every rank runs through the executor and the merged output
// equals the unsharded fp64 reference (numeric).
#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"

namespace mlaps::sim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CpMerge, RuleAndEdgeCases) {
  // Two ranks with equal LSE average; a dead rank (-inf, +inf or NaN) is ignored even when
  // its O is garbage; all dead gives O = 0, LSE = -inf.
  const std::vector<float> o0 = {1, 2, 3, 4}, o1 = {3, 2, 1, 0}, junk = {NAN, kInf, 7, 7};
  const std::vector<float> l_eq = {0.5f, 0.5f}, l_dead = {0.5f, -kInf};
  std::vector<float> o(4), lse(2);
  std::vector<absl::Span<const float>> os = {o0, o1};
  std::vector<float> a = {0.5f, -kInf}, b = {0.5f, NAN};
  std::vector<absl::Span<const float>> ls = {a, b};
  ASSERT_TRUE(MergeCpRanks(os, ls, 2, 2, absl::MakeSpan(o), absl::MakeSpan(lse)).ok());
  EXPECT_FLOAT_EQ(lse[0], 0.5f + std::log(2.0f));
  EXPECT_FLOAT_EQ(o[0], 2.0f);
  EXPECT_FLOAT_EQ(o[1], 2.0f);
  EXPECT_EQ(lse[1], -kInf);  // -inf and NaN: nothing live
  EXPECT_EQ(o[2], 0.0f);
  EXPECT_EQ(o[3], 0.0f);
  std::vector<float> c = {1.0f}, d = {kInf};
  std::vector<absl::Span<const float>> os2 = {absl::MakeSpan(o0).subspan(0, 2),
                                              absl::MakeSpan(junk).subspan(0, 2)};
  std::vector<absl::Span<const float>> ls2 = {c, d};
  std::vector<float> o2(2), lse2(1);
  ASSERT_TRUE(MergeCpRanks(os2, ls2, 1, 2, absl::MakeSpan(o2), absl::MakeSpan(lse2)).ok());
  EXPECT_FLOAT_EQ(lse2[0], 1.0f);
  EXPECT_FLOAT_EQ(o2[0], 1.0f);
  EXPECT_FLOAT_EQ(o2[1], 2.0f);
  EXPECT_FALSE(MergeCpRanks({}, {}, 1, 2, absl::MakeSpan(o2), absl::MakeSpan(lse2)).ok());
  EXPECT_FALSE(MergeCpRanks(os2, ls2, 2, 2, absl::MakeSpan(o2), absl::MakeSpan(lse2)).ok());
}

struct Pair {
  int heads, qlen;
};
// The round-robin seed's shapes and sizes.
constexpr Pair kPairs[] = {{16, 4}, {32, 3}, {64, 1}, {64, 2}, {128, 2}, {16, 8}, {64, 17}};
constexpr int kCtx[] = {13, 23, 64, 256, 512, 1200, 3200, 5200, 8192};
constexpr int kBatch[] = {1, 10, 32, 64, 128};
constexpr int kWorld[] = {2, 3, 4, 7, 8};

class CpStructure : public ::testing::TestWithParam<std::tuple<Arch, DType, int>> {};

// Every rank of every case plans (with the registry's CP variants) and passes the checker;
// the shards partition every request's kv.
TEST_P(CpStructure, EveryRankPlanIsSound) {
  const auto [arch, dtype, pair_index] = GetParam();
  const Pair p = kPairs[pair_index];
  int rank_plans = 0, skipped_short = 0;
  for (int ctx : kCtx) {
    if (ctx < p.qlen) {  // causal decode needs kv_len >= qlen
      ++skipped_short;
      continue;
    }
    for (int batch : kBatch) {
      const Batch global = MakeUniformBatch(arch, dtype, p.heads, batch, p.qlen, ctx, 64);
      for (int w : kWorld) {
        int64_t tokens = 0;
        for (int rank = 0; rank < w; ++rank) {
          absl::StatusOr<CpShardView> view = MakeCpShardView(global, {}, {w, 1}, rank);
          ASSERT_TRUE(view.ok()) << view.status();
          tokens += view->batch.kv_len(0);
          PlanOptions options;
          options.lse = true;
          absl::StatusOr<WorkPlan> plan = PlanDecode(view->batch, options);
          ASSERT_TRUE(plan.ok()) << plan.status();
          ASSERT_NE(plan->variant.find("cprr"), std::string::npos) << plan->variant;
          const std::vector<Violation> v = CheckPlan(view->batch, *plan);
          ASSERT_TRUE(v.empty()) << "ctx " << ctx << " b " << batch << " w " << w << " r " << rank
                                 << "\n"
                                 << FormatViolations(v);
          ++rank_plans;
        }
        ASSERT_EQ(tokens, ctx);
      }
    }
  }
  std::printf("%s %s (%d,%d): %d rank plans sound, %d ctx < qlen skipped\n",
              std::string(ArchName(arch)).c_str(), std::string(DTypeName(dtype)).c_str(), p.heads,
              p.qlen, rank_plans, skipped_short);
}

INSTANTIATE_TEST_SUITE_P(SeedMatrix, CpStructure,
                         ::testing::Combine(::testing::Values(Arch::kGfx950, Arch::kSm90),
                                            ::testing::Values(DType::kFp8, DType::kBf16),
                                            ::testing::Range(0, 7)));

TEST(CpCoverage, Fp8RoundRobinShapesFollowTheRegistry) {
  for (auto [h, q, supported] : std::vector<std::tuple<int, int, bool>>{{16, 1, false},
                                                                        {16, 2, false},
                                                                        {32, 1, false},
                                                                        {16, 3, true},
                                                                        {32, 2, true},
                                                                        {64, 1, true},
                                                                        {128, 1, true}}) {
    Batch b = MakeUniformBatch(Arch::kGfx950, DType::kFp8, h, 2, q, 300, 1);
    b.cp_round_robin = true;
    EXPECT_EQ(PlanDecode(b, {}).ok(), supported) << h << "," << q;
  }
}

// The numeric subset: all ranks through the executor, merged, against the unsharded
// reference, for both archs and dtypes, interleave 1 and 16 (page 64), with empty shards.
struct NumericCase {
  Arch arch;
  DType dtype;
  Pair pair;
  std::vector<int> kv_lens;
  int world, interleave, page_size;
};

void RunNumeric(const NumericCase& c, uint64_t seed) {
  Batch global =
      MakeVarlenBatch(c.arch, c.dtype, c.pair.heads, c.kv_lens, c.pair.qlen, c.page_size);
  const DecodeCase in = MakeDecodeCase(global, seed, 0.7, 1.3);
  const CpSharding s{c.world, c.interleave};
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  std::vector<std::vector<float>> o(c.world), lse(c.world);
  for (int rank = 0; rank < c.world; ++rank) {
    absl::StatusOr<CpShardView> view = MakeCpShardView(global, in.kv_indices, s, rank);
    ASSERT_TRUE(view.ok()) << view.status();
    CpGlobalPositions cp;
    cp.global_position = [&](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
    cp.global_kv_len = view->global_kv_len;
    DecodeInputs inputs = in.Inputs();
    inputs.kv_indices = view->kv_indices;
    inputs.cp = &cp;
    PlanOptions options;
    options.num_cu = 5;  // few CUs: splits and the reduce run on every rank
    absl::StatusOr<WorkPlan> plan = PlanDecode(view->batch, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(CheckPlan(view->batch, *plan).empty());
    ExecutorOptions exec;
    exec.final_o_bf16 = false;  // rank O stays fp32 until the merge
    absl::StatusOr<ExecutorOutput> out = ExecutePlan(view->batch, *plan, inputs, exec);
    ASSERT_TRUE(out.ok()) << out.status();
    o[rank] = out->o;
    lse[rank] = out->lse;
    if (view->batch.kv_len(0) == 0) {  // an empty shard: O = 0, LSE = -inf
      const int64_t first_rows = global.qlen(0) * global.num_heads;
      for (int64_t i = 0; i < first_rows; ++i) ASSERT_EQ(out->lse[i], -kInf);
      for (int64_t i = 0; i < first_rows * kHeadDimV; ++i) ASSERT_EQ(out->o[i], 0.0f);
    }
  }
  std::vector<absl::Span<const float>> os(o.begin(), o.end()), ls(lse.begin(), lse.end());
  std::vector<float> merged_o(rows * kHeadDimV), merged_lse(rows);
  ASSERT_TRUE(
      MergeCpRanks(os, ls, rows, kHeadDimV, absl::MakeSpan(merged_o), absl::MakeSpan(merged_lse))
          .ok());
  for (float& x : merged_o) x = RoundToBf16(x);  // the decode output's one rounding
  absl::StatusOr<ReferenceOutput> ref = ReferenceDecode(global, in.Inputs());
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Comparison> cmp =
      CompareOutputs(merged_o, merged_lse, ref->o, ref->lse, GatesFor(c.dtype));
  ASSERT_TRUE(cmp.ok());
  EXPECT_TRUE(cmp->passed) << ArchName(c.arch) << " " << DTypeName(c.dtype) << " (" << c.pair.heads
                           << "," << c.pair.qlen << ") W=" << c.world << " I=" << c.interleave
                           << ": " << cmp->Summary();
  std::printf("[cp] %s %s (%d,%d) W=%d I=%d: %s\n", std::string(ArchName(c.arch)).c_str(),
              std::string(DTypeName(c.dtype)).c_str(), c.pair.heads, c.pair.qlen, c.world,
              c.interleave, cmp->Summary().c_str());
}

TEST(CpNumeric, MergedRanksEqualTheUnshardedReference) {
  std::mt19937 rng(4521);
  int cases = 0;
  for (Arch arch : {Arch::kGfx950, Arch::kSm90}) {
    for (DType dtype : {DType::kFp8, DType::kBf16}) {
      for (const Pair& p : kPairs) {
        const int world = kWorld[rng() % 5];
        const bool interleaved = rng() % 3 == 0;
        // The first request is short enough that some ranks hold none of it.
        std::vector<int> lens = {std::max(p.qlen, world - 1), 13 + static_cast<int>(rng() % 300)};
        RunNumeric({arch, dtype, p, lens, world, interleaved ? 16 : 1, interleaved ? 64 : 16},
                   rng());
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 28);
}

TEST(CpShardView, SubPagesViewTheGlobalCache) {
  // Page 64, I = 16, W = 3: global position p lives in sub-page (page * 4 + (p % 64) / 16).
  Batch g = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 200, 64);
  const std::vector<int32_t> pages = {7, 2, 9, 4};
  absl::StatusOr<CpShardView> v = MakeCpShardView(g, pages, {3, 16}, 1);
  ASSERT_TRUE(v.ok()) << v.status();
  // Rank 1 holds runs starting at 16, 64, 112, 160: pages 7, 2, 2, 9.
  EXPECT_EQ(v->kv_indices, (std::vector<int32_t>{7 * 4 + 1, 2 * 4 + 0, 2 * 4 + 3, 9 * 4 + 2}));
  EXPECT_EQ(v->batch.kv_len(0), 64);
  EXPECT_EQ(v->batch.page_size, 16);
  EXPECT_FALSE(MakeCpShardView(g, pages, {3, 128}, 0).ok());  // I does not divide the page
  EXPECT_FALSE(MakeCpShardView(g, pages, {0, 1}, 0).ok());
  EXPECT_FALSE(MakeCpShardView(g, pages, {3, 3}, 0).ok());
  EXPECT_FALSE(MakeCpShardView(g, {1, 2}, {3, 16}, 0).ok());
  CpShardOptions strict;
  strict.require_nonempty_shards = true;
  Batch short_req = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {5, 100}, 1, 1);
  absl::StatusOr<CpShardView> e = MakeCpShardView(short_req, {}, {8, 1}, 0, strict);
  EXPECT_NE(std::string(e.status().message()).find("request 0 has kv_len = 5"), std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace mlaps::sim
