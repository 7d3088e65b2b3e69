// The sm90 wgmma decode kernels and the reduce kernel run on the CPU through tests/kernels/emu
// (fibers for threads; emulated wgmma with descriptor-decoded, swizzled shared memory operands
// and register fragments; mbarriers; cp.async completing on mbarriers; named barriers;
// setmaxnreg): the f16-tile kernel (kernels/decode/mla_decode_sm90.h: bf16 and fp8, a producer
// and two consumer warpgroups), the bf16 hi + lo kernel (mla_decode_sm90_bf16.h) and the
// f16 P V kernel (mla_decode_sm90_f16pv.h: bf16 and fp8, TMA, V^T from registers), against
// the simulator's executor (sim::ExecutePlan, kv blocks of each kernel's SmemSm90::kTokens) and
// the fp64 reference under docs/design.md's gates, with the kernel's trace compared with the
// plan's (tests/kernels/decode/sm90_emu_harness.h). Every case runs again with the low or the
// high warpgroups as far ahead of the others as their waits allow, and with the producer's
// second copy warp as far behind (mlaps_emu::Schedule), and must write the same bits. The emulation
// aborts with a message where a kernel breaks a PTX rule it checks (poisoned or rewritten wgmma
// operands, misaligned swizzle atoms, accumulators touched in flight, a wgmma chain without a
// fence) and reports deadlocks.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/work_plan.h"
#include "sim/decode_case.h"
#include "tests/kernels/decode/decode_checks.h"

// Last, in this order: the emulation defines the device dialect (its macros must not reach
// the library headers above), then the device code compiles on top of it.
// clang-format off
#include "tests/kernels/emu/hip_host_emulation.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90.h"
#include "kernels/decode/mla_decode_sm90_bf16.h"
#include "kernels/decode/mla_decode_sm90_f16pv.h"
#include "kernels/decode/mla_reduce_device.h"
#include "tests/kernels/decode/sm90_emu_harness.h"
// clang-format on

namespace mlaps {
namespace {

using testing::CheckSm90Case;
using testing::CheckSm90CpRanks;
using testing::DecodeRunResult;
using testing::PlanForTest;
using testing::RunSm90;

// The f16-tile kernel (mla_decode_sm90.h): a producer and two consumer warpgroups, 64-token kv
// blocks, bf16 and fp8; with its TMA path for pages of 64 tokens or more, without it for
// smaller pages, as the launch picks it.
void F16TileBody(const MlaDecodeParams& p, bool fp8) {
  const mla::TmaMap map = testing::KvTmaMap(p, fp8);
  const bool tma = p.page_size >= mla::SmemSm90::kTokens;
  if (fp8) {
    tma ? mla::MlaDecodeSm90Kernel<true, true>(p, map)
        : mla::MlaDecodeSm90Kernel<true, false>(p, map);
  } else {
    tma ? mla::MlaDecodeSm90Kernel<false, true>(p, map)
        : mla::MlaDecodeSm90Kernel<false, false>(p, map);
  }
}
constexpr testing::Sm90KernelUnderTest kF16Tile{mla::kSm90Threads, mla::SmemSm90::kBytes,
                                                mla::SmemSm90::kTokens, kMlaPathWgmmaF16,
                                                &F16TileBody};

// The bf16 hi + lo kernel (mla_decode_sm90_bf16.h): two warpgroups, 32-token kv blocks, bf16.
void Bf16HiLoBody(const MlaDecodeParams& p, bool fp8) {
  if (fp8) {
    ADD_FAILURE() << "the bf16 sm90 kernel runs bf16 only";
    return;  // every thread returns: the launch ends without running the kernel
  }
  mla::sm90_bf16::MlaDecodeSm90Kernel(p);
}
constexpr testing::Sm90KernelUnderTest kBf16HiLo{
    mla::sm90_bf16::kSm90Threads, mla::sm90_bf16::SmemSm90::kBytes,
    mla::sm90_bf16::SmemSm90::kTokens, kMlaPathWgmma, &Bf16HiLoBody};

// The f16 P V kernel (mla_decode_sm90_f16pv.h): the producer with TMA and two consumer
// warpgroups, 64-token kv blocks, bf16 and fp8.
void F16PvBody(const MlaDecodeParams& p, bool fp8) {
  const mla::TmaMap map = testing::KvTmaMap(p, fp8, /*raw_e4m3=*/true);
  if (fp8) {
    mla::sm90_f16pv::MlaDecodeSm90F16PvKernel<true>(p, map);
  } else {
    mla::sm90_f16pv::MlaDecodeSm90F16PvKernel<false>(p, map);
  }
}
constexpr testing::Sm90KernelUnderTest kF16Pv{mla::sm90_f16pv::kF16PvThreads, mla::SmemSm90::kBytes,
                                              mla::SmemSm90::kTokens, kMlaPathWgmmaF16Pv,
                                              &F16PvBody};

std::string KernelName(const ::testing::TestParamInfo<testing::Sm90KernelUnderTest>& info) {
  return info.param.path == kMlaPathWgmmaF16     ? "F16Tile"
         : info.param.path == kMlaPathWgmmaF16Pv ? "F16Pv"
                                                 : "Bf16HiLo";
}

// The bf16 cases run on every kernel; fp8 on the f16-tile and f16 P V kernels.
class Sm90KernelTest : public ::testing::TestWithParam<testing::Sm90KernelUnderTest> {};
class Sm90Fp8KernelTest : public ::testing::TestWithParam<testing::Sm90KernelUnderTest> {};

INSTANTIATE_TEST_SUITE_P(MlaDecodeSm90EmuTest, Sm90KernelTest,
                         ::testing::Values(kF16Tile, kBf16HiLo, kF16Pv), KernelName);
INSTANTIATE_TEST_SUITE_P(MlaDecodeSm90EmuTest, Sm90Fp8KernelTest,
                         ::testing::Values(kF16Tile, kF16Pv), KernelName);
TEST_P(Sm90KernelTest, Heads16Qlen1VarlenPage16) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {37, 100, 64}, 1, 16);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 1), PlanForTest(batch, 4),
                "H16 q1 page16 cu4");
}

