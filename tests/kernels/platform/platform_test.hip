// The first GPU test: device query and small kernels through kernels/platform/hip_runtime.h,
// checked against CPU results. It proves the chain (portability header -> nvcc/hipcc ->
// Bazel -> GPU bundle -> device) and exercises each mapped API.
#include <cstdio>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/platform/hip_runtime.h"

namespace {

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

// y[i] = a * x[i] + y[i]: one element per thread, grid-stride.
__global__ void Saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

// Sums each warp's values with a butterfly of __shfl_xor; lane 0 writes the warp total.
// Also records warpSize as the device sees it.
__global__ void WarpSums(const int* in, int* warp_sums, int* device_warp_size) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int mask = warpSize / 2; mask > 0; mask /= 2) v += __shfl_xor(v, mask);
  if (threadIdx.x % warpSize == 0) {
    warp_sums[(blockIdx.x * blockDim.x + threadIdx.x) / warpSize] = v;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *device_warp_size = warpSize;
}

// HIP declares wall_clock64() in its device pass only.
__device__ inline long long WallClock() {
#if defined(MLAPS_GPU_ROCM) && !defined(__HIP_DEVICE_COMPILE__)
  return 0;
#else
  return wall_clock64();
#endif
}

// Cycles and wall-clock ticks around a short spin: both advance.
__global__ void Clocks(long long* out) {
  const long long c0 = clock64(), w0 = WallClock();
  long long spin = 0;
  while (clock64() - c0 < 200000) ++spin;
  out[0] = clock64() - c0;
  out[1] = WallClock() - w0;
  out[2] = spin;
}

// Programmatic dependent launch: the producer lets its dependent launch at once, then its
// blocks spin before writing (so a dependent that skipped the wait would read the old
// values); the consumer reads nothing before mlapsGridDependencyWait.
__global__ void SlowFill(int* out, int n, int value) {
  mlapsTriggerDependents();
  const long long c0 = clock64();
  while (clock64() - c0 < 100000) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = value + i;
  }
}
__global__ void CopyAfterWait(const int* in, int* out, int n) {
  mlapsGridDependencyWait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = in[i];
  }
}

// Each lane's bit of a 64-bit ballot: lane i votes for (i % 3 == 0) in warp w.
__global__ void Ballots(unsigned long long* out) {
  const unsigned long long mask = __ballot64(threadIdx.x % warpSize % 3 == 0);
  if (threadIdx.x % warpSize == 0) out[threadIdx.x / warpSize] = mask;
}

TEST(Platform, DeviceQuery) {
  int count = 0;
  ASSERT_HIP_OK(hipGetDeviceCount(&count));
  ASSERT_GT(count, 0);
  for (int d = 0; d < count; ++d) {
    hipDeviceProp_t p;
    ASSERT_HIP_OK(hipGetDeviceProperties(&p, d));
    std::printf("device %d: %s, %d CUs/SMs, warp size %d, %.1f GiB\n", d, p.name,
                p.multiProcessorCount, p.warpSize, p.totalGlobalMem / 1073741824.0);
    EXPECT_GT(p.multiProcessorCount, 0);
    EXPECT_TRUE(p.warpSize == 32 || p.warpSize == 64) << p.warpSize;
    int warp = 0, cus = 0;
    ASSERT_HIP_OK(hipDeviceGetAttribute(&warp, hipDeviceAttributeWarpSize, d));
    ASSERT_HIP_OK(hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, d));
    EXPECT_EQ(warp, p.warpSize);
    EXPECT_EQ(cus, p.multiProcessorCount);
  }
}

TEST(Platform, SaxpyMatchesCpu) {
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.25f * (i % 97) - 3.0f;
    y[i] = 1.0f + (i % 13);
  }
  float *dx = nullptr, *dy = nullptr;
  ASSERT_HIP_OK(hipMalloc(&dx, n * sizeof(float)));
  ASSERT_HIP_OK(hipMalloc(&dy, n * sizeof(float)));
  hipStream_t stream;
  ASSERT_HIP_OK(hipStreamCreate(&stream));
  ASSERT_HIP_OK(hipMemcpyAsync(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice, stream));
  ASSERT_HIP_OK(hipMemcpyAsync(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice, stream));
  hipEvent_t start, stop;
  ASSERT_HIP_OK(hipEventCreate(&start));
  ASSERT_HIP_OK(hipEventCreate(&stop));
  ASSERT_HIP_OK(hipEventRecord(start, stream));
  hipLaunchKernelGGL(Saxpy, dim3(256), dim3(256), 0, stream, n, 2.5f, dx, dy);
  ASSERT_HIP_OK(hipGetLastError());
  ASSERT_HIP_OK(hipEventRecord(stop, stream));
  ASSERT_HIP_OK(hipEventSynchronize(stop));
  float ms = 0;
  ASSERT_HIP_OK(hipEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 0.0f);
  std::vector<float> out(n, -1.0f);
  ASSERT_HIP_OK(hipMemcpy(out.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.5f * x[i] + y[i]) << "i=" << i;
  ASSERT_HIP_OK(hipEventDestroy(start));
  ASSERT_HIP_OK(hipEventDestroy(stop));
  ASSERT_HIP_OK(hipStreamDestroy(stream));
  ASSERT_HIP_OK(hipFree(dx));
  ASSERT_HIP_OK(hipFree(dy));
}

