// The numeric executor beyond the matrix: broken plans must fail the comparison (the gates
// have teeth), split-heavy and unsplit plans agree, rows without kv, sparse and CP masks,
// online-softmax block sizes, and input errors.
#include "sim/executor.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/work_plan.h"
#include "sim/decode_case.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"

namespace mlaps::sim {
namespace {

using ::testing::HasSubstr;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

WorkPlan Plan(const Batch& batch, int num_cu, int fixed_overhead = -1) {
  PlanOptions options;
  options.num_cu = num_cu;
  options.fixed_overhead = fixed_overhead;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

// Executes `plan` and compares with the reference under the batch's gates.
Comparison RunAndCompare(const DecodeCase& c, const WorkPlan& plan,
                         const ExecutorOptions& options = {}) {
  absl::StatusOr<ExecutorOutput> got = ExecutePlan(c.batch, plan, c.Inputs(), options);
  EXPECT_TRUE(got.ok()) << got.status();
  absl::StatusOr<ReferenceOutput> want = ReferenceDecode(c.batch, c.Inputs());
  EXPECT_TRUE(want.ok()) << want.status();
  if (!got.ok() || !want.ok()) return Comparison{};
  absl::StatusOr<Comparison> cmp =
      CompareOutputs(got->o, got->lse, want->o, want->lse, GatesFor(c.batch.q_dtype));
  EXPECT_TRUE(cmp.ok()) << cmp.status();
  return cmp.ok() ? *cmp : Comparison{};
}

bool HasDefect(const std::vector<Violation>& violations, Defect defect) {
  for (const Violation& v : violations) {
    if (v.defect == defect) return true;
  }
  return false;
}

// MTP qlen 4, varlen kv, bf16, 16 heads.
DecodeCase MtpCase() {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, /*num_heads=*/16,
                                      /*kv_lens=*/{150, 97, 230}, /*qlen=*/4, /*page_size=*/1);
  return MakeDecodeCase(batch, /*seed=*/7);
}

TEST(ExecutorTeethTest, SoundPlansPass) {
  const DecodeCase c = MtpCase();
  for (int num_cu : {1, 5}) {
    const WorkPlan plan = Plan(c.batch, num_cu, /*fixed_overhead=*/1);
    ASSERT_TRUE(CheckPlan(c.batch, plan).empty());
    const Comparison cmp = RunAndCompare(c, plan);
    EXPECT_TRUE(cmp.passed) << cmp.Summary();
  }
}

// kv_offset of a final item claims 3 more kv tokens after the request's end: the rebuilt
// mask lets tokens 0..2 see future positions.
TEST(ExecutorTeethTest, WrongKvOffsetOnFinalItemFails) {
  const DecodeCase c = MtpCase();
  WorkPlan plan = Plan(c.batch, /*num_cu=*/1);
  ASSERT_EQ(plan.num_reduce_tiles(), 0);
  WorkInfo& w = plan.work_info[1];
  ASSERT_EQ(w.kv_offset, 0);
  w.kv_offset = 3;
  EXPECT_TRUE(HasDefect(CheckPlan(c.batch, plan), Defect::kKvOffset));
  const Comparison cmp = RunAndCompare(c, plan);
  std::printf("[teeth] %s\n", cmp.Summary().c_str());
  EXPECT_FALSE(cmp.passed) << cmp.Summary();
  EXPECT_GT(cmp.num_failing, 0);
}

// A non-final piece of a split tile claims to end the request (kv_offset 0): its earlier
// tokens lose the piece's last positions.
TEST(ExecutorTeethTest, WrongKvOffsetOnSplitPieceFails) {
  const DecodeCase c = MtpCase();
  WorkPlan plan = Plan(c.batch, /*num_cu=*/5, /*fixed_overhead=*/1);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  WorkInfo* planted = nullptr;
  for (WorkInfo& w : plan.work_info) {
    if (w.partial_qo_loc != kNoPartial && w.kv_offset > 0) {
      planted = &w;
      break;
    }
  }
  ASSERT_NE(planted, nullptr);
  planted->kv_offset = 0;
  EXPECT_TRUE(HasDefect(CheckPlan(c.batch, plan), Defect::kKvOffset));
  const Comparison cmp = RunAndCompare(c, plan);
  std::printf("[teeth] %s\n", cmp.Summary().c_str());
  EXPECT_FALSE(cmp.passed) << cmp.Summary();
}

// Dropping one item leaves kv uncovered.
TEST(ExecutorTeethTest, DroppedItemFails) {
  const DecodeCase c = MtpCase();
  WorkPlan plan = Plan(c.batch, /*num_cu=*/5, /*fixed_overhead=*/1);
  ASSERT_GT(plan.num_works(), 2);
  plan.work_info.erase(plan.work_info.begin() + 1);
  for (int cu = 0; cu < plan.num_cu; ++cu) {
    if (plan.work_indptr[cu + 1] > 1) --plan.work_indptr[cu + 1];
  }
  EXPECT_TRUE(HasDefect(CheckPlan(c.batch, plan), Defect::kUncovered));
  const Comparison cmp = RunAndCompare(c, plan);
  std::printf("[teeth] %s\n", cmp.Summary().c_str());
  EXPECT_FALSE(cmp.passed) << cmp.Summary();
}

TEST(ExecutorTest, SplitHeavyAndUnsplitPlansAgree) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, /*num_heads=*/32,
                                      /*kv_lens=*/{300, 170, 411}, /*qlen=*/3,
                                      /*page_size=*/16);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/11);
  const WorkPlan unsplit = Plan(batch, /*num_cu=*/1);
  const WorkPlan split = Plan(batch, /*num_cu=*/16, /*fixed_overhead=*/1);
  ASSERT_EQ(unsplit.num_reduce_tiles(), 0);
  ASSERT_GT(split.num_reduce_tiles(), 2);
  ASSERT_TRUE(CheckPlan(batch, split).empty());
  int most_pieces = 0;
  for (int k = 0; k < split.num_reduce_tiles(); ++k) {
    most_pieces = std::max(most_pieces, split.reduce_indptr[k + 1] - split.reduce_indptr[k]);
  }
  EXPECT_GE(most_pieces, 3);

  absl::StatusOr<ExecutorOutput> a = ExecutePlan(batch, unsplit, c.Inputs());
  absl::StatusOr<ExecutorOutput> b = ExecutePlan(batch, split, c.Inputs());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->stats.partial_items, 0);
  EXPECT_GT(b->stats.partial_items, 0);
  absl::StatusOr<Comparison> cmp =
      CompareOutputs(a->o, a->lse, ToDouble(b->o), ToDouble(b->lse), GatesFor(DType::kBf16));
  ASSERT_TRUE(cmp.ok());
  EXPECT_TRUE(cmp->passed) << cmp->Summary();
  EXPECT_LT(cmp->lse_max_abs_err, 1e-5);
  EXPECT_TRUE(RunAndCompare(c, split).passed);
}