TEST_P(Sm90KernelTest, Heads16Qlen4CausalPage1) {
  // MTP: 4 causal tokens of 16 heads a tile; varlen lengths end blocks mid-page.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {33, 90}, 4, 1);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 2), PlanForTest(batch, 2),
                "H16 q4 page1 cu2");
}

TEST_P(Sm90KernelTest, Heads32Qlen2UniformPage64) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 32, 3, 2, 70, 64);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 3, /*q_scale=*/0.7, /*kv_scale=*/1.3),
                PlanForTest(batch, 3), "H32 q2 uniform page64 cu3 (scales)");
}

TEST_P(Sm90KernelTest, Heads64Qlen1VarlenPage64) {
  // Full 64-row tiles; a request shorter than one kv block.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {70, 5, 130}, 1, 64);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 4), PlanForTest(batch, 3),
                "H64 q1 page64 cu3");
}

TEST_P(Sm90KernelTest, Heads128FoldedUniformPage16) {
  // H = 128 folds into 2 groups of 64 heads (head_fold 2).
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 128, 2, 1, 80, 16);
  const WorkPlan plan = PlanForTest(batch, 3);
  ASSERT_EQ(plan.head_fold, 2);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 5), plan, "H128 q1 page16 cu3");
}

TEST_P(Sm90KernelTest, MediumVarlenBatch) {
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {150, 9, 64, 200, 33, 97, 1, 128}, 1, 16);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 6), PlanForTest(batch, 8),
                "H16 q1 batch8 page16 cu8");
}

TEST_P(Sm90KernelTest, ManySplitsTakeTheManyPiecesReduce) {
  // One long request over 6 CUs: every tile is split into >3 pieces (partials + reduce).
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 200, 1);
  const WorkPlan plan = PlanForTest(batch, 6);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], 3);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 7), plan, "H16 q1 cu6 (many pieces)");
}

TEST_P(Sm90KernelTest, DecodeMergeWaitsForEveryPiece) {
  // Two requests split over 6 CUs; only the first 3 run: a tile with a piece beyond them is
  // left for its last piece, a tile complete on them is merged.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {150, 260}, 1, 1);
  testing::ExpectMergeWaitsForEveryPiece(GetParam(), sim::MakeDecodeCase(batch, 31),
                                         PlanForTest(batch, 6), 3);
}

