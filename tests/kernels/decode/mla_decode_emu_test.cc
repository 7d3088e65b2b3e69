// The MLA decode and reduce kernels (kernels/decode/mla_decode_device.h) run on the CPU through
// tests/kernels/emu (fibers for threads, emulated ldmatrix / mma.sync / cp.async), against
// the simulator's executor (sim::ExecutePlan) and the fp64 reference under docs/design.md's gates,
// with the kernel's trace compared byte for byte with the plan's. Built twice: the
// tensor-core path (mla_decode_emu_test) and the generic AMD path
// (mla_decode_generic_emu_test, -DMLAPS_MLA_MMA=0). Small shapes: the emulation runs about a
// million times slower than the GPU.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "metadata/registry.h"
#include "metadata/work_plan.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"
#include "sim/trace.h"
#include "tests/kernels/decode/decode_checks.h"
#include "tests/kernels/decode/mla_decode_testing.h"

// Last, in this order: the emulation defines the device dialect (its macros must not reach
// the library headers above), then the device code compiles on top of it.
// clang-format off
#include "tests/kernels/emu/hip_host_emulation.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_reduce_device.h"
#include "tests/kernels/decode/emu_reduce.h"
// clang-format on

namespace mlaps {
namespace {

using testing::BatchArena;
using testing::PlanArena;

using testing::DecodeRunResult;
using testing::ExpectRunMatchesPlan;
using testing::RunCheck;

WorkPlan Plan(const Batch& batch, int num_cu, int fixed_overhead = 1) {
  return testing::PlanForTest(batch, num_cu, fixed_overhead);
}

// Runs decode (+ reduce) for `c` under `plan` in the emulation; `mutate` may break the
// plan's device copy (status tests). o_fp32: final O written as fp32 (MlaDecodeParams::o_fp32).
DecodeRunResult RunEmulated(const sim::DecodeCase& c, const WorkPlan& plan, int warps,
                            testing::HostDecodeRun::Mutate mutate = nullptr,
                            const testing::CpRank* cp = nullptr, bool o_fp32 = false) {
  const bool fp8 = c.batch.q_dtype == DType::kFp8;
  testing::HostDecodeRun run(c, plan, cp, o_fp32, mutate);
  MlaDecodeParams& p = run.decode;
  if (warps == 16) p.block_threads = 512;
    // The launcher's choice: the compact layout (two blocks an SM) for tiles of <= 16 rows.
#if MLAPS_MLA_MMA
  const bool compact = mla::CompactLayoutFits(p);
  const size_t smem =
      compact ? (fp8 ? mla::MmaLayout<true, 1>::kBytes : mla::MmaLayout<false, 1>::kBytes)
              : (fp8 ? mla::MmaLayout<true>::kBytes : mla::MmaLayout<false>::kBytes);
#else
  const bool compact = false;
  const size_t smem = 0;
#endif
  const std::string error = mlaps_emu::Launch(dim3(plan.num_cu), dim3(warps * 32), smem, [&] {
    if (warps == 16) {
      fp8 ? mla::MlaDecodeKernel<true, 16, 4>(p) : mla::MlaDecodeKernel<false, 16, 4>(p);
    } else if (compact) {
      fp8 ? mla::MlaDecodeKernel<true, 8, 1>(p) : mla::MlaDecodeKernel<false, 8, 1>(p);
    } else {
      fp8 ? mla::MlaDecodeKernel<true, 8, 4>(p) : mla::MlaDecodeKernel<false, 8, 4>(p);
    }
  });
  return testing::ReduceAndCollect(run, error);
}

// Emulated kernels vs the executor (same plan, kv_block 32) and vs the fp64 reference, each
// under the dtype's gates; the trace vs the plan's, as text. Both block shapes (8 and 16
// warps) of the decode kernel.
void CheckCase(const sim::DecodeCase& c, const WorkPlan& plan, const std::string& name, int warps);
void CheckCase(const sim::DecodeCase& c, const WorkPlan& plan, const std::string& name) {
  CheckCase(c, plan, name + " (8 warps)", 8);
#if MLAPS_MLA_MMA  // the generic path does not depend on the block shape
  CheckCase(c, plan, name + " (16 warps)", 16);
#endif
}

void CheckCase(const sim::DecodeCase& c, const WorkPlan& plan, const std::string& name, int warps) {
  SCOPED_TRACE(name);
  const DecodeRunResult got = RunEmulated(c, plan, warps);
  sim::ExecutorOptions options;
  options.kv_block = mla::kBlockN;
  const RunCheck check =
      ExpectRunMatchesPlan(c.batch, plan, c.Inputs(), options, sim::GatesFor(c.batch.q_dtype), got);
  std::printf("%s: %d items on %d CUs, %d split tiles; vs executor %s\n", name.c_str(),
              plan.num_works(), plan.num_cu, plan.num_reduce_tiles(), check.vs_executor.c_str());
}

// MLAPS_MLA_PATH's names (the GPU tests and the benchmark, staging::ParseDecodePath): each to
// its path, unset to auto, anything else to -1 (the launch then rejects the params).
TEST(MlaDecodeEmuTest, DecodePathNames) {
  EXPECT_EQ(staging::ParseDecodePath(nullptr), kMlaPathAuto);
  const std::pair<const char*, int32_t> names[] = {
      {"auto", kMlaPathAuto},    {"mma", kMlaPathMmaSync},        {"wgmma", kMlaPathWgmma},
      {"f16", kMlaPathWgmmaF16}, {"narrow", kMlaPathWgmmaNarrow}, {"f16pv", kMlaPathWgmmaF16Pv}};
  for (const auto& [name, path] : names) EXPECT_EQ(staging::ParseDecodePath(name), path) << name;
  for (const char* bad : {"", "f16pv-pair", "f16pv-", "F16PV"}) {
    EXPECT_EQ(staging::ParseDecodePath(bad), -1) << bad;
  }
}

TEST(MlaDecodeEmuTest, Bf16SingleTokenVarlenPaged) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {37, 100, 64}, 1, 16);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 1);
  CheckCase(c, Plan(batch, 4), "bf16 H16 q1 page16 cu4");
}