TEST(Platform, ShflXorWarpSumMatchesCpu) {
  hipDeviceProp_t p;
  ASSERT_HIP_OK(hipGetDeviceProperties(&p, 0));
  const int warp = p.warpSize, blocks = 7, threads = 4 * warp, n = blocks * threads;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 7919) % 1000 - 500;
  int *din, *dsums, *dwarp;
  ASSERT_HIP_OK(hipMalloc(&din, n * sizeof(int)));
  ASSERT_HIP_OK(hipMalloc(&dsums, (n / warp) * sizeof(int)));
  ASSERT_HIP_OK(hipMalloc(&dwarp, sizeof(int)));
  ASSERT_HIP_OK(hipMemset(dsums, 0xff, (n / warp) * sizeof(int)));
  ASSERT_HIP_OK(hipMemcpy(din, in.data(), n * sizeof(int), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(WarpSums, dim3(blocks), dim3(threads), 0, nullptr, din, dsums, dwarp);
  ASSERT_HIP_OK(hipGetLastError());
  ASSERT_HIP_OK(hipDeviceSynchronize());
  std::vector<int> sums(n / warp);
  int device_warp = 0;
  ASSERT_HIP_OK(hipMemcpy(sums.data(), dsums, sums.size() * sizeof(int), hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipMemcpy(&device_warp, dwarp, sizeof(int), hipMemcpyDeviceToHost));
  EXPECT_EQ(device_warp, warp);
  for (int w = 0; w < n / warp; ++w) {
    int expect = std::accumulate(in.begin() + w * warp, in.begin() + (w + 1) * warp, 0);
    ASSERT_EQ(sums[w], expect) << "warp " << w;
  }
  ASSERT_HIP_OK(hipFree(din));
  ASSERT_HIP_OK(hipFree(dsums));
  ASSERT_HIP_OK(hipFree(dwarp));
}

TEST(Platform, Ballot64IntoPinnedMemory) {
  hipDeviceProp_t p;
  ASSERT_HIP_OK(hipGetDeviceProperties(&p, 0));
  const int warp = p.warpSize, warps = 4;
  unsigned long long* d = nullptr;
  unsigned long long* pinned = nullptr;
  ASSERT_HIP_OK(hipMalloc(&d, warps * sizeof(unsigned long long)));
  ASSERT_HIP_OK(hipHostMalloc(&pinned, warps * sizeof(unsigned long long)));
  hipStream_t stream;
  ASSERT_HIP_OK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  hipLaunchKernelGGL(Ballots, dim3(1), dim3(warps * warp), 0, stream, d);
  ASSERT_HIP_OK(hipGetLastError());
  ASSERT_HIP_OK(
      hipMemcpyAsync(pinned, d, warps * sizeof(unsigned long long), hipMemcpyDeviceToHost, stream));
  ASSERT_HIP_OK(hipStreamSynchronize(stream));
  unsigned long long expect = 0;
  for (int lane = 0; lane < warp; lane += 3) expect |= 1ull << lane;
  for (int w = 0; w < warps; ++w) EXPECT_EQ(pinned[w], expect) << "warp " << w;
  ASSERT_HIP_OK(hipStreamDestroy(stream));
  ASSERT_HIP_OK(hipHostFree(pinned));
  ASSERT_HIP_OK(hipFree(d));
}

// Capture two kernels into a graph, replay it twice; plus the device / attribute calls a
// launcher makes while capturing.
TEST(Platform, GraphCaptureAndReplay) {
  const int n = 4096;
  std::vector<float> x(n, 1.0f), y(n, 0.0f);
  float *dx = nullptr, *dy = nullptr;
  ASSERT_HIP_OK(hipMalloc(&dx, n * sizeof(float)));
  ASSERT_HIP_OK(hipMalloc(&dy, n * sizeof(float)));
  ASSERT_HIP_OK(hipMemcpy(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice));
  ASSERT_HIP_OK(hipMemcpy(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice));
  int device = -1;
  ASSERT_HIP_OK(hipGetDevice(&device));
  EXPECT_GE(device, 0);
  ASSERT_HIP_OK(hipFuncSetAttribute(reinterpret_cast<const void*>(&Saxpy),
                                    hipFuncAttributeMaxDynamicSharedMemorySize, 32 * 1024));
  hipStream_t stream;
  ASSERT_HIP_OK(hipStreamCreate(&stream));
  hipGraph_t graph;
  hipGraphExec_t exec;
  ASSERT_HIP_OK(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  hipLaunchKernelGGL(Saxpy, dim3(16), dim3(256), 0, stream, n, 2.0f, dx, dy);
  hipLaunchKernelGGL(Saxpy, dim3(16), dim3(256), 0, stream, n, 1.0f, dx, dy);
  ASSERT_HIP_OK(hipStreamEndCapture(stream, &graph));
  ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  ASSERT_HIP_OK(hipGraphLaunch(exec, stream));
  ASSERT_HIP_OK(hipGraphLaunch(exec, stream));
  ASSERT_HIP_OK(hipStreamSynchronize(stream));
  ASSERT_HIP_OK(hipMemcpy(y.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 6.0f) << "i=" << i;  // two replays of 2x + 1x
  ASSERT_HIP_OK(hipGraphExecDestroy(exec));
  ASSERT_HIP_OK(hipGraphDestroy(graph));
  ASSERT_HIP_OK(hipStreamDestroy(stream));
  ASSERT_HIP_OK(hipFree(dx));
  ASSERT_HIP_OK(hipFree(dy));
}

TEST(Platform, LaunchAfterPreviousWaitsForItsWrites) {
  const int n = 1 << 16;
  int *a = nullptr, *b = nullptr;
  ASSERT_HIP_OK(hipMalloc(&a, n * sizeof(int)));
  ASSERT_HIP_OK(hipMalloc(&b, n * sizeof(int)));
  ASSERT_HIP_OK(hipMemset(a, 0, n * sizeof(int)));
  hipStream_t stream;
  ASSERT_HIP_OK(hipStreamCreate(&stream));
  // Directly on the stream, then twice in one graph (new values each time).
  hipLaunchKernelGGL(SlowFill, dim3(8), dim3(256), 0, stream, a, n, 1000);
  ASSERT_HIP_OK(mlapsLaunchKernelAfterPrevious(CopyAfterWait, dim3(8), dim3(256), 0, stream,
                                               static_cast<const int*>(a), b, n));
  std::vector<int> got(n);
  ASSERT_HIP_OK(hipStreamSynchronize(stream));
  ASSERT_HIP_OK(hipMemcpy(got.data(), b, n * sizeof(int), hipMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], 1000 + i) << "i=" << i;
  hipGraph_t graph;
  hipGraphExec_t exec;
  ASSERT_HIP_OK(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  hipLaunchKernelGGL(SlowFill, dim3(8), dim3(256), 0, stream, a, n, 2000);
  ASSERT_HIP_OK(mlapsLaunchKernelAfterPrevious(CopyAfterWait, dim3(8), dim3(256), 0, stream,
                                               static_cast<const int*>(a), b, n));
  hipLaunchKernelGGL(SlowFill, dim3(8), dim3(256), 0, stream, a, n, 3000);
  ASSERT_HIP_OK(mlapsLaunchKernelAfterPrevious(CopyAfterWait, dim3(8), dim3(256), 0, stream,
                                               static_cast<const int*>(a), b, n));
  ASSERT_HIP_OK(hipStreamEndCapture(stream, &graph));
  ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  ASSERT_HIP_OK(hipGraphLaunch(exec, stream));
  ASSERT_HIP_OK(hipStreamSynchronize(stream));
  ASSERT_HIP_OK(hipMemcpy(got.data(), b, n * sizeof(int), hipMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], 3000 + i) << "i=" << i;
  ASSERT_HIP_OK(hipGraphExecDestroy(exec));
  ASSERT_HIP_OK(hipGraphDestroy(graph));
  ASSERT_HIP_OK(hipStreamDestroy(stream));
  ASSERT_HIP_OK(hipFree(a));
  ASSERT_HIP_OK(hipFree(b));
}

TEST(Platform, ClocksAdvance) {
  long long* d = nullptr;
  ASSERT_HIP_OK(hipMalloc(&d, 3 * sizeof(long long)));
  hipLaunchKernelGGL(Clocks, dim3(1), dim3(1), 0, nullptr, d);
  ASSERT_HIP_OK(hipGetLastError());
  long long h[3] = {};
  ASSERT_HIP_OK(hipMemcpy(h, d, sizeof(h), hipMemcpyDeviceToHost));
  EXPECT_GE(h[0], 200000);
  EXPECT_GT(h[1], 0);
  std::printf("200k+ cycles took %lld wall-clock ticks\n", h[1]);
  ASSERT_HIP_OK(hipFree(d));
}

}  // namespace
