// Every malformed batch gets InvalidArgument naming the field and the value.
#include "metadata/batch.h"

#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace mlaps {
namespace {

Batch Good() { return MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 3, 2, 100, 16); }

TEST(Batch, HelpersBuildValidBatches) {
  Batch b = Good();
  ASSERT_TRUE(ValidateBatch(b).ok()) << ValidateBatch(b);
  EXPECT_EQ(b.num_requests(), 3);
  EXPECT_EQ(b.kv_len(1), 100);
  EXPECT_EQ(b.kv_last_page_lens[0], 4);  // 100 = 6 * 16 + 4
  EXPECT_EQ(b.num_pages(2), 7);
  EXPECT_EQ(b.max_qlen(), 2);
  Batch v = MakeVarlenBatch(Arch::kGfx950, DType::kFp8, 64, {1, 64, 65}, 1, 64);
  ASSERT_TRUE(ValidateBatch(v).ok());
  EXPECT_EQ(v.kv_len(0), 1);
  EXPECT_EQ(v.kv_len(1), 64);
  EXPECT_EQ(v.kv_len(2), 65);
}

struct BadCase {
  std::string name;
  std::function<void(Batch&)> mutate;
  std::string expect;  // substring of the error message
};

TEST(Batch, EveryMalformedInputIsNamed) {
  const std::vector<BadCase> cases = {
      {"heads", [](Batch& b) { b.num_heads = 24; }, "num_heads = 24"},
      {"page_not_pow2", [](Batch& b) { b.page_size = 12; }, "page_size = 12"},
      {"page_zero", [](Batch& b) { b.page_size = 0; }, "page_size = 0"},
      {"qo_short", [](Batch& b) { b.qo_indptr = {0}; }, "qo_indptr has 1 entries"},
      {"qo_not_zero", [](Batch& b) { b.qo_indptr[0] = 1; }, "qo_indptr[0] = 1"},
      {"qo_negative", [](Batch& b) { b.qo_indptr[1] = -2; }, "qo_indptr[1] = -2: is negative"},
      {"qo_decreasing", [](Batch& b) { b.qo_indptr[2] = 1; }, "qo_indptr[2] = 1"},
      {"kv_decreasing", [](Batch& b) { b.kv_indptr[2] = 3; }, "kv_indptr[2] = 3"},
      {"kv_size", [](Batch& b) { b.kv_indptr.pop_back(); }, "kv_indptr has 3 entries"},
      {"last_size", [](Batch& b) { b.kv_last_page_lens.pop_back(); },
       "kv_last_page_lens has 2 entries"},
      {"last_zero", [](Batch& b) { b.kv_last_page_lens[1] = 0; }, "kv_last_page_lens[1] = 0"},
      {"last_big", [](Batch& b) { b.kv_last_page_lens[2] = 17; }, "kv_last_page_lens[2] = 17"},
      {"qlen_zero",
       [](Batch& b) {
         b.qo_indptr = {0, 2, 2, 4};
       },
       "qlen[1] = 0"},
      {"causal_short",
       [](Batch& b) {
         b.kv_indptr = {0, 7, 8, 15};
         b.kv_last_page_lens = {4, 1, 4};
       },
       "kv_len[1] = 1: is shorter than qlen = 2"},
      {"tokens_overflow",
       [](Batch& b) {
         b.qo_indptr = {0, 2, 4, 1 << 30};
       },
       "overflows int32"},
      {"kv_overflow",
       [](Batch& b) {
         b.page_size = 1 << 20;
         b.kv_indptr = {0, 1000, 2000, 3000};
         b.kv_last_page_lens = {1, 1, 1};
       },
       "total kv tokens overflow int32"},
      {"sparse_qlen", [](Batch& b) { b.sparse_topk = 2048; }, "qlen[0] = 2: must be 1"},
      {"sparse_negative", [](Batch& b) { b.sparse_topk = -1; }, "sparse_topk = -1"},
  };
  for (const BadCase& c : cases) {
    Batch b = Good();
    c.mutate(b);
    absl::Status s = ValidateBatch(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
    EXPECT_NE(std::string(s.message()).find(c.expect), std::string::npos)
        << c.name << ": got '" << s.message() << "', want '" << c.expect << "'";
  }
}

TEST(Batch, CpShardsAndNonCausalMayHoldShortOrEmptyRequests) {
  Batch b = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {0, 1, 5}, 4, 1);
  b.cp_round_robin = true;
  EXPECT_TRUE(ValidateBatch(b).ok()) << ValidateBatch(b);
  b.cp_round_robin = false;
  b.causal = false;
  EXPECT_TRUE(ValidateBatch(b).ok()) << ValidateBatch(b);
  b.causal = true;
  EXPECT_EQ(ValidateBatch(b).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Batch, SparseBatchesBoundKvByTopk) {
  Batch b = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {0, 2048, 3}, 1, 1);
  b.sparse_topk = 2048;
  b.causal = false;
  EXPECT_TRUE(ValidateBatch(b).ok()) << ValidateBatch(b);
  b.kv_indptr = {0, 0, 2049, 2052};
  absl::Status s = ValidateBatch(b);
  EXPECT_NE(std::string(s.message()).find("exceeds sparse_topk = 2048"), std::string::npos) << s;
}

}  // namespace
}  // namespace mlaps