TEST(MlaDecodeEmuTest, PlanCuPutsALanesWalkPositionOnNeighbouringBlocks) {
  for (int num_cu : {1, 6, 8, 132}) {
    for (int lanes = 1; lanes <= 8; ++lanes) {
      if (num_cu % lanes != 0) continue;
      const int per_lane = num_cu / lanes;
      std::vector<int> runs(num_cu, 0);
      // Blocks lanes * w .. lanes * w + lanes - 1 run walk position w of lanes 0 .. lanes - 1
      // (plan CU w + l * per_lane), each plan CU exactly once.
      for (int w = 0; w < per_lane; ++w) {
        for (int l = 0; l < lanes; ++l) {
          const int cu = MlaPlanCu(lanes * w + l, num_cu, lanes);
          ASSERT_GE(cu, 0);
          ASSERT_LT(cu, num_cu);
          ++runs[cu];
          EXPECT_EQ(cu, w + l * per_lane) << num_cu << " CUs, " << lanes << " lanes";
        }
      }
      EXPECT_EQ(runs, std::vector<int>(num_cu, 1)) << num_cu << " CUs, " << lanes << " lanes";
    }
    EXPECT_EQ(MlaPlanCu(num_cu - 1, num_cu, 1), num_cu - 1);
  }
  EXPECT_EQ(MlaPlanCu(1, 132, 2), 66);  // a request's second lane right beside its first
}

TEST(MlaDecodeEmuTest, KvLanesOnNeighbouringBlocks) {
  // Two tiles a request in two kv lanes: the blocks run the lanes side by side (PlanCu), each
  // plan CU exactly once.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {600, 500, 550}, 2, 16);
  const WorkPlan plan = Plan(batch, 8);
  ASSERT_GT(plan.kv_lanes, 1);
  CheckCase(sim::MakeDecodeCase(batch, 12), plan, "bf16 H64 q2 page16 cu8 lanes");
}

