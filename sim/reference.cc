#include "sim/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "metadata/types.h"

namespace mlaps::sim {
namespace {

bool GoodScale(double s) { return std::isfinite(s) && s > 0; }

// Dot product of two 576-wide rows in double, four independent partial sums.
double Dot576(const double* a, const double* b) {
  double s[4] = {0, 0, 0, 0};
  for (int d = 0; d < kHeadDimQk; d += 4) {
    for (int k = 0; k < 4; ++k) s[k] += a[d + k] * b[d + k];
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace

absl::Status ValidateDecodeInputs(const Batch& batch, const DecodeInputs& inputs) {
  if (absl::Status s = ValidateBatch(batch); !s.ok()) return s;
  const int64_t h = batch.num_heads;
  const int64_t want_q = batch.total_q_tokens() * h * kHeadDimQk;
  if (static_cast<int64_t>(inputs.q.size()) != want_q) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q has ", inputs.q.size(), " floats; expected total_q x H x 576 = ", batch.total_q_tokens(),
        " x ", h, " x ", kHeadDimQk, " = ", want_q));
  }
  const int64_t page_floats = int64_t{batch.page_size} * kHeadDimQk;
  if (inputs.kv_cache.size() % page_floats != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache has ", inputs.kv_cache.size(),
                     " floats; not a whole number of pages of page_size x 576 = ", page_floats));
  }
  const int64_t num_pages = inputs.kv_cache.size() / page_floats;
  const int32_t used_pages = batch.kv_indptr.back();
  if (inputs.kv_indices.empty()) {
    if (used_pages > num_pages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv_cache holds ", num_pages, " pages but the batch uses kv_indptr[B] = ", used_pages,
          " pages (kv_indices empty: identity page ids)"));
    }
  } else {
    if (static_cast<int64_t>(inputs.kv_indices.size()) != used_pages) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_indices has ", inputs.kv_indices.size(),
                       " entries; expected kv_indptr[B] = ", used_pages, " (or 0: identity)"));
    }
    for (int32_t i = 0; i < used_pages; ++i) {
      const int32_t page = inputs.kv_indices[i];
      if (page < 0 || page >= num_pages) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kv_indices[", i, "] = ", page, " outside the kv_cache's pages [0, ", num_pages, ")"));
      }
    }
  }
  if (!GoodScale(inputs.sm_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sm_scale = ", inputs.sm_scale, ": must be finite and > 0"));
  }
  if (!GoodScale(inputs.q_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("q_scale = ", inputs.q_scale, ": must be finite and > 0"));
  }
  if (!GoodScale(inputs.kv_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_scale = ", inputs.kv_scale, ": must be finite and > 0"));
  }
  if (batch.cp_round_robin && batch.causal && batch.sparse_topk == 0) {
    if (inputs.cp == nullptr || !inputs.cp->global_position) {
      return absl::InvalidArgumentError(
          "cp: a causal cp_round_robin batch needs CpGlobalPositions (global_position and "
          "global_kv_len) for its mask");
    }
    if (static_cast<int>(inputs.cp->global_kv_len.size()) != batch.num_requests()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cp.global_kv_len has ", inputs.cp->global_kv_len.size(),
                       " entries; expected B = ", batch.num_requests()));
    }
  }
  return absl::OkStatus();
}

KvVisibility::KvVisibility(const Batch& batch, const CpGlobalPositions* cp)
    : batch_(batch), cp_(cp) {
  if (!batch.causal || batch.sparse_topk > 0) {
    mode_ = Mode::kAll;
  } else if (batch.cp_round_robin) {
    mode_ = Mode::kCp;
  } else {
    mode_ = Mode::kCausal;
  }
}

int64_t KvVisibility::VisibleEnd(int b, int token, int64_t kv_len) const {
  if (mode_ == Mode::kAll) return kv_len;
  return std::max<int64_t>(0, kv_len - batch_.qlen(b) + token + 1);
}

bool KvVisibility::Visible(int b, int token, int64_t kv_len, int64_t j) const {
  if (mode_ != Mode::kCp) return j < VisibleEnd(b, token, kv_len);
  return cp_->global_position(b, j) < cp_->global_kv_len[b] - batch_.qlen(b) + token + 1;
}

absl::StatusOr<ReferenceOutput> ReferenceDecode(const Batch& batch, const DecodeInputs& inputs) {
  if (absl::Status s = ValidateDecodeInputs(batch, inputs); !s.ok()) return s;
  const int h = batch.num_heads;
  const int64_t total_q = batch.total_q_tokens();
  ReferenceOutput out;
  out.o.assign(total_q * h * kHeadDimV, 0.0);
  out.lse.assign(total_q * h, -std::numeric_limits<double>::infinity());
  const double logit_scale = inputs.sm_scale * inputs.q_scale * inputs.kv_scale;
  const KvVisibility visibility(batch, inputs.cp);

  std::vector<double> kv;  // request b's kv rows, in double, token-major
  std::vector<double> q(kHeadDimQk), logits, acc(kHeadDimV);
  std::vector<char> seen;
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int64_t kv_len = batch.kv_len(b);
    if (kv_len == 0) continue;
    kv.resize(kv_len * kHeadDimQk);
    for (int64_t j = 0; j < kv_len; ++j) {
      const int64_t page_idx = batch.kv_indptr[b] + j / batch.page_size;
      const int64_t page = inputs.kv_indices.empty() ? page_idx : inputs.kv_indices[page_idx];
      const float* src =
          inputs.kv_cache.data() + (page * batch.page_size + j % batch.page_size) * kHeadDimQk;
      std::copy(src, src + kHeadDimQk, kv.begin() + j * kHeadDimQk);
    }
    logits.resize(kv_len);
    seen.resize(kv_len);
    for (int i = 0; i < batch.qlen(b); ++i) {
      const int64_t row = batch.qo_indptr[b] + i;
      for (int64_t j = 0; j < kv_len; ++j) seen[j] = visibility.Visible(b, i, kv_len, j);
      for (int head = 0; head < h; ++head) {
        const float* src = inputs.q.data() + (row * h + head) * kHeadDimQk;
        std::copy(src, src + kHeadDimQk, q.begin());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!seen[j]) continue;
          logits[j] = Dot576(q.data(), kv.data() + j * kHeadDimQk) * logit_scale;
          m = std::max(m, logits[j]);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;  // nothing visible
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!seen[j]) continue;
          const double p = std::exp(logits[j] - m);
          sum += p;
          const double* v = kv.data() + j * kHeadDimQk;
          for (int d = 0; d < kHeadDimV; ++d) acc[d] += p * v[d];
        }
        double* o = out.o.data() + (row * h + head) * kHeadDimV;
        const double norm = inputs.kv_scale / sum;
        for (int d = 0; d < kHeadDimV; ++d) o[d] = acc[d] * norm;
        out.lse[row * h + head] = m + std::log(sum);
      }
    }
  }
  return out;
}

}  // namespace mlaps::sim
