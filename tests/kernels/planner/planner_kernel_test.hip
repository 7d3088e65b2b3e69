// The GPU planner (kernels/planner/planner_kernel.h) against the host planner (PlanDecodeInto):
// every output array byte for byte over representative and thousands of random batches, in each way
// the kernel can walk the CUs; the first input error and the first too-small buffer the host
// reports; outputs untouched on error and never written past a capacity (guard words); replay
// inside a graph. The checks are planner_kernel_testing.h's (the CPU emulation test runs them
// too, on fewer batches); this file owns the device memory.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/planner/planner_kernel.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "tests/kernels/planner/planner_kernel_testing.h"

namespace mlaps {
namespace {

using namespace ::mlaps::testing;  // NOLINT: the shared checks and their vocabulary

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

// Device memory for one plan at a time: the inputs in one slab, the six outputs (each with
// guard words after its capacity) and the status in another, so a run is one upload, one
// memset, one launch and one download. The Runner of planner_kernel_testing.h.
class GpuPlanner {
 public:
  static constexpr int64_t kMaxInputWords = 1 << 20;
  static constexpr int64_t kMaxOutputWords = 1 << 22;

  void SetUp() {
    ASSERT_HIP_OK(hipMalloc(&inputs_, kMaxInputWords * sizeof(int32_t)));
    ASSERT_HIP_OK(hipMalloc(&outputs_, kMaxOutputWords * sizeof(int32_t)));
    ASSERT_HIP_OK(hipStreamCreate(&stream_));
  }
  void TearDown() {
    if (inputs_) {
      ASSERT_HIP_OK(hipFree(inputs_));
    }
    if (outputs_) {
      ASSERT_HIP_OK(hipFree(outputs_));
    }
    if (stream_) {
      ASSERT_HIP_OK(hipStreamDestroy(stream_));
    }
  }

  const char* Name() const { return "gpu"; }
  int64_t SharedLimit() const { return GpuPlannerSharedLimit(0); }
  int64_t SharedBytes(const GpuPlannerParams& p) const {
    GpuPlannerParams least = p;  // the launch shrinks the jump tables to what is left
    least.jump_positions = 0;
    return GpuPlannerSharedBytes(least);
  }
  bool Fits(const Batch& batch, const Capacities& caps) const {
    return InputWords(batch) <= kMaxInputWords && SlabFor(caps).used_words <= kMaxOutputWords;
  }
  GpuPlannerParams Params(const Batch& batch, const Resolved& resolved, const Capacities& caps,
                          int max_qlen, int walk) {
    slab_ = SlabFor(caps);
    return ParamsFor(batch, resolved, caps, max_qlen, walk, inputs_, outputs_, slab_);
  }
  void Upload(const Batch& batch) {
    const std::vector<int32_t> in = InputSlab(batch);
    ASSERT_HIP_OK(hipMemcpyAsync(inputs_, in.data(), in.size() * sizeof(int32_t),
                                 hipMemcpyHostToDevice, stream_));
  }
  // Sentinel-fills the outputs, launches, downloads everything.
  void Fill() {
    ASSERT_HIP_OK(hipMemsetAsync(outputs_, 0x5A, slab_.used_words * sizeof(int32_t), stream_));
  }
  void Run(const GpuPlannerParams& p) {
    Fill();
    ASSERT_EQ(LaunchGpuPlanner(p, stream_), hipSuccess) << GpuPlannerParamsError(p);
    Download();
  }
  void Download() {
    host_.resize(slab_.used_words);
    ASSERT_HIP_OK(hipMemcpyAsync(host_.data(), outputs_, slab_.used_words * sizeof(int32_t),
                                 hipMemcpyDeviceToHost, stream_));
    ASSERT_HIP_OK(hipStreamSynchronize(stream_));
  }

  const int32_t* Buffer(int i) const { return host_.data() + slab_.offsets[i]; }
  GpuPlanStatus Status() const {
    GpuPlanStatus s;
    std::memcpy(&s, host_.data() + slab_.status_offset, sizeof(s));
    return s;
  }
  bool OutputsUntouched() const {
    for (int64_t i = 0; i < slab_.status_offset; ++i) {
      if (host_[i] != kSentinel) return false;
    }
    return true;
  }
  hipStream_t stream() const { return stream_; }