TEST(MlaDecodeEmuTest, Fp8MtpPartialTilesWithScales) {
  // (32, 3): tiles of 2 and 1 tokens; page 64 with a short last page.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 32, {70, 45}, 3, 64);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 2, /*q_scale=*/0.7, /*kv_scale=*/1.3);
  CheckCase(c, Plan(batch, 3), "fp8 H32 q3 page64 cu3");
}

TEST(MlaDecodeEmuTest, Bf16FoldedHeads128) {
  // H = 128 folds into 2 groups of 64 heads: full 64-row tiles, page size 1, splits.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 128, 1, 2, 80, 1);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 3);
  CheckCase(c, Plan(batch, 3), "bf16 H128 q2 page1 cu3");
}

TEST(MlaDecodeEmuTest, Fp8Heads16Qlen4) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 16, {33, 90}, 4, 1);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 4, 1.5, 0.6);
  CheckCase(c, Plan(batch, 2), "fp8 H16 q4 page1 cu2");
}

TEST(MlaDecodeEmuTest, Bf16Heads48) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 48, 2, 2, 40, 64);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 5);
  CheckCase(c, Plan(batch, 5), "bf16 H48 q2 page64 cu5");
}

TEST(MlaDecodeEmuTest, SparsePerTokenWithEmptyRows) {
  // Sparse per-token layout: one q token per sequence, gathered slots (page size 1), no
  // causal mask, a graph-padded row with no kv (O = 0, LSE = -inf from the decode kernel).
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {1, 70, 0, 33}, 1, 1);
  batch.sparse_topk = 2048;
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 6, 0.8, 1.1);
  CheckCase(c, Plan(batch, 3), "sparse fp8 H64 cu3");
}

TEST(MlaDecodeEmuTest, ManySplitsTakeTheManyPiecesReduce) {
  // One long request over 6 CUs: every tile is split into >3 pieces.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 200, 1);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 7);
  const WorkPlan plan = Plan(batch, 6);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], 3);
  CheckCase(c, plan, "bf16 H16 q1 cu6 (many pieces)");
}

TEST(MlaDecodeEmuTest, ManySplitsPastTheFewPiecesReduce) {
  // One long request over 12 CUs: tiles of more pieces than the reduce merges at once
  // (kReduceFewPieces), so rows take the one-piece-at-a-time merge.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 700, 1);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 11);
  const WorkPlan plan = Plan(batch, 12);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], mla::kReduceFewPieces);
  CheckCase(c, plan, "bf16 H16 q1 ctx700 cu12 (more than the few pieces)");
}

TEST(MlaDecodeEmuTest, SplitRequestPastTheFirst128FindsItsRequest) {
  // 140 one-token requests, then a long one that is split: the reduce's request search
  // counts past its first kReduceThreads requests.
  std::vector<int> lens(140, 1);
  lens.push_back(2000);
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, lens, 1, 16);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 12);
  const WorkPlan plan = Plan(batch, 8);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GE(plan.reduce_final_map[0], 140);  // the split tile's first folded token
  CheckCase(c, plan, "bf16 H16 q1 141 requests cu8 (late split)");
}

// One CU: items of 10+ kv blocks, so the cp.async ring (3 / 5 slots) wraps several times.
// One test per dtype (the slowest cases here), so that test shards stay short.
TEST(MlaDecodeEmuTest, LongItemsWrapTheCopyRingBf16) {
  const Batch bf16 = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 1, 330, 64);
  CheckCase(sim::MakeDecodeCase(bf16, 9), Plan(bf16, 1), "bf16 H64 q1 ctx330 cu1");
}

TEST(MlaDecodeEmuTest, LongItemsWrapTheCopyRingFp8) {
  const Batch fp8 = MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 1, 4, 400, 16);
  CheckCase(sim::MakeDecodeCase(fp8, 10, 0.5, 2.0), Plan(fp8, 1), "fp8 H16 q4 ctx400 cu1");
}