TEST(ExecutorTest, KvBlockSizesAgree) {
  const DecodeCase c = MtpCase();
  const WorkPlan plan = Plan(c.batch, /*num_cu=*/5, /*fixed_overhead=*/1);
  for (int block : {1, 7, 64, 1 << 30}) {
    ExecutorOptions options;
    options.kv_block = block;
    const Comparison cmp = RunAndCompare(c, plan, options);
    EXPECT_TRUE(cmp.passed) << "kv_block " << block << ": " << cmp.Summary();
  }
}

// A non-causal batch whose middle request has no kv: its rows keep O = 0, LSE = -inf, in
// the executor and in the reference; with head folding each head group's rows do.
TEST(ExecutorTest, EmptyKvRowsAreZeroWithNegInfLse) {
  for (int heads : {64, 128}) {
    Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, heads, /*kv_lens=*/{120, 0, 77},
                                  /*qlen=*/2, /*page_size=*/16);
    batch.causal = false;
    const DecodeCase c = MakeDecodeCase(batch, /*seed=*/3);
    const WorkPlan plan = Plan(batch, /*num_cu=*/6);
    ASSERT_TRUE(CheckPlan(batch, plan).empty()) << FormatViolations(CheckPlan(batch, plan));
    absl::StatusOr<ExecutorOutput> got = ExecutePlan(batch, plan, c.Inputs());
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<ReferenceOutput> want = ReferenceDecode(batch, c.Inputs());
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->stats.unwritten_tokens, 2 * plan.head_fold);
    for (int64_t row = 2 * heads; row < 4 * heads; ++row) {  // request 1's q tokens 2, 3
      EXPECT_EQ(got->lse[row], -std::numeric_limits<float>::infinity());
      EXPECT_EQ(want->lse[row], kNegInf);
      for (int d = 0; d < kHeadDimV; ++d) {
        ASSERT_EQ(got->o[row * kHeadDimV + d], 0.0f);
        ASSERT_EQ(want->o[row * kHeadDimV + d], 0.0);
      }
    }
    absl::StatusOr<Comparison> cmp =
        CompareOutputs(got->o, got->lse, want->o, want->lse, GatesFor(DType::kBf16));
    ASSERT_TRUE(cmp.ok());
    EXPECT_TRUE(cmp->passed) << cmp->Summary();
  }
}

