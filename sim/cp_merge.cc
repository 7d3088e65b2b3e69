#include "sim/cp_merge.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaps::sim {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// +inf and NaN are treated as -inf: only finite LSEs (and -inf) are meaningful.
float Live(float lse) { return std::isfinite(lse) ? lse : kNegInf; }

}  // namespace

float MergeWeights(absl::Span<const float> lse, absl::Span<float> weights) {
  float m = kNegInf;
  for (float l : lse) m = std::fmax(m, Live(l));
  if (m == kNegInf) {
    for (float& w : weights) w = 0.0f;
    return kNegInf;
  }
  float sum = 0.0f;
  for (size_t r = 0; r < lse.size(); ++r) {
    const float l = Live(lse[r]);
    weights[r] = l == kNegInf ? 0.0f : std::exp(l - m);
    sum += weights[r];
  }
  const float g = m + std::log(sum);
  for (size_t r = 0; r < lse.size(); ++r) {
    const float l = Live(lse[r]);
    weights[r] = l == kNegInf ? 0.0f : std::exp(l - g);
  }
  return g;
}

absl::Status MergeCpRanks(absl::Span<const absl::Span<const float>> o_ranks,
                          absl::Span<const absl::Span<const float>> lse_ranks, int64_t rows,
                          int dim, absl::Span<float> o_out, absl::Span<float> lse_out) {
  const size_t w = o_ranks.size();
  if (w == 0 || lse_ranks.size() != w) {
    return absl::InvalidArgumentError(absl::StrCat("merge needs W >= 1 ranks with O and LSE; got ",
                                                   o_ranks.size(), " O and ", lse_ranks.size(),
                                                   " LSE"));
  }
  const size_t o_size = static_cast<size_t>(rows) * dim;
  for (size_t r = 0; r < w; ++r) {
    if (o_ranks[r].size() != o_size || lse_ranks[r].size() != static_cast<size_t>(rows)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": O has ", o_ranks[r].size(),
                                                     " floats (want ", o_size, "), LSE has ",
                                                     lse_ranks[r].size(), " (want ", rows, ")"));
    }
  }
  if (o_out.size() != o_size || lse_out.size() != static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError(absl::StrCat("merged O has ", o_out.size(), " floats (want ",
                                                   o_size, "), LSE has ", lse_out.size(), " (want ",
                                                   rows, ")"));
  }
  std::vector<float> lse(w), weights(w);
  for (int64_t row = 0; row < rows; ++row) {
    for (size_t r = 0; r < w; ++r) lse[r] = lse_ranks[r][row];
    lse_out[row] = MergeWeights(lse, absl::MakeSpan(weights));
    float* out = &o_out[row * dim];
    for (int d = 0; d < dim; ++d) {
      float acc = 0.0f;
      for (size_t r = 0; r < w; ++r) {
        // Dead ranks are skipped, not multiplied: their O may hold anything.
        if (weights[r] != 0.0f) acc = std::fma(weights[r], o_ranks[r][row * dim + d], acc);
      }
      out[d] = acc;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaps::sim