#if MLAPS_MLA_MMA
TEST(MlaDecodeEmuTest, RegistryBlocksPerCuMatchesTheKernel) {
  // The registry's cost entries and the kernel's layout choice agree for every tile fill the
  // sm90 kernels serve: the default grid is one block a CU (the narrow-tile or 64-row
  // kernels), and a two-blocks-a-CU entry exists exactly where the compact layout fits, which
  // the launcher runs exactly for grids of more than one block an SM.
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    for (int heads : {16, 32, 48, 64, 128}) {
      for (int qlen : {1, 2, 3, 4}) {
        absl::StatusOr<ResolvedVariant> v =
            ResolveVariant({Arch::kSm90, dtype, dtype, heads, qlen, false, true});
        ASSERT_TRUE(v.ok()) << v.status();
        MlaDecodeParams p;
        p.num_heads = heads;
        p.head_fold = v->head_fold;
        p.tokens_per_tile = v->tokens_per_tile;
        EXPECT_EQ(v->blocks_per_cu, 1) << "H" << heads << " q" << qlen;
        const int rows = heads / v->head_fold * v->tokens_per_tile;
        bool two_blocks_entry = false;
        for (const proto::TileCost& t : v->cost.tile()) {
          two_blocks_entry |= t.rows() == rows && t.blocks_per_cu() == 2;
        }
        EXPECT_EQ(two_blocks_entry, mla::CompactLayoutFits(p)) << "H" << heads << " q" << qlen;
        for (int num_cu : {1, 132, 133, 264}) {
          p.num_cu = num_cu;
          EXPECT_EQ(mla::UseCompactLayout(p, 132), two_blocks_entry && num_cu > 132)
              << "H" << heads << " q" << qlen << " num_cu " << num_cu;
        }
        p.block_threads = 512;  // 16-warp blocks have no compact layout
        p.num_cu = 264;
        EXPECT_FALSE(mla::UseCompactLayout(p, 132));
      }
    }
  }
}
#endif

// H = 16, qlen 1: 16-row tiles run the compact layout (two-block ring, 16-row Q) with 8
// warps; long items wrap its ring many times, varlen lengths end blocks mid-page. One test
// per dtype, so that test shards stay short.
void CheckCompactLayout(DType dtype) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, dtype, 16, {333, 47, 1000}, 1, 16);
  const sim::DecodeCase c = dtype == DType::kFp8 ? sim::MakeDecodeCase(batch, 12, 0.5, 2.0)
                                                 : sim::MakeDecodeCase(batch, 12);
  MlaDecodeParams probe;
  probe.num_heads = 16;
  probe.head_fold = 1;
  probe.tokens_per_tile = 1;
  ASSERT_TRUE(mla::CompactLayoutFits(probe));
  CheckCase(c, Plan(batch, 3), dtype == DType::kFp8 ? "fp8 H16 q1 compact" : "bf16 H16 q1 compact");
}

TEST(MlaDecodeEmuTest, CompactLayoutForSixteenRowTilesBf16) { CheckCompactLayout(DType::kBf16); }

TEST(MlaDecodeEmuTest, CompactLayoutForSixteenRowTilesFp8) { CheckCompactLayout(DType::kFp8); }

// CP round-robin: every rank of W in {2, 3}, I in {1, 16 (page 64)} runs its shard
// (MakeCpShardView: the global cache viewed as sub-pages of I tokens) on the emulated
// kernels with fp32 final O (MlaDecodeParams::o_fp32), against the executor with
// final_o_bf16 = false and the fp64 reference on the same view with the CP hook
// (global-position mask), under the dtype's gates; the trace against the plan's. Then the
// ranks' fp32 O / LSE are merged (sim::MergeCpRanks), rounded to bf16 once and compared with
// the unsharded fp64 reference (as tests/sim/cp_test.cc does with the executor): no element
// may fail. The first request is shorter than W, so some ranks hold none of its tokens, and
// the short ones leave tokens that see none of a rank's tokens: O = 0, LSE = -inf there.
struct CpCase {
  DType dtype;
  int heads, qlen;
  std::vector<int> kv_lens;
  double q_scale, kv_scale;
};

