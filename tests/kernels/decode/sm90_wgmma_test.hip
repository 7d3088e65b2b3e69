// The sm90 wgmma primitives (kernels/decode/sm90_primitives.h) on the GPU against a plain
// matrix product, with the operand bytes laid out exactly as the CPU emulation's test
// (tests/kernels/emu/hip_host_emulation_test.cc) lays them out: a pass here and there pins the
// emulated fragment and descriptor layouts to the hardware. Case: e4m3 A (64 x 32) and B
// (32 x 64), both K-major in 128-byte-swizzled rows of 128 values, the k32 slice at byte 32
// (QGMMA, `wgmma m64n64k32 .e4m3`).
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps {
namespace {

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

constexpr int kTileBytes = 8192;  // one operand: 64 rows of 128 bytes

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
  mla::WgmmaM64N64K32E4m3(d, mla::MatrixDesc(base + 32, 16, 1024, mla::kSwizzle128B),
                          mla::MatrixDesc(base + kTileBytes + 32, 16, 1024, mla::kSwizzle128B), 0);
  mla::WgmmaCommit();
  mla::WgmmaWait<0>();
  mla::PinAccumulators(d);
  for (int e = 0; e < 32; ++e) out[threadIdx.x * 32 + e] = d[e];
#endif
}

// e4m3fn byte of a small integer (|x| <= 7 is exact).
uint8_t E4m3(float x) {
  if (x == 0.0f) return 0;
  const uint8_t sign = x < 0 ? 0x80 : 0;
  float m = x < 0 ? -x : x;
  int e = 0;
  while (m >= 2.0f) m *= 0.5f, ++e;
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | static_cast<int>((m - 1.0f) * 8.0f));
}

float ValA(int m, int k) { return static_cast<float>((m * 3 + k * 5) % 7 - 3); }
float ValB(int n, int k) { return static_cast<float>((n * 2 + k * 7) % 5 - 2); }

TEST(Sm90WgmmaGpu, E4m3KMajorSwizzled128MatchesTheProduct) {
  std::vector<uint8_t> bytes(2 * kTileBytes);
  for (int r = 0; r < 64; ++r) {
    for (int u = 0; u < 8; ++u) {  // 16-byte units of the row's 128 values
      for (int x = 0; x < 16; ++x) {
        const int off = r * 128 + ((u ^ (r & 7)) << 4) + x;
        const int k = 16 * u + x - 32;  // the slice k = 0..31 is values 32..63
        const bool in = k >= 0 && k < 32;
        bytes[off] = E4m3(in ? ValA(r, k) : 5.0f);
        bytes[kTileBytes + off] = E4m3(in ? ValB(r, k) : 6.0f);
      }
    }
  }
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
      // Thread t, element e = 4 j + 2 h + x: row 16 (t / 32) + (t % 32) / 4 + 8 h, column
      // 8 j + 2 (t % 4) + x.
      const int j = e / 4, h = (e / 2) % 2, x = e % 2;
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * h, col = 8 * j + 2 * (t % 4) + x;
      float want = 0.0f;
      for (int k = 0; k < 32; ++k) want += ValA(row, k) * ValB(col, k);
      ASSERT_EQ(got[t * 32 + e], want) << "thread " << t << " element " << e;
    }
  }
}

}  // namespace
}  // namespace mlaps
