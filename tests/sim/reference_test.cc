// The fp64 reference: hand-computed cases, the causal / CP / non-causal masks, page
// indirection, and input errors.
#include "sim/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "sim/decode_case.h"

namespace mlaps::sim {
namespace {

using ::testing::HasSubstr;

constexpr int kH = 16;

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int d = 0; d < n; ++d) s += double{a[d]} * b[d];
  return s;
}

const float* KvRow(const DecodeCase& c, int b, int64_t j) {
  const Batch& batch = c.batch;
  const int32_t page = c.kv_indices[batch.kv_indptr[b] + j / batch.page_size];
  return c.kv_cache.data() + (int64_t{page} * batch.page_size + j % batch.page_size) * kHeadDimQk;
}

// Softmax of request b's token i, head h over kv tokens [0, n), straight from the formula.
void Direct(const DecodeCase& c, int b, int i, int h, int64_t n, std::vector<double>* o,
            double* lse) {
  const Batch& batch = c.batch;
  const float* q =
      c.q.data() + ((int64_t{batch.qo_indptr[b]} + i) * batch.num_heads + h) * kHeadDimQk;
  const double scale = kDefaultSmScale * c.q_scale * c.kv_scale;
  double sum = 0;
  o->assign(kHeadDimV, 0.0);
  std::vector<double> e(n);
  for (int64_t j = 0; j < n; ++j) e[j] = std::exp(Dot(q, KvRow(c, b, j), kHeadDimQk) * scale);
  for (int64_t j = 0; j < n; ++j) {
    sum += e[j];
    for (int d = 0; d < kHeadDimV; ++d) (*o)[d] += e[j] * KvRow(c, b, j)[d];
  }
  for (double& x : *o) x *= c.kv_scale / sum;
  *lse = std::log(sum);
}

TEST(ReferenceTest, SingleKvTokenIsItsValueTimesKvScale) {
  const Batch batch = MakeUniformBatch(Arch::kGfx950, DType::kFp8, kH, /*batch_size=*/1,
                                       /*qlen=*/1, /*kv_len=*/1, /*page_size=*/1);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/1, /*q_scale=*/0.7, /*kv_scale=*/1.3);
  absl::StatusOr<ReferenceOutput> out = ReferenceDecode(batch, c.Inputs());
  ASSERT_TRUE(out.ok()) << out.status();
  const float* kv = KvRow(c, 0, 0);
  for (int h = 0; h < kH; ++h) {
    for (int d = 0; d < kHeadDimV; ++d) {
      ASSERT_NEAR(out->o[h * kHeadDimV + d], kv[d] * 1.3, 1e-12);
    }
    const double logit = Dot(c.q.data() + h * kHeadDimQk, kv, kHeadDimQk) * 0.7 * 1.3 / 24;
    EXPECT_NEAR(out->lse[h], logit, 1e-12);
  }
}

// Bottom-right MTP rule: token i of qlen q sees L - q + i + 1 kv tokens.
TEST(ReferenceTest, CausalMtpMaskMatchesDirectSoftmax) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, kH, /*kv_lens=*/{5, 40},
                                      /*qlen=*/3, /*page_size=*/4);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/2);
  absl::StatusOr<ReferenceOutput> out = ReferenceDecode(batch, c.Inputs());
  ASSERT_TRUE(out.ok()) << out.status();
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) {
      for (int h : {0, 7, 15}) {
        std::vector<double> o;
        double lse;
        Direct(c, b, i, h, batch.kv_len(b) - 3 + i + 1, &o, &lse);
        const int64_t row = (int64_t{batch.qo_indptr[b]} + i) * kH + h;
        EXPECT_NEAR(out->lse[row], lse, 1e-9);
        for (int d = 0; d < kHeadDimV; ++d) {
          ASSERT_NEAR(out->o[row * kHeadDimV + d], o[d], 1e-9) << b << " " << i << " " << h;
        }
      }
    }
  }
}

TEST(ReferenceTest, NonCausalSeesEverything) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, kH, /*kv_lens=*/{9}, /*qlen=*/4,
                                /*page_size=*/2);
  batch.causal = false;
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/4);
  absl::StatusOr<ReferenceOutput> out = ReferenceDecode(batch, c.Inputs());
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> o;
  double lse;
  Direct(c, 0, 0, 3, 9, &o, &lse);
  EXPECT_NEAR(out->lse[3], lse, 1e-9);
  EXPECT_NEAR(out->o[3 * kHeadDimV + 100], o[100], 1e-9);
}