 private:
  int32_t* inputs_ = nullptr;
  int32_t* outputs_ = nullptr;
  hipStream_t stream_ = nullptr;
  SlabLayout slab_;
  std::vector<int32_t> host_;
};

class GpuPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override { gpu_.SetUp(); }
  void TearDown() override { gpu_.TearDown(); }
  GpuPlanner gpu_;
};

TEST_F(GpuPlannerTest, RepresentativeCasesMatchHost) { CheckRepresentativeCases(gpu_); }

TEST_F(GpuPlannerTest, RandomBatchesMatchHost) { CheckRandomBatches(gpu_, 5000, 3000); }

TEST_F(GpuPlannerTest, InvalidBatchesReportTheHostsFirstErrorAndWriteNothing) {
  CheckInvalidBatches(gpu_, 1500, 600);
}

TEST_F(GpuPlannerTest, QlenAboveTheConfiguredMaximumIsReported) {
  CheckQlenAboveTheConfiguredMaximum(gpu_);
}

TEST_F(GpuPlannerTest, SmallBuffersReportTheHostsBufferAndWriteNothing) {
  CheckSmallBuffers(gpu_, 1000, 300);
}

// Captured once, replayed for new batches of the same shape: the inputs are read at replay.
TEST_F(GpuPlannerTest, ReplaysInAGraph) {
  std::mt19937 rng(5);
  const int batch_size = 128, qlen = 2;
  auto make = [&]() {
    std::vector<int> lens(batch_size);
    for (int& l : lens) l = qlen + rng() % 9000;
    return MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, lens, qlen, 64);
  };
  Batch batch = make();
  absl::StatusOr<Resolved> r = Resolve(batch, PlanOptions{});
  ASSERT_TRUE(r.ok());
  const Capacities caps = FromPlanCapacity(r->capacity);
  const GpuPlannerParams params = gpu_.Params(batch, *r, caps, qlen, 0);
  hipGraph_t graph;
  hipGraphExec_t exec;
  ASSERT_HIP_OK(hipStreamBeginCapture(gpu_.stream(), hipStreamCaptureModeThreadLocal));
  ASSERT_EQ(LaunchGpuPlanner(params, gpu_.stream()), hipSuccess);
  ASSERT_HIP_OK(hipStreamEndCapture(gpu_.stream(), &graph));
  ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  for (int step = 0; step < 20; ++step) {
    batch = make();
    const HostResult host = PlanOnHost(batch, r->options, caps);
    ASSERT_TRUE(host.sizes.ok());
    gpu_.Upload(batch);
    gpu_.Fill();
    ASSERT_HIP_OK(hipGraphLaunch(exec, gpu_.stream()));
    gpu_.Download();
    ASSERT_EQ(gpu_.Status().code, kGpuPlanOk);
    EXPECT_EQ(CompareWithHost(gpu_, host, caps), "") << "step " << step;
  }
  ASSERT_HIP_OK(hipGraphExecDestroy(exec));
  ASSERT_HIP_OK(hipGraphDestroy(graph));
}

TEST_F(GpuPlannerTest, BadParamsAreRefusedWithoutLaunching) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 4, 1, 100, 16);
  absl::StatusOr<Resolved> r = Resolve(batch, PlanOptions{});
  ASSERT_TRUE(r.ok());
  const GpuPlannerParams good = gpu_.Params(batch, *r, FromPlanCapacity(r->capacity), 1, 0);
  EXPECT_EQ(GpuPlannerParamsError(good), nullptr);
  GpuPlannerParams p = good;
  p.num_heads = 20;
  EXPECT_NE(GpuPlannerParamsError(p), nullptr);
  EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  p = good;
  p.kv_granularity = 24;
  EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  p = good;
  p.policy = static_cast<int>(PlanPolicy::kLongestFirst);
  EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  p = good;
  p.work_info = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(p.work_info) + 4);
  EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  p = good;
  p.fixed_overhead = -1;  // must be resolved on the host
  EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  for (int positions : {-1, 65537}) {  // 16-bit positions
    p = good;
    p.jump_positions = positions;
    EXPECT_NE(GpuPlannerParamsError(p), nullptr);
    EXPECT_EQ(LaunchGpuPlanner(p, gpu_.stream()), hipErrorInvalidValue);
  }
  p = good;
  p.jump_positions = 65536;
  EXPECT_EQ(GpuPlannerParamsError(p), nullptr);
}

}  // namespace
}  // namespace mlaps