// Sparse per-token batch: one q token per sequence, no causal trim, graph-padded rows of 0
// entries give O = 0 / LSE = -inf.
TEST(ExecutorTest, SparsePerTokenBatch) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, /*num_heads=*/64,
                                /*kv_lens=*/{1, 130, 0, 64, 250}, /*qlen=*/1, /*page_size=*/1);
  batch.sparse_topk = 2048;
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/5, /*q_scale=*/0.7, /*kv_scale=*/1.3);
  const WorkPlan plan = Plan(batch, /*num_cu=*/7, /*fixed_overhead=*/1);
  ASSERT_TRUE(CheckPlan(batch, plan).empty()) << FormatViolations(CheckPlan(batch, plan));
  const Comparison cmp = RunAndCompare(c, plan);
  EXPECT_TRUE(cmp.passed) << cmp.Summary();
}

// CP round-robin with W = 2, interleave 64: rank 1 holds global positions 64 .. of a
// request of global length 65 (one token, position 64) and 200 (positions 64..127).
// With qlen 4, token i sees global positions < L - 4 + i + 1: request 0's tokens 0..2 see
// nothing on this rank.
TEST(ExecutorTest, CpRoundRobinMasksByGlobalPosition) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, /*num_heads=*/16,
                                /*kv_lens=*/{1, 64}, /*qlen=*/4, /*page_size=*/1);
  batch.cp_round_robin = true;
  CpGlobalPositions cp;
  cp.global_position = [](int, int64_t j) { return (j / 64) * 128 + 64 + j % 64; };
  cp.global_kv_len = {65, 200};
  DecodeCase c = MakeDecodeCase(batch, /*seed=*/9);
  DecodeInputs inputs = c.Inputs();
  inputs.cp = &cp;
  const WorkPlan plan = Plan(batch, /*num_cu=*/3, /*fixed_overhead=*/1);
  absl::StatusOr<ExecutorOutput> got = ExecutePlan(batch, plan, inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<ReferenceOutput> want = ReferenceDecode(batch, inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int64_t row = 0; row < 3 * 16; ++row) EXPECT_EQ(want->lse[row], kNegInf) << row;
  for (int64_t row = 3 * 16; row < 8 * 16; ++row) EXPECT_GT(want->lse[row], kNegInf) << row;
  absl::StatusOr<Comparison> cmp =
      CompareOutputs(got->o, got->lse, want->o, want->lse, GatesFor(DType::kBf16));
  ASSERT_TRUE(cmp.ok());
  EXPECT_TRUE(cmp->passed) << cmp->Summary();

  inputs.cp = nullptr;
  absl::StatusOr<ExecutorOutput> missing = ExecutePlan(batch, plan, inputs);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("cp"));
}

