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
  int64_t SharedLimit() const { return kSharedLimit; }
  int64_t SharedBytes(const GpuPlannerParams& p) const {
    return gpu_planner::MakeSmemLayout(p).bytes;
  }
  bool Fits(const Batch&, const Capacities&) const { return true; }
  GpuPlannerParams Params(const Batch& batch, const Resolved& resolved, const Capacities& caps,
                          int max_qlen, int walk) {
    slab_ = SlabFor(caps);
    outputs_.assign(slab_.used_words + 4, kSentinel);  // + 4: room to align work_info
    return ParamsFor(batch, resolved, caps, max_qlen, walk, inputs_.data(), Aligned(), slab_);
  }
  void Upload(const Batch& batch) { inputs_ = InputSlab(batch); }
  // Sentinel-fills the outputs, runs the kernel's one block as LaunchGpuPlanner would.
  void Run(const GpuPlannerParams& p) {
    ASSERT_EQ(p.qo_indptr, inputs_.data()) << "Params and Upload must see the same batch";
    std::fill(outputs_.begin(), outputs_.end(), kSentinel);
    const gpu_planner::KernelConsts consts =
        gpu_planner::MakeConsts(p, gpu_planner::LaunchThreads(p));
    ASSERT_LE(consts.smem.bytes, kSharedLimit);
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
