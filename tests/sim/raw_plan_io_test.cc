// Raw int32 dumps (as numpy's tofile writes them) read back into the plan and batch, and the
// checker runs on them like on text plans.
#include "sim/raw_plan_io.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "gtest/gtest.h"
#include "metadata/planner.h"
#include "sim/plan_checker.h"

namespace mlaps::sim {
namespace {

void Dump(const std::string& path, const int32_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(data[i]);
    const char b[4] = {char(u & 0xff), char(u >> 8 & 0xff), char(u >> 16 & 0xff),
                       char(u >> 24 & 0xff)};
    out.write(b, 4);
  }
}
void Dump(const std::string& path, const std::vector<int32_t>& v) {
  Dump(path, v.data(), v.size());
}

TEST(RawPlanIo, RoundTripsAndChecks) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, {700, 90, 2000}, 2, 16);
  PlanOptions o;
  o.num_cu = 7;
  WorkPlan plan = *PlanDecode(batch, o);
  Dump(dir + "/work_indptr.bin", plan.work_indptr);
  // An engine's work_info buffer is capacity-sized: pad it with garbage past the plan.
  std::vector<int32_t> info(8 * plan.num_works() + 16, -77);
  std::memcpy(info.data(), plan.work_info.data(), plan.num_works() * sizeof(WorkInfo));
  Dump(dir + "/work_info_set.bin", info);
  Dump(dir + "/reduce_indptr.bin", plan.reduce_indptr);
  Dump(dir + "/reduce_final_map.bin", plan.reduce_final_map);
  Dump(dir + "/reduce_partial_map.bin", plan.reduce_partial_map);
  Dump(dir + "/qo_indptr.bin", batch.qo_indptr);
  Dump(dir + "/kv_indptr.bin", batch.kv_indptr);
  Dump(dir + "/kv_last_page_lens.bin", batch.kv_last_page_lens);

  absl::StatusOr<WorkPlan> raw = ReadRawPlan(dir, plan.head_fold);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->num_cu, 7);
  EXPECT_EQ(raw->num_works(), plan.num_works());
  EXPECT_EQ(raw->reduce_partial_map, plan.reduce_partial_map);
  Batch b2 = batch;
  b2.qo_indptr.clear();
  ASSERT_TRUE(ReadRawBatch(dir, &b2).ok());
  EXPECT_EQ(b2.qo_indptr, batch.qo_indptr);
  EXPECT_EQ(FormatViolations(CheckPlan(b2, *raw)), "");

  // A corrupted dump is caught.
  info[8 * 1 + 4] += 1;  // work 1's kv_start
  Dump(dir + "/work_info_set.bin", info);
  raw = ReadRawPlan(dir, plan.head_fold);
  ASSERT_TRUE(raw.ok());
  EXPECT_FALSE(CheckPlan(b2, *raw).empty());
}

TEST(RawPlanIo, Errors) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(ReadInt32File(dir + "/missing.bin").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir + "/odd.bin") << "abc";
  EXPECT_EQ(ReadInt32File(dir + "/odd.bin").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaps::sim