TEST_P(Sm90KernelTest, DecodeMergeFindsTilesInLaneMajorOrder) {
  // kv lanes order the split tiles lane-major, so reduce_final_map does not ascend: the decode
  // must find a piece's tile by its q tokens wherever it sits (CheckSm90Case runs the merge).
  // Two tiles a request (H64, qlen 2) in two lanes on 8 CUs.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {600, 500, 550}, 2, 16);
  const WorkPlan plan = PlanForTest(batch, 8);
  ASSERT_GT(plan.kv_lanes, 1);
  bool ascending = true;
  for (int t = 1; t < plan.num_reduce_tiles(); ++t) {
    ascending = ascending && plan.reduce_final_map[2 * t] > plan.reduce_final_map[2 * t - 2];
  }
  ASSERT_FALSE(ascending) << "the plan's split tiles ascend: not the case under test";
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 33), plan, "H64 q2 batch3 cu8 lanes");
}

TEST_P(Sm90KernelTest, DecodeMergeOfBlocksOfManyItems) {
  // 81 short requests on 2 CUs: more items a block than a warp has lanes, so the blocks book
  // nothing and take their pieces one at a time after the walk (CloseMergeBook).
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 81, 1, 70, 16);
  const WorkPlan plan = PlanForTest(batch, 2);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.work_indptr[1] - plan.work_indptr[0], 32);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 34);
  CheckSm90Case(GetParam(), c, plan, "H16 q1 batch81 cu2");
  testing::ExpectMergeWaitsForEveryPiece(GetParam(), c, plan, 1);
}

TEST_P(Sm90KernelTest, DecodeMergeReportsAPieceWithoutATile) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 200, 1);
  testing::ExpectMergeReportsAPieceWithoutATile(GetParam(), sim::MakeDecodeCase(batch, 32),
                                                PlanForTest(batch, 6));
}

TEST_P(Sm90KernelTest, LongItemWrapsTheKvRing) {
  // One CU: an item of 11 kv blocks, so the four-slot ring and the two P buffers wrap.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 1, 330, 64);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 8), PlanForTest(batch, 1),
                "H64 q1 ctx330 cu1");
}

TEST_P(Sm90KernelTest, SparsePerTokenWithEmptyRows) {
  // Sparse per-token layout: one q token per sequence, gathered slots (page size 1), no
  // causal mask, a graph-padded row with no kv (O = 0, LSE = -inf from the decode kernel).
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {1, 70, 0, 33}, 1, 1);
  batch.sparse_topk = 2048;
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 9), PlanForTest(batch, 3), "sparse H64 cu3");
}

TEST_P(Sm90KernelTest, ManyItemsOnOneBlockKeepTheRingInStep) {
  // One CU walks six items of 1 to 9 kv blocks each: odd block counts hand the next item's
  // first block to the other consumer, Q reloads between items, the two slots wrap many times.
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {560, 64, 129, 1, 300, 65}, 1, 16);
  const WorkPlan plan = PlanForTest(batch, 1);
  ASSERT_EQ(plan.num_works(), 6);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 23), plan, "H64 q1 6 items cu1");
}

TEST_P(Sm90KernelTest, ManyItemsOnOneBlockOfWholePages) {
  // The same walk on pages of 64 tokens: whole-page blocks by TMA, each item's last partial
  // block by cp.async, both consumers owning an item's first block in turn.
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {560, 64, 129, 1, 300, 65, 256}, 1, 64);
  const WorkPlan plan = PlanForTest(batch, 1);
  ASSERT_EQ(plan.num_works(), 7);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 29), plan, "H64 q1 7 items page64 cu1");
}

TEST_P(Sm90KernelTest, CpRoundRobinW2I16) {
  CheckSm90CpRanks(GetParam(), 16, 2, {2, 75, 40}, 2, 16, 101);
}

TEST_P(Sm90KernelTest, CpRoundRobinW3I1) {
  CheckSm90CpRanks(GetParam(), 64, 1, {1, 70, 33}, 3, 1, 102);
}

TEST_P(Sm90KernelTest, StatusWordReportsABadPage) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {40, 20}, 2, 16);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 10);
  c.kv_indices[1] = 1 << 30;
  const DecodeRunResult got = RunSm90(GetParam(), c, PlanForTest(batch, 2));
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaBadPageId) << "index " << got.status.index;
}

TEST_P(Sm90KernelTest, EmptyItemsKeepTheQTileInStep) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {150, 70}, 1, 16);
  testing::ExpectEmptyItemsKeepTheQTileInStep(GetParam(), sim::MakeDecodeCase(batch, 28),
                                              PlanForTest(batch, 1));
}