TEST(ExecutorTest, RefusesOutOfBoundsPlans) {
  const DecodeCase c = MtpCase();
  const WorkPlan good = Plan(c.batch, /*num_cu=*/5, /*fixed_overhead=*/1);
  struct Planted {
    void (*plant)(WorkPlan*);
    const char* field;
  };
  const Planted cases[] = {
      {[](WorkPlan* p) { p->work_info[0].batch_idx = 99; }, "batch_idx"},
      {[](WorkPlan* p) { p->work_info[0].qo_end += 100; }, "qo_start/qo_end"},
      {[](WorkPlan* p) { p->work_info[0].kv_end += 1000; }, "kv_start/kv_end"},
      {[](WorkPlan* p) { p->work_info[0].partial_qo_loc = -2; }, "partial_qo_loc"},
      {[](WorkPlan* p) { p->work_indptr.pop_back(); }, "work_indptr"},
      {[](WorkPlan* p) { p->head_fold = 3; }, "head_fold"},
      {[](WorkPlan* p) { p->reduce_partial_map[0] = -5; }, "reduce_partial_map[0]"},
      {[](WorkPlan* p) { p->reduce_final_map[1] = 1 << 20; }, "reduce_final_map[0]"},
      {[](WorkPlan* p) { p->reduce_partial_map[0] = 1 << 30; }, "reduce_partial_map[0]"},
      {[](WorkPlan* p) {
         for (WorkInfo& w : p->work_info) {
           if (w.partial_qo_loc >= 0) w.partial_qo_loc = 1 << 30;
         }
       },
       "partial_qo_loc"},
  };
  for (const Planted& planted : cases) {
    WorkPlan plan = good;
    planted.plant(&plan);
    absl::StatusOr<ExecutorOutput> got = ExecutePlan(c.batch, plan, c.Inputs());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << planted.field;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(planted.field));
  }
  ExecutorOptions options;
  options.kv_block = 0;
  EXPECT_EQ(ExecutePlan(c.batch, good, c.Inputs(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CompareOutputsTest, GatesAndMeasures) {
  const std::vector<float> o = {1.0f, 2.0f, 0.0f, -1.0f};
  const std::vector<float> lse = {0.5f, -std::numeric_limits<float>::infinity()};
  const std::vector<double> lse_ref = {0.5, kNegInf};
  absl::StatusOr<Comparison> same =
      CompareOutputs(o, lse, {1.0, 2.0, 0.0, -1.0}, lse_ref, GatesFor(DType::kBf16));
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->passed) << same->Summary();
  EXPECT_EQ(same->cos_diff, 0.0);

  absl::StatusOr<Comparison> off =
      CompareOutputs(o, lse, {1.0, 2.1, 0.0, -1.0}, lse_ref, GatesFor(DType::kBf16));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->passed);
  EXPECT_EQ(off->num_failing, 1);
  EXPECT_EQ(off->worst_index, 1);
  EXPECT_NEAR(off->max_abs_err, 0.1, 1e-9);
  EXPECT_NEAR(off->cos_diff, 1 - 2 * (1 + 4.2 + 1) / (2 + 4 + 4.41 + 2), 1e-12);

  const std::vector<double> lse_mask = {0.5, 0.0};
  absl::StatusOr<Comparison> mask =
      CompareOutputs(o, lse, {1.0, 2.0, 0.0, -1.0}, lse_mask, GatesFor(DType::kBf16));
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(mask->lse_mask_mismatches, 1);
  EXPECT_FALSE(mask->passed);

  EXPECT_EQ(CompareOutputs(o, lse, {1.0}, lse_ref, GatesFor(DType::kFp8)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatesFor(DType::kFp8).max_cos_diff, 3e-2);
}

}  // namespace
}  // namespace mlaps::sim
