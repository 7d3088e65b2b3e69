// Every (arch, dtype, H, qlen) shape the registry supports, on small random batches with a
// fixed seed: plan -> checker -> executor equals the fp64 reference within docs/design.md's gates.
#include <random>

#include "gtest/gtest.h"
#include "metadata/planner.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"

namespace mlaps::sim {
namespace {

class EveryShape : public ::testing::TestWithParam<Arch> {};

TEST_P(EveryShape, ExecutorMatchesReference) {
  const Arch arch = GetParam();
  std::mt19937 rng(static_cast<int>(arch) * 7919 + 11);
  int ran = 0, unsupported = 0;
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    for (int heads : {16, 32, 48, 64, 128}) {
      for (int qlen = 1; qlen <= 8; ++qlen) {
        const int b = 1 + rng() % 2;
        std::vector<int> kv(b);
        for (int& k : kv) k = qlen + rng() % 90;
        const int page = 1 << (rng() % 5);
        Batch batch = MakeVarlenBatch(arch, dtype, heads, kv, qlen, page);
        PlanOptions options;
        options.num_cu = 1 + rng() % 12;
        options.policy = rng() % 2 ? PlanPolicy::kGreedyPayload : PlanPolicy::kLongestFirst;
        options.kv_granularity = 1 << (rng() % 5);
        absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
        if (plan.status().code() == absl::StatusCode::kNotFound) {
          ++unsupported;
          continue;
        }
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_EQ(FormatViolations(CheckPlan(batch, *plan)), "");
        const DecodeCase c = MakeDecodeCase(batch, rng(), 0.7, 1.3);
        absl::StatusOr<ExecutorOutput> out = ExecutePlan(batch, *plan, c.Inputs());
        ASSERT_TRUE(out.ok()) << out.status();
        absl::StatusOr<ReferenceOutput> ref = ReferenceDecode(batch, c.Inputs());
        ASSERT_TRUE(ref.ok()) << ref.status();
        absl::StatusOr<Comparison> cmp =
            CompareOutputs(out->o, out->lse, ref->o, ref->lse, GatesFor(dtype));
        ASSERT_TRUE(cmp.ok());
        EXPECT_TRUE(cmp->passed) << ArchName(arch) << " " << DTypeName(dtype) << " H=" << heads
                                 << " qlen=" << qlen << ": " << cmp->Summary();
        ++ran;
      }
    }
  }
  EXPECT_GT(ran, 20);
  std::printf("%s: %d shapes run, %d unsupported\n", std::string(ArchName(arch)).c_str(), ran,
              unsupported);
}

INSTANTIATE_TEST_SUITE_P(Archs, EveryShape,
                         ::testing::Values(Arch::kGfx942, Arch::kGfx950, Arch::kSm90));

}  // namespace
}  // namespace mlaps::sim