TEST(ReferenceTest, PageIndirectionDoesNotChangeResults) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 32, /*kv_lens=*/{33, 70},
                                      /*qlen=*/2, /*page_size=*/16);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/6);
  // The same logical cache with identity page ids.
  std::vector<float> flat;
  for (int32_t page : c.kv_indices) {
    const float* p = c.kv_cache.data() + int64_t{page} * 16 * kHeadDimQk;
    flat.insert(flat.end(), p, p + 16 * kHeadDimQk);
  }
  DecodeInputs identity = c.Inputs();
  identity.kv_cache = flat;
  identity.kv_indices = {};
  absl::StatusOr<ReferenceOutput> a = ReferenceDecode(batch, c.Inputs());
  absl::StatusOr<ReferenceOutput> b = ReferenceDecode(batch, identity);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->o, b->o);
  EXPECT_EQ(a->lse, b->lse);
}

// The CP hook with the identity map and the global length = the local one is the dense
// causal rule.
TEST(ReferenceTest, CpHookWithIdentityMapIsCausal) {
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, kH, /*kv_lens=*/{12, 30},
                                /*qlen=*/4, /*page_size=*/1);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/8);
  absl::StatusOr<ReferenceOutput> dense = ReferenceDecode(batch, c.Inputs());
  batch.cp_round_robin = true;
  CpGlobalPositions cp;
  cp.global_position = [](int, int64_t j) { return j; };
  cp.global_kv_len = {12, 30};
  DecodeInputs inputs = c.Inputs();
  inputs.cp = &cp;
  absl::StatusOr<ReferenceOutput> hooked = ReferenceDecode(batch, inputs);
  ASSERT_TRUE(dense.ok()) << dense.status();
  ASSERT_TRUE(hooked.ok()) << hooked.status();
  EXPECT_EQ(dense->o, hooked->o);
  EXPECT_EQ(dense->lse, hooked->lse);

  KvVisibility visibility(batch, &cp);
  EXPECT_FALSE(visibility.is_prefix());
  EXPECT_TRUE(visibility.Visible(1, 0, 30, 26));  // 26 < 30 - 4 + 0 + 1
  EXPECT_FALSE(visibility.Visible(1, 0, 30, 27));
  EXPECT_TRUE(visibility.Visible(1, 3, 30, 29));
}

TEST(ReferenceTest, InputErrorsNameTheBuffer) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, kH, /*kv_lens=*/{20, 7},
                                      /*qlen=*/1, /*page_size=*/4);
  const DecodeCase c = MakeDecodeCase(batch, /*seed=*/10);
  auto expect_invalid = [&](const DecodeInputs& in, const char* what) {
    absl::StatusOr<ReferenceOutput> out = ReferenceDecode(batch, in);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(what));
  };
  DecodeInputs in = c.Inputs();
  in.q = absl::MakeConstSpan(c.q).subspan(1);
  expect_invalid(in, "q has");
  in = c.Inputs();
  in.kv_cache = absl::MakeConstSpan(c.kv_cache).subspan(0, c.kv_cache.size() - 1);
  expect_invalid(in, "kv_cache");
  in = c.Inputs();
  in.kv_indices = absl::MakeConstSpan(c.kv_indices).subspan(1);
  expect_invalid(in, "kv_indices has");
  std::vector<int32_t> bad = c.kv_indices;
  bad[3] = 1000;
  in = c.Inputs();
  in.kv_indices = bad;
  expect_invalid(in, "kv_indices[3] = 1000");
  in = c.Inputs();
  in.kv_indices = {};
  in.kv_cache = absl::MakeConstSpan(c.kv_cache).subspan(0, 4 * kHeadDimQk * 2);
  expect_invalid(in, "kv_cache holds 2 pages");
  in = c.Inputs();
  in.kv_scale = 0;
  expect_invalid(in, "kv_scale");
  Batch broken = batch;
  broken.kv_last_page_lens[0] = 9;
  EXPECT_EQ(ReferenceDecode(broken, c.Inputs()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaps::sim