TEST_P(Sm90Fp8KernelTest, Fp8EmptyItemsKeepTheQTileInStep) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {150, 70}, 1, 64);
  testing::ExpectEmptyItemsKeepTheQTileInStep(GetParam(), sim::MakeDecodeCase(batch, 29),
                                              PlanForTest(batch, 1));
}

TEST_P(Sm90Fp8KernelTest, Fp8MtpPartialTilesWithScales) {
  // fp8 e4m3fn Q and KV under per-tensor scales; (32, 3) gives a 64-row and a 32-row tile.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 32, {70, 200}, 3, 64);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 21, /*q_scale=*/0.5, /*kv_scale=*/2.0),
                PlanForTest(batch, 3), "fp8 H32 q3 page64 cu3 (scales)");
}

TEST_P(Sm90Fp8KernelTest, Fp8Heads128FoldedPage1) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {150, 37}, 1, 1);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 22, 0.7, 1.3), PlanForTest(batch, 2),
                "fp8 H128 q1 page1 cu2");
}

TEST_P(Sm90Fp8KernelTest, Fp8LongSplitItems) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 2, 2, 900, 64);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 24, 0.5, 2.0), PlanForTest(batch, 3),
                "fp8 H64 q2 ctx900 cu3");
}

// fp8 on one CU: six items of 1 to 9 kv blocks, so the e4m3 staging halves of both slots and
// of the Q tile are refilled across items; page size 1 and a partial last block in most items.
TEST_P(Sm90Fp8KernelTest, Fp8ManyItemsOnOneBlock) {
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {560, 64, 129, 1, 300, 65}, 1, 1);
  const WorkPlan plan = PlanForTest(batch, 1);
  ASSERT_EQ(plan.num_works(), 6);
  CheckSm90Case(GetParam(), sim::MakeDecodeCase(batch, 26, 0.6, 1.5), plan,
                "fp8 H64 q1 6 items cu1");
}

TEST_P(Sm90Fp8KernelTest, Fp8CpRoundRobinW2I16) {
  CheckSm90CpRanks(GetParam(), 16, 2, {2, 75, 40}, 2, 16, 103, DType::kFp8);
}

TEST_P(Sm90Fp8KernelTest, Fp8CpRoundRobinW3I1) {
  CheckSm90CpRanks(GetParam(), 64, 1, {1, 70, 33}, 3, 1, 104, DType::kFp8);
}

TEST_P(Sm90KernelTest, MaxJumpsMidItem) {
  const sim::DecodeCase c = testing::MaxJumpsMidItem(DType::kBf16, 64, 61);
  CheckSm90Case(GetParam(), c, PlanForTest(c.batch, 1), "bf16 H64 q1 ctx420 token 300 x8 cu1");
}

TEST_P(Sm90Fp8KernelTest, Fp8MaxJumpsMidItem) {
  const sim::DecodeCase c = testing::MaxJumpsMidItem(DType::kFp8, 64, 62);
  CheckSm90Case(GetParam(), c, PlanForTest(c.batch, 1), "fp8 H64 q1 ctx420 token 300 x8 cu1");
}

// A bad page id on the fp8 path: reported (the kernel reads zeros for it instead).
TEST_P(Sm90Fp8KernelTest, Fp8StatusWordReportsABadPage) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {40, 200}, 1, 16);
  // Request 1's fifth page: kv block 1 of its item.
  testing::ExpectBadPageReported(GetParam(), batch, 27, 7, -3, PlanForTest(batch, 1));
}

TEST(MlaDecodeSm90F16EmuTest, StatusWordReportsABf16ValueBeyondF16) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 70, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 25);
  // Token 5 of the request's first page, dim 7 (a row the kernel reads).
  const int64_t at = (int64_t{c.kv_indices[0]} * batch.page_size + 5) * kHeadDimQk + 7;
  c.kv_cache[at] = 70144.0f;  // a bf16 (0x4789); f16 tops out at 65504
  const DecodeRunResult got = RunSm90(kF16Tile, c, PlanForTest(batch, 1));
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaF16Range);
  EXPECT_EQ(got.status.value, 0x4789);
  // 65280 (0x477f) is the largest bf16 that f16 holds: no report.
  c.kv_cache[at] = -65280.0f;
  EXPECT_EQ(RunSm90(kF16Tile, c, PlanForTest(batch, 1)).status.code, kMlaOk);
  // The same for Q.
  c.q[3 * kHeadDimQk + 100] = -70144.0f;
  EXPECT_EQ(RunSm90(kF16Tile, c, PlanForTest(batch, 1)).status.code, kMlaF16Range);
}

