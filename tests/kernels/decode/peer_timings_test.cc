// The peer's benchmark JSON reader behind mla_decode_bench's ratio column.
#include "kernels/decode/peer_timings.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaps::bench {
namespace {

using ::testing::HasSubstr;

// The shape of flashmla.json (fields the reader ignores included).
constexpr char kJson[] = R"({
  "library": "FlashMLA", "limits": {"d2d_copy_2GiB": {"median_us": 1002.5}},
  "dense": [
    {"kind": "dense_bf16", "b": 128, "ctx": 8192, "h_q": 16, "s_q": 1, "causal": false,
     "median_us": 317.76, "check": {"cos": 0.99}},
    {"kind": "dense_bf16", "b": 128, "ctx": 8192, "h_q": 128, "s_q": 2, "causal": true,
     "median_us": 920.8, "eager_meta_us": 16.8}],
  "sparse": [
    {"kind": "sparse_fp8_v32", "b": 128, "ctx": 32768, "topk": 2048, "h_q": 128, "s_q": 2,
     "median_us": 367.9}],
  "errors": []
})";

TEST(PeerTimings, ReadsDenseAndSparseRows) {
  const auto rows = ParsePeerTimings(kJson);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].kind, "dense_bf16");
  EXPECT_FALSE((*rows)[0].sparse);
  EXPECT_EQ((*rows)[1].heads, 128);
  EXPECT_EQ((*rows)[1].qlen, 2);
  EXPECT_DOUBLE_EQ((*rows)[1].median_us, 920.8);
  EXPECT_DOUBLE_EQ((*rows)[1].meta_us, 16.8);
  EXPECT_DOUBLE_EQ((*rows)[0].meta_us, -1);  // no eager_meta_us
  EXPECT_TRUE((*rows)[2].sparse);
  EXPECT_EQ((*rows)[2].topk, 2048);
}

TEST(PeerTimings, FindsTheShapeOrNothing) {
  const auto rows = ParsePeerTimings(kJson);
  ASSERT_TRUE(rows.ok());
  const PeerTiming* t = FindPeerTiming(*rows, false, 128, 8192, 128, 2, 0);
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ(t->median_us, 920.8);
  EXPECT_EQ(FindPeerTiming(*rows, false, 128, 8192, 64, 2, 0), nullptr);
  EXPECT_EQ(FindPeerTiming(*rows, false, 64, 8192, 128, 2, 0), nullptr);
  // Sparse rows match on topk, not on the cache length.
  t = FindPeerTiming(*rows, true, 128, 8192, 128, 2, 2048);
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ(t->median_us, 367.9);
  EXPECT_EQ(FindPeerTiming(*rows, true, 128, 8192, 128, 2, 1024), nullptr);
}

TEST(PeerTimings, NamesWhatIsWrong) {
  EXPECT_THAT(std::string(ParsePeerTimings("not json").status().message()),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(std::string(ParsePeerTimings(R"({"dense": 3})").status().message()),
              HasSubstr("'dense' is not an array"));
  EXPECT_THAT(std::string(ParsePeerTimings(R"({"dense": [{"b": 1, "ctx": 2, "h_q": 16,
      "s_q": 1}]})")
                              .status()
                              .message()),
              HasSubstr("dense[0] has no number 'median_us'"));
  EXPECT_THAT(std::string(ParsePeerTimings(R"({"sparse": [{"b": 1, "ctx": 2, "h_q": 16,
      "s_q": 1, "median_us": 5}]})")
                              .status()
                              .message()),
              HasSubstr("sparse[0] has no number 'topk'"));
  EXPECT_THAT(std::string(ParsePeerTimings(R"({"dense": [{"b": 1, "ctx": 2, "h_q": 16,
      "s_q": 1, "median_us": 5, "eager_meta_us": "x"}]})")
                              .status()
                              .message()),
              HasSubstr("dense[0] has no number 'eager_meta_us'"));
  const auto null_meta = ParsePeerTimings(R"({"dense": [{"b": 1, "ctx": 2, "h_q": 16,
      "s_q": 1, "median_us": 5, "eager_meta_us": null}]})");
  ASSERT_TRUE(null_meta.ok()) << null_meta.status();
  EXPECT_DOUBLE_EQ((*null_meta)[0].meta_us, -1);
}

}  // namespace
}  // namespace mlaps::bench