void CheckCpRanks(const CpCase& k, int world, int interleave, int warps, uint64_t seed) {
  const int page = interleave == 1 ? 16 : 64;
  const Batch global = MakeVarlenBatch(Arch::kSm90, k.dtype, k.heads, k.kv_lens, k.qlen, page);
  const sim::DecodeCase gc = sim::MakeDecodeCase(global, seed, k.q_scale, k.kv_scale);
  const CpSharding s{world, interleave};
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  std::vector<std::vector<float>> rank_o(world), rank_lse(world);
  int64_t tokens = 0, empty_rows = 0;
  for (int rank = 0; rank < world; ++rank) {
    const std::string name = std::string(DTypeName(k.dtype)) + " H" + std::to_string(k.heads) +
                             " q" + std::to_string(k.qlen) + " W" + std::to_string(world) + " I" +
                             std::to_string(interleave) + " rank " + std::to_string(rank) + " (" +
                             std::to_string(warps) + " warps)";
    SCOPED_TRACE(name);
    absl::StatusOr<CpShardView> view = MakeCpShardView(global, gc.kv_indices, s, rank);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_TRUE(view->batch.cp_round_robin);
    tokens += view->batch.kv_indptr.back() > 0 ? view->batch.kv_len(0) : 0;
    const sim::DecodeCase c = testing::MakeCpRankCase(gc, *view);
    const testing::CpRank cp = testing::MakeCpRank(*view, s, rank);
    const WorkPlan plan = Plan(view->batch, 3);
    ASSERT_NE(plan.variant.find("cprr"), std::string::npos) << plan.variant;
    const DecodeRunResult got = RunEmulated(c, plan, warps, nullptr, &cp, /*o_fp32=*/true);
    sim::CpGlobalPositions hook;
    hook.global_position = [&](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
    hook.global_kv_len = view->global_kv_len;
    sim::DecodeInputs inputs = c.Inputs();
    inputs.cp = &hook;
    sim::ExecutorOptions options;
    options.kv_block = mla::kBlockN;
    options.final_o_bf16 = false;  // fp32 final O, as the kernel writes it with o_fp32
    // Also: rows that see none of this rank's tokens (the reference's -inf rows, and every row
    // of a request the rank holds nothing of) are exactly O = 0, LSE = -inf.
    const RunCheck check =
        ExpectRunMatchesPlan(c.batch, plan, inputs, options, sim::GatesFor(k.dtype), got);
    ASSERT_EQ(got.error, "");
    const int64_t rank_empty = check.empty_rows;
    const float inf = std::numeric_limits<float>::infinity();
    for (int b = 0; b < c.batch.num_requests(); ++b) {
      if (c.batch.kv_len(b) != 0) continue;
      for (int64_t t = c.batch.qo_indptr[b]; t < c.batch.qo_indptr[b + 1]; ++t) {
        for (int h = 0; h < c.batch.num_heads; ++h) {
          EXPECT_EQ(got.lse[t * c.batch.num_heads + h], -inf) << "request " << b;
        }
      }
    }
    empty_rows += rank_empty;
    std::printf("cp %s: %d items, %d split tiles, %lld empty rows; vs executor %s\n", name.c_str(),
                plan.num_works(), plan.num_reduce_tiles(), static_cast<long long>(rank_empty),
                check.vs_executor.c_str());
    // The default bf16 final O of the same rank is the fp32 O rounded once (same arithmetic
    // up to the store), and the LSE is the same.
    const DecodeRunResult bf16 = RunEmulated(c, plan, warps, nullptr, &cp);
    ASSERT_EQ(bf16.error, "");
    EXPECT_EQ(bf16.status.code, kMlaOk);
    ASSERT_EQ(bf16.o.size(), got.o.size());
    int64_t rounding_mismatches = 0;
    for (size_t i = 0; i < got.o.size(); ++i) {
      rounding_mismatches += sim::RoundToBf16(got.o[i]) != bf16.o[i];
    }
    EXPECT_EQ(rounding_mismatches, 0);
    EXPECT_EQ(bf16.lse, got.lse);
    ASSERT_EQ(static_cast<int64_t>(got.o.size()), rows * kHeadDimV);
    ASSERT_EQ(static_cast<int64_t>(got.lse.size()), rows);
    rank_o[rank] = got.o;
    rank_lse[rank] = got.lse;
  }
  EXPECT_EQ(tokens, k.kv_lens[0]);  // the shards partition the first request
  EXPECT_GT(empty_rows, 0);         // the short request leaves ranks / tokens with nothing
  // The ranks merged in fp32, rounded to bf16 once, against the unsharded reference.
  const std::string name = std::string(DTypeName(k.dtype)) + " H" + std::to_string(k.heads) + " q" +
                           std::to_string(k.qlen) + " W" + std::to_string(world) + " I" +
                           std::to_string(interleave) + " merged (" + std::to_string(warps) +
                           " warps)";
  SCOPED_TRACE(name);
  const std::string merged = testing::ExpectMergedRanksMatchReference(
      global, gc.Inputs(), rank_o, rank_lse, sim::GatesFor(k.dtype));
  std::printf("cp %s vs unsharded reference: %s\n", name.c_str(), merged.c_str());
}

// One test per (case, W, I), so that test shards stay short: CpRoundRobinEveryRank/N with
// N = case * 4 + (W == 3) * 2 + (I == 16), seed 101 + N.
class CpRoundRobinEveryRank : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(CpRoundRobinEveryRank, MergesToTheUnshardedReference) {
  const CpCase cases[] = {
      {DType::kBf16, 16, 2, {2, 75, 40}, 1.0, 1.0},
      {DType::kFp8, 16, 2, {2, 75, 40}, 0.7, 1.3},
      {DType::kBf16, 64, 1, {1, 70, 33}, 1.0, 1.0},
      {DType::kFp8, 64, 1, {1, 70, 33}, 0.8, 1.1},
  };
  const auto [case_index, world, interleave] = GetParam();
  const CpCase& k = cases[case_index];
  const uint64_t seed = 101 + case_index * 4 + (world == 3) * 2 + (interleave == 16);
  CheckCpRanks(k, world, interleave, 8, seed);
#if MLAPS_MLA_MMA  // the generic path does not depend on the block shape
  if (k.dtype == DType::kBf16 && world == 3) CheckCpRanks(k, world, interleave, 16, seed);
#endif
}

INSTANTIATE_TEST_SUITE_P(MlaDecodeEmuTest, CpRoundRobinEveryRank,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Values(2, 3),
                                            ::testing::Values(1, 16)));

