// The fp8 sm90 decode kernel with the kv operands widened in registers
// (kernels/decode/mla_decode_sm90_kvreg.h: e4m3 kv blocks in a three-slot ring, S^T = K Q^T and
// O^T += V^T P^T with K and V^T as register A operands in permuted orders, column maxima across
// warps) on the CPU emulation of tests/kernels/emu, with the reduce kernel, against the
// simulator's executor (64-token kv blocks) and the fp64 reference under docs/design.md's fp8
// gates, the trace against the plan's, and the same bits under skewed warpgroup schedules
// (tests/kernels/decode/sm90_emu_harness.h).
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
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/mla_decode_sm90_kvreg.h"
#include "kernels/decode/mla_reduce_device.h"
#include "tests/kernels/decode/sm90_emu_harness.h"
// clang-format on

namespace mlaps {
namespace {

using testing::CheckSm90Case;
using testing::PlanForTest;

// The kernel with the kv cache's TMA map as the launch encodes it on the GPU (fp8 only).
void KvRegBody(const MlaDecodeParams& p, bool fp8) {
  if (!fp8) {
    ADD_FAILURE() << "the kv-register kernel runs fp8 only";
    return;
  }
  mla::sm90_kvreg::MlaDecodeSm90KvRegKernel(p, testing::KvTmaMap(p, fp8));
}
constexpr testing::Sm90KernelUnderTest kKvReg{
    mla::sm90_kvreg::kKvRegThreads, mla::sm90_kvreg::SmemKvReg::kBytes,
    mla::sm90_kvreg::SmemKvReg::kTokens, kMlaPathWgmmaKvReg, &KvRegBody};

Batch Fp8Varlen(int heads, const std::vector<int>& lens, int qlen, int page) {
  return MakeVarlenBatch(Arch::kSm90, DType::kFp8, heads, lens, qlen, page);
}

TEST(MlaDecodeSm90KvRegEmuTest, Heads16Qlen1VarlenPage16) {
  // 16 rows of a 64-row tile; blocks by cp.async, partial last blocks.
  const Batch batch = Fp8Varlen(16, {37, 100, 64}, 1, 16);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 1, 0.7, 1.3), PlanForTest(batch, 4),
                "fp8 H16 q1 page16 cu4");
}

TEST(MlaDecodeSm90KvRegEmuTest, Heads16Qlen4CausalPage1) {
  // MTP: 4 causal tokens of 16 heads a tile; the mask ends mid-block per q row.
  const Batch batch = Fp8Varlen(16, {33, 90, 200}, 4, 1);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 2), PlanForTest(batch, 2),
                "fp8 H16 q4 page1 cu2");
}

TEST(MlaDecodeSm90KvRegEmuTest, Heads32Qlen3MtpPartialTilesWithScales) {
  // (32, 3): a 64-row and a 32-row tile; whole-page blocks by TMA.
  const Batch batch = Fp8Varlen(32, {70, 200}, 3, 64);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 21, /*q_scale=*/0.5, /*kv_scale=*/2.0),
                PlanForTest(batch, 3), "fp8 H32 q3 page64 cu3 (scales)");
}

TEST(MlaDecodeSm90KvRegEmuTest, Heads64Qlen1VarlenPage64) {
  // Full 64-row tiles; a request shorter than one kv block.
  const Batch batch = Fp8Varlen(64, {70, 5, 130}, 1, 64);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 4), PlanForTest(batch, 3),
                "fp8 H64 q1 page64 cu3");
}

TEST(MlaDecodeSm90KvRegEmuTest, Heads128FoldedPage1) {
  const Batch batch = Fp8Varlen(128, {150, 37}, 1, 1);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 22, 0.7, 1.3), PlanForTest(batch, 2),
                "fp8 H128 q1 page1 cu2");
}

TEST(MlaDecodeSm90KvRegEmuTest, ManySplitsTakeTheManyPiecesReduce) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 1, 1, 200, 1);
  const WorkPlan plan = PlanForTest(batch, 6);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], 3);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 7), plan, "fp8 H16 q1 cu6 (many pieces)");
}

TEST(MlaDecodeSm90KvRegEmuTest, LongItemsWrapTheThreeSlotRing) {
  // One CU: 11 kv blocks an item (the three slots and the two P buffers wrap), then long split
  // items of two tokens.
  const Batch one = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 1, 1, 690, 64);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(one, 8), PlanForTest(one, 1), "fp8 H64 q1 ctx690 cu1");
  const Batch two = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 2, 2, 900, 64);
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(two, 24, 0.5, 2.0), PlanForTest(two, 3),
                "fp8 H64 q2 ctx900 cu3");
}

TEST(MlaDecodeSm90KvRegEmuTest, SparsePerTokenWithEmptyRows) {
  // Gathered slots (page size 1), no causal mask, a graph-padded row with no kv.
  Batch batch = Fp8Varlen(64, {1, 70, 0, 33}, 1, 1);
  batch.sparse_topk = 2048;
  CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 9), PlanForTest(batch, 3), "fp8 sparse H64 cu3");
}

TEST(MlaDecodeSm90KvRegEmuTest, ManyItemsOnOneBlockKeepTheRingInStep) {
  // One CU walks six items of 1 to 9 kv blocks: block counts not a multiple of 2 or 3 hand the
  // next item's first block to either consumer and any slot; Q reloads between items.
  for (const int page : {16, 1}) {
    const Batch batch = Fp8Varlen(64, {560, 64, 129, 1, 300, 65}, 1, page);
    const WorkPlan plan = PlanForTest(batch, 1);
    ASSERT_EQ(plan.num_works(), 6);
    CheckSm90Case(kKvReg, sim::MakeDecodeCase(batch, 26, 0.6, 1.5), plan,
                  "fp8 H64 q1 6 items cu1 page" + std::to_string(page));
  }
}

TEST(MlaDecodeSm90KvRegEmuTest, CpRoundRobinW2I16) {
  testing::CheckSm90CpRanks(kKvReg, 16, 2, {2, 75, 40}, 2, 16, 101, DType::kFp8);
}

TEST(MlaDecodeSm90KvRegEmuTest, CpRoundRobinW3I1) {
  testing::CheckSm90CpRanks(kKvReg, 64, 1, {1, 70, 33}, 3, 1, 102, DType::kFp8);
}

TEST(MlaDecodeSm90KvRegEmuTest, StatusWordReportsABadPage) {
  const Batch batch = Fp8Varlen(64, {40, 200}, 1, 16);
  // Request 1's fifth page: kv block 1 of its item.
  testing::ExpectBadPageReported(kKvReg, batch, 27, 7, -3, PlanForTest(batch, 1));
}

TEST(MlaDecodeSm90KvRegEmuTest, EmptyItemsKeepTheQTileInStep) {
  const Batch batch = Fp8Varlen(64, {150, 70}, 1, 64);
  testing::ExpectEmptyItemsKeepTheQTileInStep(kKvReg, sim::MakeDecodeCase(batch, 29),
                                              PlanForTest(batch, 1));
}

}  // namespace
}  // namespace mlaps
