// Which sm90 kernel the launcher routes a plan to (metadata/decode_route.h): the cost model's
// side of kernels/decode/mla_decode.hip's MlaDecodeKernelName, whose GPU test checks the same
// boundary on the launcher.
#include "metadata/decode_route.h"

#include <string>

#include "gtest/gtest.h"

namespace mlaps {
namespace {

TEST(DecodeRoute, Bf16RunsF16PvOnWholePagesOfLongRequests) {
  // 32 requests on pages of 64 tokens: f16 P V from an average of 4096 tokens (2048 pages).
  EXPECT_TRUE(Sm90Bf16RunsF16Pv(64, 2048, 32));
  EXPECT_FALSE(Sm90Bf16RunsF16Pv(64, 2047, 32));
  EXPECT_TRUE(Sm90Bf16RunsF16Pv(128, 1024, 32));
  // Pages of fewer than 64 tokens (gathered rows) and sparse (page 1): hi + lo.
  EXPECT_FALSE(Sm90Bf16RunsF16Pv(32, 1 << 20, 32));
  EXPECT_FALSE(Sm90Bf16RunsF16Pv(1, int64_t{1} << 30, 32));
  EXPECT_FALSE(Sm90Bf16RunsF16Pv(64, 2048, 0));  // no requests
}

TEST(DecodeRoute, KernelNames) {
  auto name = [](bool fp8, int rows, bool several, int page, int64_t pages, int requests) {
    return std::string(Sm90DecodeKernelName(fp8, rows, several, page, pages, requests));
  };
  EXPECT_EQ(name(false, 16, false, 64, 100, 1), "narrow");
  EXPECT_EQ(name(true, 16, true, 64, 100, 1), "mma");
  EXPECT_EQ(name(true, 64, false, 1, 100, 100), "f16pv");  // fp8: every page size
  EXPECT_EQ(name(false, 64, false, 64, 2048, 32), "f16pv");
  EXPECT_EQ(name(false, 32, false, 64, 2047, 32), "bf16");
  EXPECT_EQ(name(false, 48, false, 16, 1 << 20, 32), "bf16");
}

}  // namespace
}  // namespace mlaps