// Bad plans are reported through the status word and never read or write out of bounds
// (the emulation would crash or the poison would show).
TEST(MlaDecodeEmuTest, StatusWordReportsBadItems) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {40, 20}, 2, 16);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 8);
  const WorkPlan plan = Plan(batch, 2);
  struct Planted {
    void (*mutate)(std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>&,
                   const PlanArena&);
    int32_t code;
  };
  const Planted cases[] = {
      {[](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& w, const PlanArena& a) {
         w[a.work_info + 0] = 99;  // batch_idx
       },
       kMlaBadBatchIdx},
      {[](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& w, const PlanArena& a) {
         w[a.work_info + 5] += 100;  // kv_end past the request's pages
       },
       kMlaBadKvRange},
      {[](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& w, const PlanArena& a) {
         w[a.work_info + 1] = 1 << 20;  // partial_qo_loc past the partial buffers
       },
       kMlaBadPartialLoc},
      {[](std::vector<int32_t>& b, const BatchArena& a, std::vector<int32_t>&, const PlanArena&) {
         b[a.kv_indices + 1] = 1 << 30;  // a page id past the cache
       },
       kMlaBadPageId},
      {[](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& w, const PlanArena& a) {
         w[a.work_indptr + 1] = 1000;  // work_indptr past work_info
       },
       kMlaBadWorkIndptr},
      {[](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& w, const PlanArena& a) {
         w[a.work_info + 3] += 5;  // qo_end past the virtual request's tokens
       },
       kMlaBadQoRange},
  };
  for (const Planted& planted : cases) {
    const DecodeRunResult got = RunEmulated(c, plan, 8, planted.mutate);
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.status.code, planted.code)
        << "cu " << got.status.cu << " index " << got.status.index << " value " << got.status.value;
  }
}

}  // namespace
}  // namespace mlaps
