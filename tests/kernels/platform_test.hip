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

}  // namespace
