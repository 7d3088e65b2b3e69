// The sm90 wgmma primitives (kernels/decode/sm90_primitives.h) on the GPU against a plain
// matrix product, on the operand bytes the CPU emulation's test runs too
// (tests/kernels/emu/e4m3_wgmma_case.h): a pass here and there pins the emulated fragment and
// descriptor layouts to the hardware. Case: e4m3 A (64 x 32) and B (32 x 64), both K-major
// in 128-byte-swizzled rows of 128 values (QGMMA, `wgmma m64n64k32 .e4m3`).
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/platform/hip_runtime.h"
#include "tests/kernels/emu/e4m3_wgmma_case.h"

namespace mlaps {
namespace {

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

constexpr int kTileBytes = mlaps_test::kE4m3TileBytes;
constexpr uint32_t kSlice = mlaps_test::kE4m3SliceByte;

// One warpgroup: the operands (2 x 8 KB, already swizzled) to shared memory, one e4m3 wgmma,
// each thread's 32 accumulators to out[thread][32].
__global__ void __launch_bounds__(128) WgmmaE4m3Kernel(const uint8_t* operands, float* out) {
#if defined(__CUDA_ARCH__)
  __shared__ __align__(1024) uint8_t smem[2 * kTileBytes];
  for (int i = threadIdx.x; i < 2 * kTileBytes / 16; i += blockDim.x) {
    reinterpret_cast<uint4*>(smem)[i] = reinterpret_cast<const uint4*>(operands)[i];
  }
  mla::FenceProxyAsync();  // generic stores, read by the async proxy
  __syncthreads();
  const uint32_t base = mla::SmemAddr(smem);
  float d[32];
  for (float& x : d) x = 0.0f;
  mla::PinAccumulators(d);
  mla::WgmmaFence();
  mla::WgmmaM64N64K32E4m3(d, mla::MatrixDesc(base + kSlice, 16, 1024, mla::kSwizzle128B),
                          mla::MatrixDesc(base + kTileBytes + kSlice, 16, 1024, mla::kSwizzle128B),
                          0);
  mla::WgmmaCommit();
  mla::WgmmaWait<0>();
  mla::PinAccumulators(d);
  for (int e = 0; e < 32; ++e) out[threadIdx.x * 32 + e] = d[e];
#endif
}

TEST(Sm90WgmmaGpu, E4m3KMajorSwizzled128MatchesTheProduct) {
  std::vector<uint8_t> bytes(mlaps_test::kE4m3CaseBytes);
  mlaps_test::FillE4m3Case(bytes.data());
  uint8_t* operands = nullptr;
  float* out = nullptr;
  ASSERT_HIP_OK(hipMalloc(&operands, bytes.size()));
  ASSERT_HIP_OK(hipMalloc(&out, 128 * 32 * sizeof(float)));
  ASSERT_HIP_OK(hipMemcpy(operands, bytes.data(), bytes.size(), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(WgmmaE4m3Kernel, dim3(1), dim3(128), 0, 0, operands, out);
  ASSERT_HIP_OK(hipGetLastError());
  std::vector<float> got(128 * 32);
  ASSERT_HIP_OK(hipMemcpy(got.data(), out, got.size() * sizeof(float), hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipFree(operands));
  ASSERT_HIP_OK(hipFree(out));
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 32; ++e) {
      ASSERT_EQ(got[t * 32 + e], mlaps_test::E4m3CaseExpected(t, e))
          << "thread " << t << " element " << e;
    }
  }
}

}  // namespace
}  // namespace mlaps
