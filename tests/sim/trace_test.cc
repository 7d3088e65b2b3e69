// Trace text format: a golden string, round trips through the parser, parse errors, diffs.
#include "sim/trace.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/work_plan.h"

namespace mlaps::sim {
namespace {

using ::testing::HasSubstr;

// batch_idx, partial_qo_loc, qo_start, qo_end, kv_start, kv_end, kv_offset, pad
WorkPlan SmallPlan() {
  WorkPlan plan;
  plan.num_cu = 3;
  plan.work_indptr = {0, 2, 2, 3};
  plan.work_info = {
      {0, -1, 0, 2, 0, 4, 0, 0},
      {1, 0, 2, 4, 4, 6, 5, 0},
      {1, 2, 2, 4, 6, 8, 0, 0},
  };
  return plan;
}

TEST(TraceTest, GoldenFormat) {
  EXPECT_EQ(FormatTraceItem(3, {17, {5, -1, 10, 12, 40, 48, 3, 0}}),
            "cu 3: w17 b=5 qo=[10,12) kv=[40,48) off=3 part=-1");
  absl::StatusOr<Trace> trace = TraceOfPlan(SmallPlan());
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(FormatTrace(*trace),
            "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1\n"
            "cu 0: w1 b=1 qo=[2,4) kv=[4,6) off=5 part=0\n"
            "cu 2: w2 b=1 qo=[2,4) kv=[6,8) off=0 part=2\n");
  EXPECT_EQ(FormatTraceItem(0, {1, {1, 0, 2, 4, 4, 6, 5, 7}}),
            "cu 0: w1 b=1 qo=[2,4) kv=[4,6) off=5 part=0 pad=7");
}

TEST(TraceTest, PlannerTraceRoundTrips) {
  const Batch batch = MakeVarlenBatch(Arch::kGfx950, DType::kFp8, 32, {300, 40, 1000}, 3, 16);
  PlanOptions options;
  options.num_cu = 7;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Trace> trace = TraceOfPlan(*plan);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::string text = FormatTrace(*trace);
  absl::StatusOr<Trace> parsed = ParseTrace(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(DiffTraces(*trace, *parsed), "");
  EXPECT_EQ(FormatTrace(*parsed), text);
  int items = 0;
  for (const auto& cu : parsed->cus) items += cu.size();
  EXPECT_EQ(items, plan->num_works());
}

TEST(TraceTest, ParserAcceptsCommentsBlankLinesPadAndInterleavedCus) {
  absl::StatusOr<Trace> parsed = ParseTrace(
      "# from the GPU\n"
      "cu 2: w2 b=1 qo=[2,4) kv=[6,8) off=0 part=2\r\n"
      "\n"
      "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1\n"
      "cu 0: w1 b=1 qo=[2,4) kv=[4,6) off=5 part=0\n"
      "cu 3: w9 b=-7 qo=[1,1) kv=[0,0) off=-2 part=-1 pad=4");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->cus.size(), 4u);
  absl::StatusOr<Trace> want = TraceOfPlan(SmallPlan());
  want->cus.push_back({{9, {-7, -1, 1, 1, 0, 0, -2, 4}}});
  EXPECT_EQ(DiffTraces(*want, *parsed), "");
}

TEST(TraceTest, ParseErrorsNameTheLine) {
  for (const char* bad : {
           "cu 0 w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1",             // missing ':'
           "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0",                    // missing part
           "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1 x",          // trailing text
           "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-",             // no digits
           "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=99999999999 part=-1",  // not int32
           "cu -1: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1",           // negative CU
           "cu 0: w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1 pad=",
           "cu 0:  w0 b=0 qo=[0,2) kv=[0,4) off=0 part=-1",  // two spaces
       }) {
    absl::StatusOr<Trace> parsed = ParseTrace(absl::StrCat("# ok\n", bad, "\n"));
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("line 2")) << bad;
  }
}

TEST(TraceTest, DiffReportsChangedMissingAndExtraItems) {
  const Trace want = *TraceOfPlan(SmallPlan());
  Trace got = want;
  got.cus[0][1].info.kv_offset = 4;
  got.cus[2].clear();
  got.cus[1].push_back({5, {0, -1, 0, 1, 0, 1, 0, 0}});
  const std::string diff = DiffTraces(want, got);
  EXPECT_THAT(diff, HasSubstr("cu 0 item 1: expected \"cu 0: w1 b=1 qo=[2,4) kv=[4,6) off=5"));
  EXPECT_THAT(diff, HasSubstr("off=4 part=0\""));
  EXPECT_THAT(diff, HasSubstr("cu 1 item 0: unexpected"));
  EXPECT_THAT(diff, HasSubstr("cu 2 item 0: expected \"cu 2: w2"));
  EXPECT_THAT(diff, HasSubstr("missing"));
  // Trailing idle CUs do not count.
  Trace padded = want;
  padded.cus.resize(10);
  EXPECT_EQ(DiffTraces(want, padded), "");
}

TEST(TraceTest, TraceOfPlanRejectsBadWorkIndptr) {
  WorkPlan plan = SmallPlan();
  plan.work_indptr = {0, 2, 1, 3};
  EXPECT_EQ(TraceOfPlan(plan).status().code(), absl::StatusCode::kInvalidArgument);
  plan.work_indptr = {0, 2, 3};
  EXPECT_EQ(TraceOfPlan(plan).status().code(), absl::StatusCode::kInvalidArgument);
  plan.work_indptr = {0, 1, 1, 2};
  EXPECT_EQ(TraceOfPlan(plan).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaps::sim
