// The GPU planner kernel (kernels/planner/planner_kernel_device.h) run on the CPU through
// tests/kernels/emu (fibers for threads; warp shuffles, ballots, block barriers and
// __syncthreads_or emulated), against the host planner, with the GPU test's checks
// (planner_kernel_testing.h) on fewer random batches: every output word and the status the
// same as PlanDecodeInto's in each walk mode (parallel rounds, warp windows, one thread), the
// host's first input error and too-small buffer with outputs untouched, nothing written past
// a capacity. So the kernel's walk and layout are tested on every CI run, without a GPU.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/planner/planner_kernel.h"
#include "metadata/batch.h"
#include "tests/kernels/planner/planner_kernel_testing.h"

// Last, in this order: the emulation defines the device dialect (its macros must not reach
// the library headers above), then the device code compiles on top of it.
// clang-format off
#include "tests/kernels/emu/hip_host_emulation.h"
#include "kernels/planner/planner_kernel_device.h"
// clang-format on

namespace mlaps {
namespace {

using namespace ::mlaps::testing;  // NOLINT: the shared checks and their vocabulary

// Host memory for one plan at a time, laid out as the GPU test's slabs, and the kernel run in
// the emulation. The Runner of planner_kernel_testing.h.
class EmulatedPlanner {
 public:
  // The shared memory the test lets one emulated launch have (H200's opt-in limit less the
  // kernel's static part, as the GPU test's device limit).
  static constexpr int64_t kSharedLimit = 227 * 1024 - gpu_planner::kStaticSmemBound;

  const char* Name() const { return "emulated"; }
  int64_t SharedLimit() const { return shared_limit_; }
  // A smaller device (the launch fits the jump tables to it).
  void set_shared_limit(int64_t limit) { shared_limit_ = limit; }
  int64_t SharedBytes(const GpuPlannerParams& p) const {
    GpuPlannerParams least = p;
    least.jump_positions = 0;
    return gpu_planner::MakeSmemLayout(least).bytes;
  }
  bool Fits(const Batch&, const Capacities&) const { return true; }
  GpuPlannerParams Params(const Batch& batch, const Resolved& resolved, const Capacities& caps,
                          int max_qlen, int walk) {
    slab_ = SlabFor(caps);
    outputs_.assign(slab_.used_words + 4, kSentinel);  // + 4: room to align work_info
    return ParamsFor(batch, resolved, caps, max_qlen, walk, inputs_.data(), Aligned(), slab_);
  }
  void Upload(const Batch& batch) { inputs_ = InputSlab(batch); }
  // Sentinel-fills the outputs, runs the kernel's one block as LaunchGpuPlanner would (the
  // jump tables shrunk to the shared memory).
  void Run(const GpuPlannerParams& requested) {
    const GpuPlannerParams p = gpu_planner::FitJumpTables(requested, shared_limit_);
    ASSERT_EQ(p.qo_indptr, inputs_.data()) << "Params and Upload must see the same batch";
    std::fill(outputs_.begin(), outputs_.end(), kSentinel);
    const gpu_planner::KernelConsts consts =
        gpu_planner::MakeConsts(p, gpu_planner::LaunchThreads(p));
    ASSERT_LE(consts.smem.bytes, shared_limit_);
    const std::string error =
        mlaps_emu::Launch(dim3(1), dim3(gpu_planner::LaunchThreads(p)), consts.smem.bytes,
                          [&] { gpu_planner::GpuPlanKernel(p, consts); });
    ASSERT_EQ(error, "");
  }
  const int32_t* Buffer(int i) { return Aligned() + slab_.offsets[i]; }
  GpuPlanStatus Status() {
    GpuPlanStatus s;
    std::memcpy(&s, Aligned() + slab_.status_offset, sizeof(s));
    return s;
  }
  bool OutputsUntouched() {
    const int32_t* out = Aligned();
    return std::all_of(out, out + slab_.status_offset, [](int32_t w) { return w == kSentinel; });
  }

 private:
  // The slab's base, 16-byte aligned (work_info rows are written as 16-byte stores).
  int32_t* Aligned() {
    const uintptr_t at = reinterpret_cast<uintptr_t>(outputs_.data());
    return outputs_.data() + ((16 - at % 16) % 16) / 4;
  }

  int64_t shared_limit_ = kSharedLimit;
  std::vector<int32_t> inputs_;
  std::vector<int32_t> outputs_;
  SlabLayout slab_;
};

TEST(GpuPlannerEmuTest, RepresentativeCasesMatchHost) {
  EmulatedPlanner runner;
  CheckRepresentativeCases(runner);
}

TEST(GpuPlannerEmuTest, RandomBatchesMatchHost) {
  EmulatedPlanner runner;
  CheckRandomBatches(runner, 300, 150, /*big_every=*/0);
}

TEST(GpuPlannerEmuTest, InvalidBatchesReportTheHostsFirstErrorAndWriteNothing) {
  EmulatedPlanner runner;
  CheckInvalidBatches(runner, 300, 100);
}

// A device whose shared memory leaves less room than the default jump tables take: the
// launch shrinks them to the room left (none when there is none) and the plan stays the
// host's, in every walk mode.
TEST(GpuPlannerEmuTest, JumpTablesShrinkToTheSharedMemoryLeft) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 64, 1, 4096, 64);
  absl::StatusOr<Resolved> r = Resolve(batch, PlanOptions{});
  ASSERT_TRUE(r.ok());
  EmulatedPlanner runner;
  const GpuPlannerParams p =
      runner.Params(batch, *r, FromPlanCapacity(r->capacity), batch.max_qlen(), 0);
  ASSERT_EQ(p.jump_positions, kDefaultJumpPositions);
  const int64_t least = runner.SharedBytes(p), full = gpu_planner::MakeSmemLayout(p).bytes;
  ASSERT_EQ(full, least + 4 * kDefaultJumpPositions);
  // Room for 6000 positions (the batch's cost axis has 64 x 65 + 1 = 4161): they still walk.
  const GpuPlannerParams fitted = gpu_planner::FitJumpTables(p, least + 4 * 6000 + 7);
  EXPECT_EQ(fitted.jump_positions, 6000);
  EXPECT_EQ(gpu_planner::MakeSmemLayout(fitted).bytes, least + 4 * 6000);
  EXPECT_EQ(gpu_planner::FitJumpTables(p, least + 7).jump_positions, 0);
  EXPECT_EQ(gpu_planner::FitJumpTables(p, full).jump_positions, kDefaultJumpPositions);
  for (int64_t limit : {least + 4 * 6000, least + 4 * 2000, least}) {
    runner.set_shared_limit(limit);
    MatchStats stats;
    EXPECT_EQ(PlanAndCompare(runner, batch, PlanOptions{}, &stats), "") << limit - least;
    EXPECT_EQ(stats.identical, 1);
    EXPECT_EQ(stats.jumped, limit == least + 4 * 6000 ? 1 : 0) << limit - least;
  }
}

TEST(GpuPlannerEmuTest, QlenAboveTheConfiguredMaximumIsReported) {
  EmulatedPlanner runner;
  CheckQlenAboveTheConfiguredMaximum(runner);
}

TEST(GpuPlannerEmuTest, SmallBuffersReportTheHostsBufferAndWriteNothing) {
  EmulatedPlanner runner;
  CheckSmallBuffers(runner, 200, 50);
}

}  // namespace
}  // namespace mlaps
