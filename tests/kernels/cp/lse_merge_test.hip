// The GPU CP merge against the CPU merge (sim/cp_merge.h) on random and adversarial rows:
// -inf / +inf / NaN LSEs, all-dead rows, far-apart LSEs, W from 1 to 8, fp32 and bf16 out.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/platform/hip_runtime.h"
#include "sim/cp_merge.h"
#include "sim/numerics.h"

namespace mlaps::kernels {
namespace {

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kDim = 512;

struct Case {
  int world;
  int64_t rows;
  std::vector<float> o, lse;  // [W][rows][dim], [W][rows]
};

Case MakeCase(int world, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Case c{world, rows, std::vector<float>(world * rows * kDim), std::vector<float>(world * rows)};
  for (float& x : c.o) x = normal(rng);
  for (int64_t row = 0; row < rows; ++row) {
    const int kind = row % 8;
    for (int r = 0; r < world; ++r) {
      float& l = c.lse[r * rows + row];
      l = 3.0f * normal(rng);
      if (kind == 1 && r == 0) l = -kInf;            // an empty rank
      if (kind == 2 && r == world - 1) l = kInf;     // a broken rank: treated as -inf
      if (kind == 3 && r % 2 == 1) l = NAN;          // NaN: treated as -inf
      if (kind == 4) l = -kInf;                      // all empty: O = 0, LSE = -inf
      if (kind == 5) l = (r == 0 ? 80.0f : -80.0f);  // one rank dominates
      if (kind == 6 && r == 0) {                     // a dead rank's O is garbage
        l = -kInf;
        for (int d = 0; d < kDim; ++d) c.o[(r * rows + row) * kDim + d] = NAN;
      }
    }
  }
  return c;
}

void CpuMerge(const Case& c, std::vector<float>& o, std::vector<float>& lse) {
  std::vector<absl::Span<const float>> os, ls;
  for (int r = 0; r < c.world; ++r) {
    os.push_back(absl::MakeSpan(c.o).subspan(r * c.rows * kDim, c.rows * kDim));
    ls.push_back(absl::MakeSpan(c.lse).subspan(r * c.rows, c.rows));
  }
  o.assign(c.rows * kDim, 0.0f);
  lse.assign(c.rows, 0.0f);
  ASSERT_TRUE(sim::MergeCpRanks(os, ls, c.rows, kDim, absl::MakeSpan(o), absl::MakeSpan(lse)).ok());
}

bool SameClass(float a, float b) {
  return std::isnan(a) == std::isnan(b) && std::isinf(a) == std::isinf(b) &&
         (!std::isinf(a) || a == b);
}

void RunCase(const Case& c, bool out_bf16) {
  float *d_o = nullptr, *d_lse = nullptr, *d_lse_out = nullptr;
  void* d_out = nullptr;
  const size_t out_bytes = c.rows * kDim * (out_bf16 ? 2 : 4);
  ASSERT_HIP_OK(hipMalloc(&d_o, c.o.size() * 4));
  ASSERT_HIP_OK(hipMalloc(&d_lse, c.lse.size() * 4));
  ASSERT_HIP_OK(hipMalloc(&d_out, out_bytes));
  ASSERT_HIP_OK(hipMalloc(&d_lse_out, c.rows * 4));
  ASSERT_HIP_OK(hipMemcpy(d_o, c.o.data(), c.o.size() * 4, hipMemcpyHostToDevice));
  ASSERT_HIP_OK(hipMemcpy(d_lse, c.lse.data(), c.lse.size() * 4, hipMemcpyHostToDevice));
  ASSERT_HIP_OK(hipMemset(d_out, 0xff, out_bytes));  // poison: NaN in both formats
  ASSERT_HIP_OK(hipMemset(d_lse_out, 0xff, c.rows * 4));
  LseMergeParams p;
  p.o_ranks = d_o;
  p.lse_ranks = d_lse;
  p.world_size = c.world;
  p.rows = c.rows;
  p.o_out = d_out;
  p.lse_out = d_lse_out;
  p.out_bf16 = out_bf16;
  ASSERT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kOk);
  ASSERT_HIP_OK(hipDeviceSynchronize());
  std::vector<float> gpu_lse(c.rows);
  std::vector<uint8_t> raw(out_bytes);
  ASSERT_HIP_OK(hipMemcpy(raw.data(), d_out, out_bytes, hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipMemcpy(gpu_lse.data(), d_lse_out, c.rows * 4, hipMemcpyDeviceToHost));
  std::vector<float> cpu_o, cpu_lse;
  CpuMerge(c, cpu_o, cpu_lse);
  int64_t bf16_exact = 0, worst_ulps = 0;
  double worst_rel = 0;
  // expf / logf differ between the GPU and glibc by an ulp or two, so the weights do; an
  // output's error is bounded relative to the terms it sums (sum_r |O_r|), which matters
  // where ranks cancel.
  auto tolerance = [&](int64_t i) {
    const int64_t row = i / kDim, d = i % kDim;
    double terms = 0;
    for (int r = 0; r < c.world; ++r) {
      const float l = c.lse[r * c.rows + row];
      if (std::isfinite(l)) terms += std::fabs(c.o[(r * c.rows + row) * kDim + d]);
    }
    return 4e-6 * (terms + 1e-3);
  };
  for (int64_t row = 0; row < c.rows; ++row) {
    ASSERT_TRUE(SameClass(gpu_lse[row], cpu_lse[row]))
        << "row " << row << ": " << gpu_lse[row] << " vs " << cpu_lse[row];
    if (std::isfinite(cpu_lse[row])) {
      ASSERT_NEAR(gpu_lse[row], cpu_lse[row], 4e-6 * std::max(1.0f, std::fabs(cpu_lse[row])));
    }
  }
  for (int64_t i = 0; i < c.rows * kDim; ++i) {
    const float want = cpu_o[i];
    ASSERT_FALSE(std::isnan(want)) << i;
    if (out_bf16) {
      uint16_t bits;
      std::memcpy(&bits, &raw[2 * i], 2);
      const uint16_t want_bits = sim::FloatToBf16Bits(want);
      const int64_t ulps = std::abs(int64_t{bits} - int64_t{want_bits});
      worst_ulps = std::max(worst_ulps, ulps);
      bf16_exact += ulps == 0;
      // Within the fp32 tolerance plus one bf16 rounding step of the value.
      const float got = sim::Bf16BitsToFloat(bits);
      const double step =
          std::fabs(sim::Bf16BitsToFloat(want_bits ^ 1) - sim::Bf16BitsToFloat(want_bits));
      ASSERT_LE(std::fabs(got - want), tolerance(i) + step)
          << "element " << i << ": bf16 " << bits << " vs " << want_bits;
    } else {
      float got;
      std::memcpy(&got, &raw[4 * i], 4);
      ASSERT_FALSE(std::isnan(got)) << "element " << i << " unwritten or NaN";
      const double err = std::fabs(got - want);
      worst_rel = std::max(worst_rel, err / tolerance(i) * 4e-6);
      ASSERT_LE(err, tolerance(i)) << "element " << i << ": " << got << " vs " << want;
    }
  }
  if (out_bf16) {
    EXPECT_GE(bf16_exact, c.rows * kDim * 999 / 1000) << "too many 1-ulp bf16 differences";
    std::printf("W=%d rows=%lld bf16: %.4f%% identical, worst %lld ulp\n", c.world,
                static_cast<long long>(c.rows), 100.0 * bf16_exact / (c.rows * kDim),
                static_cast<long long>(worst_ulps));
  } else {
    std::printf("W=%d rows=%lld fp32: worst error / sum|O_r| %.2e\n", c.world,
                static_cast<long long>(c.rows), worst_rel);
  }
  ASSERT_HIP_OK(hipFree(d_o));
  ASSERT_HIP_OK(hipFree(d_lse));
  ASSERT_HIP_OK(hipFree(d_out));
  ASSERT_HIP_OK(hipFree(d_lse_out));
}

TEST(LseMerge, MatchesCpuMerge) {
  uint32_t seed = 1;
  for (int world : {1, 2, 3, 4, 7, 8}) {
    for (int64_t rows : {1, 37, 4096}) {
      const Case c = MakeCase(world, rows, seed++);
      RunCase(c, /*out_bf16=*/false);
      RunCase(c, /*out_bf16=*/true);
    }
  }
}

TEST(LseMerge, RefusesBadParameters) {
  LseMergeParams p;
  p.world_size = 0;
  EXPECT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kBadWorld);
  p.world_size = kMaxWorld + 1;
  EXPECT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kBadWorld);
  p.world_size = 2;
  p.rows = 4;
  p.dim = 500;
  EXPECT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kBadShape);
  p.dim = 512;
  EXPECT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kNullPointer);
  p.rows = 0;
  EXPECT_EQ(LaunchLseMerge(p, nullptr), LseMergeError::kOk);  // nothing to do
}

}  // namespace
}  // namespace mlaps::kernels
