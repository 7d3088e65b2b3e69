// The narrow-tile sm90 decode kernel (kernels/decode/mla_decode_sm90_narrow.h: tiles of at most
// 16 q rows, transposed wgmma m64n16k16 products, both consumer warpgroups on every kv block,
// TMA loads of whole-page blocks) on the CPU emulation of tests/kernels/emu, with the reduce
// kernel, against the simulator's executor (64-token kv blocks) and the fp64
// reference under docs/design.md's gates, the trace against the plan's, and the same bits
// under skewed warpgroup schedules (tests/kernels/decode/sm90_emu_harness.h). bf16 and fp8.
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
#include "kernels/decode/mla_decode_sm90_narrow.h"
#include "kernels/decode/mla_reduce_device.h"
#include "tests/kernels/decode/sm90_emu_harness.h"
// clang-format on

namespace mlaps {
namespace {

using testing::CheckSm90Case;
using testing::PlanForTest;

// The kernel with the kv cache's TMA map as the launch encodes it on the GPU.
void NarrowBody(const MlaDecodeParams& p, bool fp8) {
  const mla::TmaMap map = testing::KvTmaMap(p, fp8, /*raw_e4m3=*/true);
  if (fp8) {
    mla::sm90_narrow::MlaDecodeSm90NarrowKernel<true>(p, map);
  } else {
    mla::sm90_narrow::MlaDecodeSm90NarrowKernel<false>(p, map);
  }
}
constexpr testing::Sm90KernelUnderTest kNarrow{mla::kSm90Threads, mla::SmemSm90::kBytes,
                                               mla::SmemSm90::kTokens, kMlaPathWgmmaNarrow,
                                               &NarrowBody};

// A plan whose tiles the narrow kernel takes (at most 16 rows).
WorkPlan NarrowPlan(const Batch& batch, int num_cu) {
  const WorkPlan plan = PlanForTest(batch, num_cu);
  EXPECT_LE(batch.num_heads / plan.head_fold * plan.tokens_per_tile, mla::sm90_narrow::kRows);
  return plan;
}

class NarrowKernelTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  bool fp8() const { return GetParam() == DType::kFp8; }
  std::string Name(const std::string& what) const { return (fp8() ? "fp8 " : "bf16 ") + what; }
};

INSTANTIATE_TEST_SUITE_P(MlaDecodeSm90NarrowEmuTest, NarrowKernelTest,
                         ::testing::Values(DType::kBf16, DType::kFp8),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(info.param == DType::kFp8 ? "Fp8" : "Bf16");
                         });

TEST_P(NarrowKernelTest, Heads16VarlenPage16) {
  // Lengths that end blocks mid-page; a request shorter than one kv block.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, dtype(), 16, {37, 100, 64, 5}, 1, 16);
  CheckSm90Case(kNarrow, sim::MakeDecodeCase(batch, 41, 0.7, 1.3), NarrowPlan(batch, 4),
                Name("H16 q1 page16 cu4 (scales)"));
}

TEST_P(NarrowKernelTest, MediumVarlenBatchPage64) {
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, dtype(), 16, {150, 9, 64, 200, 33, 97, 1, 128}, 1, 64);
  CheckSm90Case(kNarrow, sim::MakeDecodeCase(batch, 42), NarrowPlan(batch, 8),
                Name("H16 q1 batch8 page64 cu8"));
}

TEST_P(NarrowKernelTest, ManySplitsTakeTheManyPiecesReduce) {
  // One long request over 6 CUs: every tile is split into >3 pieces (partials + reduce), so
  // items begin and end inside kv blocks (cp.async for those, zeros past the end).
  const Batch batch = MakeUniformBatch(Arch::kSm90, dtype(), 16, 1, 1, 200, 1);
  const WorkPlan plan = NarrowPlan(batch, 6);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], 3);
  CheckSm90Case(kNarrow, sim::MakeDecodeCase(batch, 43), plan, Name("H16 q1 cu6 (many pieces)"));
}

TEST_P(NarrowKernelTest, ManyItemsOnOneBlockKeepTheSlotsInStep) {
  // One CU walks six items of 1 to 9 kv blocks: odd block counts start the next item in the
  // other slot, Q reloads over the previous item's scratch rows.
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, dtype(), 16, {560, 64, 129, 1, 300, 65}, 1, fp8() ? 1 : 16);
  const WorkPlan plan = NarrowPlan(batch, 1);
  ASSERT_EQ(plan.num_works(), 6);
  CheckSm90Case(kNarrow, sim::MakeDecodeCase(batch, 44, 0.6, 1.5), plan,
                Name("H16 q1 6 items cu1"));
}

// A late token's logits jump past the lazy reference's slack mid-item (fp8: in one consumer's
// turn, so the two consumers' references differ when they merge).
TEST_P(NarrowKernelTest, MaxJumpsMidItem) {
  const sim::DecodeCase c = testing::MaxJumpsMidItem(dtype(), 16, 63);
  CheckSm90Case(kNarrow, c, NarrowPlan(c.batch, 1), Name("H16 q1 ctx420 token 300 x8 cu1"));
}

TEST_P(NarrowKernelTest, SparsePerTokenWithEmptyRows) {
  // Sparse per-token layout (page size 1), no causal mask, a graph-padded row with no kv.
  Batch batch = MakeVarlenBatch(Arch::kSm90, dtype(), 16, {1, 70, 0, 33}, 1, 1);
  batch.sparse_topk = 2048;
  CheckSm90Case(kNarrow, sim::MakeDecodeCase(batch, 45), NarrowPlan(batch, 3),
                Name("sparse H16 cu3"));
}

TEST_P(NarrowKernelTest, StatusWordReportsABadPage) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, dtype(), 16, {40, 200}, 1, 16);
  testing::ExpectBadPageReported(kNarrow, batch, 46, 7, -3, NarrowPlan(batch, 1));  // page 5 of 1
}

TEST_P(NarrowKernelTest, EmptyItemsKeepTheQTileInStep) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, dtype(), 16, {150, 70}, 1, 64);
  testing::ExpectEmptyItemsKeepTheQTileInStep(kNarrow, sim::MakeDecodeCase(batch, 48),
                                              NarrowPlan(batch, 1));
}

TEST_P(NarrowKernelTest, CpRoundRobinW2I16) {
  testing::CheckSm90CpRanks(kNarrow, 16, 1, {2, 75, 40}, 2, 16, 103, dtype());
}

// bf16 stays bf16 on this kernel (no f16 widening): a V value beyond f16's range is computed
// with, not reported. (Q's dim 7 is zeroed so that the value moves O, not the logits, whose
// fp32 sums would then be too large for the LSE gate on any summation order.)
TEST(MlaDecodeSm90NarrowEmuTest, Bf16BeyondF16RangeIsExact) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 70, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 47);
  for (int h = 0; h < batch.num_heads; ++h) c.q[h * kHeadDimQk + 7] = 0.0f;
  // Tokens 5 and 40 of the request's first page, dim 7.
  const int64_t row = int64_t{c.kv_indices[0]} * batch.page_size;
  c.kv_cache[(row + 5) * kHeadDimQk + 7] = 70144.0f;
  c.kv_cache[(row + 40) * kHeadDimQk + 7] = -98304.0f;
  CheckSm90Case(kNarrow, c, NarrowPlan(batch, 1), "bf16 H16 q1 value beyond f16");
}

}  // namespace
}  // namespace mlaps