// The f16 P V kernel (bf16).
class Sm90F16PvKernelTest : public ::testing::TestWithParam<testing::Sm90KernelUnderTest> {};
INSTANTIATE_TEST_SUITE_P(MlaDecodeSm90EmuTest, Sm90F16PvKernelTest, ::testing::Values(kF16Pv),
                         KernelName);

// The f16 P V kernel widens only V (dims 0-511) to f16, scaled by 2^-8: a finite V value of
// magnitude >= 2^24 (which the scaled f16 cannot hold) is reported with its bf16 bits; below it
// V is exact (70144 and -65280 are beyond f16 unscaled, and O matches the executor's); Q and the
// rope dims (S in bf16) keep the full bf16 range.
TEST_P(Sm90F16PvKernelTest, ReportsAVValueBeyondTheScaledF16) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 70, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 25);
  const int64_t row = int64_t{c.kv_indices[0]} * batch.page_size;
  const int64_t at = (row + 5) * kHeadDimQk + 7;
  c.kv_cache[at] = 16777216.0f;  // 2^24, a bf16 (0x4b80): 2^16 after the scale, f16 inf
  const DecodeRunResult got = RunSm90(GetParam(), c, PlanForTest(batch, 1));
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaF16Range);
  EXPECT_EQ(got.status.value, 0x4b80);
  // 2^24 - 2^16 (0x4b7f) is the largest bf16 that the scaled f16 holds: no report.
  c.kv_cache[at] = -16711680.0f;
  EXPECT_EQ(RunSm90(GetParam(), c, PlanForTest(batch, 1)).status.code, kMlaOk);
  // Token 65 (page 1: the second kv block, the other consumer's own block and slot).
  c.kv_cache[(int64_t{c.kv_indices[1]} * batch.page_size + 1) * kHeadDimQk + 300] = -33554432.0f;
  const DecodeRunResult second = RunSm90(GetParam(), c, PlanForTest(batch, 1));
  EXPECT_EQ(second.status.code, kMlaF16Range);
  EXPECT_EQ(second.status.value, 0x4c00);
}

TEST_P(Sm90F16PvKernelTest, Bf16VBeyondUnscaledF16IsExact) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 1, 130, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 31);
  // V dims are K dims too: Q's are zeroed so that the logits stay moderate (S is not the point).
  for (int h = 0; h < batch.num_heads; ++h) {
    for (const int d : {7, 300}) c.q[h * kHeadDimQk + d] = 0.0f;
  }
  const int64_t row0 = int64_t{c.kv_indices[0]} * batch.page_size;
  const int64_t row1 = int64_t{c.kv_indices[1]} * batch.page_size;
  c.kv_cache[(row0 + 5) * kHeadDimQk + 7] = 70144.0f;     // consumer 0's dims
  c.kv_cache[(row1 + 3) * kHeadDimQk + 300] = -98304.0f;  // consumer 1's, the other block
  c.kv_cache[(row0 + 9) * kHeadDimQk + 400] = 1.0e-5f;    // below 2^-6: a scaled subnormal
  CheckSm90Case(GetParam(), c, PlanForTest(batch, 1), "bf16 H64 q1 V beyond unscaled f16");
}

TEST_P(Sm90F16PvKernelTest, Bf16BeyondF16InQAndRopeIsExact) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 1, 130, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 49);
  // A rope dim of K (S only) beyond f16, with Q's dim zeroed so that the logits stay moderate,
  // and a Q nope dim beyond f16 against a zeroed K dim.
  for (int h = 0; h < batch.num_heads; ++h) c.q[h * kHeadDimQk + 530] = 0.0f;
  const int64_t row = int64_t{c.kv_indices[0]} * batch.page_size;
  c.kv_cache[(row + 5) * kHeadDimQk + 530] = 70144.0f;
  for (size_t t = 0; t < c.kv_cache.size() / kHeadDimQk; ++t) {
    c.kv_cache[t * kHeadDimQk + 11] = 0.0f;
  }
  c.q[3 * kHeadDimQk + 11] = -98304.0f;
  CheckSm90Case(GetParam(), c, PlanForTest(batch, 1), "bf16 H64 q1 Q and rope beyond f16");
}

}  // namespace
}  // namespace mlaps
