#include "sim/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/numerics.h"

namespace mlaps::sim {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// fp32 dot product of two 576-wide rows: eight independent fp32 partial sums (as the MMA's
// k-chunks accumulate), combined pairwise.
float Dot576(const float* a, const float* b) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int d = 0; d < kHeadDimQk; d += 8) {
    for (int k = 0; k < 8; ++k) s[k] += a[d + k] * b[d + k];
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// Checks what would make the kernel read or write out of bounds; fills the folded qo_indptr
// and the partial buffer's row count.
absl::Status CheckStructure(const Batch& batch, const WorkPlan& plan,
                            const ExecutorOptions& options, std::vector<int32_t>* fqo_out,
                            int64_t* partial_rows) {
  const int r = plan.head_fold;
  if (r < 1 || batch.num_heads % r != 0) {
    return Invalid("head_fold", absl::StrCat(r, " does not divide num_heads = ", batch.num_heads));
  }
  std::vector<int32_t>& fqo = *fqo_out;
  const int num_v = batch.num_requests() * r;
  fqo.assign(num_v + 1, 0);
  for (int v = 0; v < num_v; ++v) fqo[v + 1] = fqo[v] + batch.qlen(v / r);
  const int num_cu = plan.num_cu;
  const auto& wi = plan.work_indptr;
  if (num_cu < 0 || static_cast<int64_t>(wi.size()) != int64_t{num_cu} + 1) {
    return Invalid("work_indptr",
                   absl::StrCat("has ", wi.size(), " entries; expected num_cu + 1 = ", num_cu + 1));
  }
  if (wi[0] != 0) return Invalid("work_indptr[0]", absl::StrCat(wi[0], " != 0"));
  for (int c = 0; c < num_cu; ++c) {
    if (wi[c + 1] < wi[c]) {
      return Invalid(absl::StrCat("work_indptr[", c + 1, "]"),
                     absl::StrCat(wi[c + 1], " < previous ", wi[c]));
    }
  }
  if (wi[num_cu] != plan.num_works()) {
    return Invalid(absl::StrCat("work_indptr[", num_cu, "]"),
                   absl::StrCat(wi[num_cu], " != number of work items ", plan.num_works()));
  }
  if (!plan.qo_indptr.empty() && plan.qo_indptr != fqo) {
    return Invalid("qo_indptr", "differs from the batch's qo_indptr folded by head_fold");
  }
  // Partial rows: the given capacity, else enough for every partial item's rows.
  int64_t rows = options.partial_rows_capacity;
  if (rows < 0) {
    rows = std::max<int64_t>(0, plan.num_partial_rows);
    int64_t needed = 0;
    for (const WorkInfo& x : plan.work_info) {
      if (x.partial_qo_loc >= 0) needed += std::max(0, x.qo_end - x.qo_start);
    }
    rows = std::max(rows, needed);
  }
  for (int w = 0; w < plan.num_works(); ++w) {
    const WorkInfo& x = plan.work_info[w];
    const std::string at = absl::StrCat("work_info[", w, "].");
    if (x.batch_idx < 0 || x.batch_idx >= num_v) {
      return Invalid(absl::StrCat(at, "batch_idx"),
                     absl::StrCat(x.batch_idx, " outside [0, ", num_v, ")"));
    }
    const int v = x.batch_idx, b = v / r;
    if (x.qo_start > x.qo_end || x.qo_start < fqo[v] || x.qo_end > fqo[v + 1]) {
      return Invalid(absl::StrCat(at, "qo_start/qo_end"),
                     absl::StrCat("[", x.qo_start, ", ", x.qo_end, ") outside virtual request ", v,
                                  "'s q tokens [", fqo[v], ", ", fqo[v + 1], ")"));
    }
    if (x.kv_start > x.kv_end || x.kv_start < batch.kv_indptr[b] ||
        x.kv_end > batch.kv_indptr[b + 1]) {
      return Invalid(
          absl::StrCat(at, "kv_start/kv_end"),
          absl::StrCat("[", x.kv_start, ", ", x.kv_end, ") outside request ", b, "'s pages [",
                       batch.kv_indptr[b], ", ", batch.kv_indptr[b + 1], ")"));
    }
    if (x.partial_qo_loc < kNoPartial) {
      return Invalid(absl::StrCat(at, "partial_qo_loc"), absl::StrCat(x.partial_qo_loc, " < -1"));
    }
    if (x.partial_qo_loc >= 0 && int64_t{x.partial_qo_loc} + (x.qo_end - x.qo_start) > rows) {
      return Invalid(absl::StrCat(at, "partial_qo_loc"),
                     absl::StrCat("rows [", x.partial_qo_loc, ", ",
                                  int64_t{x.partial_qo_loc} + (x.qo_end - x.qo_start),
                                  ") past the partial buffer's ", rows, " rows"));
    }
  }
  const auto& ri = plan.reduce_indptr;
  const int tiles = plan.num_reduce_tiles();
  if (!ri.empty() && ri[0] != 0) return Invalid("reduce_indptr[0]", absl::StrCat(ri[0], " != 0"));
  for (int k = 0; k < tiles; ++k) {
    if (ri[k + 1] < ri[k] || ri[k + 1] > static_cast<int64_t>(plan.reduce_partial_map.size())) {
      return Invalid(absl::StrCat("reduce_indptr[", k + 1, "]"),
                     absl::StrCat(ri[k + 1], " decreasing or past reduce_partial_map's ",
                                  plan.reduce_partial_map.size(), " entries"));
    }
  }
  if (static_cast<int64_t>(plan.reduce_final_map.size()) < 2 * int64_t{tiles}) {
    return Invalid("reduce_final_map", absl::StrCat("has ", plan.reduce_final_map.size(),
                                                    " entries; need 2 x ", tiles));
  }
  for (int k = 0; k < tiles; ++k) {
    const int32_t qs = plan.reduce_final_map[2 * k], qe = plan.reduce_final_map[2 * k + 1];
    if (qs > qe || qs < 0 || qe > fqo.back()) {
      return Invalid(
          absl::StrCat("reduce_final_map[", k, "]"),
          absl::StrCat("(", qs, ", ", qe, ") outside the folded q tokens [0, ", fqo.back(), ")"));
    }
    for (int p = ri[k]; p < ri[k + 1]; ++p) {
      const int32_t loc = plan.reduce_partial_map[p];
      if (loc < 0 || int64_t{loc} + (qe - qs) > rows) {
        return Invalid(absl::StrCat("reduce_partial_map[", p, "]"),
                       absl::StrCat("rows [", loc, ", ", int64_t{loc} + (qe - qs),
                                    ") outside the partial buffer's ", rows, " rows"));
      }
    }
  }
  *partial_rows = rows;
  return absl::OkStatus();
}

// A piece's LSE counts in the merge only when finite (NaN / +inf / -inf count as -inf).
bool LiveLse(float lse) { return std::isfinite(lse); }

}  // namespace

absl::StatusOr<ExecutorOutput> ExecutePlan(const Batch& batch, const WorkPlan& plan,
                                           const DecodeInputs& inputs,
                                           const ExecutorOptions& options) {
  if (absl::Status s = ValidateDecodeInputs(batch, inputs); !s.ok()) return s;
  if (options.kv_block < 1) {
    return Invalid("kv_block", absl::StrCat(options.kv_block, " < 1"));
  }
  std::vector<int32_t> fqo;  // folded qo_indptr
  int64_t partial_rows = 0;
  if (absl::Status s = CheckStructure(batch, plan, options, &fqo, &partial_rows); !s.ok()) {
    return s;
  }
  const int r = plan.head_fold;
  const int num_v = batch.num_requests() * r;

  const int h = batch.num_heads;
  const int hg = h / r;  // heads per virtual request
  const int64_t total_q = batch.total_q_tokens();
  ExecutorOutput out;
  out.o.assign(total_q * h * kHeadDimV, 0.0f);
  out.lse.assign(total_q * h, kNegInf);
  out.partial_rows = partial_rows;
  out.partial_o.assign(partial_rows * hg * kHeadDimV, 0.0f);
  out.partial_lse.assign(partial_rows * hg, kNegInf);
  ExecutorStats& stats = out.stats;
  stats.num_cu = plan.num_cu;
  stats.works_per_cu.assign(plan.num_cu, 0);
  stats.kv_tokens_per_cu.assign(plan.num_cu, 0);

  std::vector<int32_t> token_v(fqo.back());
  for (int v = 0; v < num_v; ++v) {
    std::fill(token_v.begin() + fqo[v], token_v.begin() + fqo[v + 1], v);
  }
  std::vector<int32_t> final_writes(fqo.back(), 0);
  // Final O / LSE row of folded token t, head hh of its group.
  auto final_row = [&](int64_t t, int hh) -> int64_t {
    const int v = token_v[t], b = v / r, g = v % r;
    return (int64_t{batch.qo_indptr[b]} + (t - fqo[v])) * h + g * hg + hh;
  };

  const float logit_scale = static_cast<float>(inputs.sm_scale) *
                            static_cast<float>(inputs.q_scale) *
                            static_cast<float>(inputs.kv_scale);
  const float kv_scale = static_cast<float>(inputs.kv_scale);
  const KvVisibility visibility(batch, inputs.cp);
  const int page_size = batch.page_size;

  std::vector<const float*> k_rows;
  int64_t max_kv_len = 0;
  for (int b = 0; b < batch.num_requests(); ++b) max_kv_len = std::max(max_kv_len, batch.kv_len(b));
  // Final O is bf16, except where the caller merges it further first (CP ranks).
  auto final_o = [&](float x) { return options.final_o_bf16 ? RoundToBf16(x) : x; };
  std::vector<float> s(std::min<int64_t>(options.kv_block, max_kv_len)), acc(kHeadDimV);
  for (int cu = 0; cu < plan.num_cu; ++cu) {
    for (int w = plan.work_indptr[cu]; w < plan.work_indptr[cu + 1]; ++w) {
      const WorkInfo& x = plan.work_info[w];
      ++stats.works_per_cu[cu];
      ++(x.partial_qo_loc == kNoPartial ? stats.final_items : stats.partial_items);
      const int v = x.batch_idx, b = v / r, g = v % r;
      const int32_t base = batch.kv_indptr[b];
      const int64_t kv_len = batch.kv_len(b);
      const int64_t begin = std::min<int64_t>(int64_t{x.kv_start - base} * page_size, kv_len);
      const int64_t end = std::min<int64_t>(int64_t{x.kv_end - base} * page_size, kv_len);
      const int64_t mask_len = end + x.kv_offset;  // the kernel's view of L
      stats.kv_tokens_per_cu[cu] += std::max<int64_t>(0, end - begin);
      k_rows.clear();
      for (int64_t j = begin; j < end; ++j) {
        const int64_t page_idx = base + j / page_size;
        const int64_t page = inputs.kv_indices.empty() ? page_idx : inputs.kv_indices[page_idx];
        k_rows.push_back(inputs.kv_cache.data() + (page * page_size + j % page_size) * kHeadDimQk);
      }
      for (int64_t t = x.qo_start; t < x.qo_end; ++t) {
        const int token = static_cast<int>(t - fqo[v]);
        const int64_t q_row = int64_t{batch.qo_indptr[b]} + token;
        const int64_t vis_end =
            visibility.is_prefix() ? std::min(end, visibility.VisibleEnd(b, token, mask_len)) : end;
        for (int hh = 0; hh < hg; ++hh) {
          const float* q = inputs.q.data() + (q_row * h + g * hg + hh) * kHeadDimQk;
          float m = kNegInf, l = 0.0f;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j0 = begin; j0 < vis_end; j0 += options.kv_block) {
            const int64_t j1 = std::min<int64_t>(j0 + options.kv_block, vis_end);
            float mb = kNegInf;
            for (int64_t j = j0; j < j1; ++j) {
              float& sj = s[j - j0];
              if (visibility.is_prefix() || visibility.Visible(b, token, mask_len, j)) {
                sj = Dot576(q, k_rows[j - begin]) * logit_scale;
                mb = std::max(mb, sj);
              } else {
                sj = kNegInf;
              }
            }
            if (mb == kNegInf) continue;
            const float m_new = std::max(m, mb);
            const float alpha = std::exp(m - m_new);  // 0 while m == -inf
            l *= alpha;
            for (float& a : acc) a *= alpha;
            for (int64_t j = j0; j < j1; ++j) {
              if (s[j - j0] == kNegInf) continue;
              const float p = std::exp(s[j - j0] - m_new);
              l += p;
              const float* vrow = k_rows[j - begin];
              for (int d = 0; d < kHeadDimV; ++d) acc[d] += p * vrow[d];
            }
            m = m_new;
          }
          const bool empty = l == 0.0f;
          const float norm = empty ? 0.0f : kv_scale / l;
          const float lse = empty ? kNegInf : m + std::log(l);
          if (x.partial_qo_loc == kNoPartial) {
            const int64_t row = final_row(t, hh);
            float* o = out.o.data() + row * kHeadDimV;
            for (int d = 0; d < kHeadDimV; ++d) o[d] = final_o(acc[d] * norm);
            out.lse[row] = lse;
          } else {
            const int64_t row = (int64_t{x.partial_qo_loc} + (t - x.qo_start)) * hg + hh;
            float* o = out.partial_o.data() + row * kHeadDimV;
            for (int d = 0; d < kHeadDimV; ++d) o[d] = acc[d] * norm;
            out.partial_lse[row] = lse;
          }
        }
        if (x.partial_qo_loc == kNoPartial) ++final_writes[t];
      }
    }
  }

  // The reduce kernel: one entry per split qo tile.
  std::vector<float> merged(kHeadDimV);
  for (int k = 0; k < plan.num_reduce_tiles(); ++k) {
    ++stats.reduce_tiles;
    const int32_t qs = plan.reduce_final_map[2 * k], qe = plan.reduce_final_map[2 * k + 1];
    const int32_t p0 = plan.reduce_indptr[k], p1 = plan.reduce_indptr[k + 1];
    for (int64_t t = qs; t < qe; ++t) {
      for (int hh = 0; hh < hg; ++hh) {
        auto prow = [&](int p) {
          return (int64_t{plan.reduce_partial_map[p]} + (t - qs)) * hg + hh;
        };
        float g = kNegInf;
        for (int p = p0; p < p1; ++p) {
          const float lse = out.partial_lse[prow(p)];
          if (LiveLse(lse)) g = std::max(g, lse);
        }
        const int64_t row = final_row(t, hh);
        float* o = out.o.data() + row * kHeadDimV;
        if (g == kNegInf) {
          std::fill(o, o + kHeadDimV, 0.0f);
          out.lse[row] = kNegInf;
          continue;
        }
        float sum = 0.0f;
        for (int p = p0; p < p1; ++p) {
          const float lse = out.partial_lse[prow(p)];
          if (LiveLse(lse)) sum += std::exp(lse - g);
        }
        const float lse_final = g + std::log(sum);
        std::fill(merged.begin(), merged.end(), 0.0f);
        for (int p = p0; p < p1; ++p) {
          const float lse = out.partial_lse[prow(p)];
          if (!LiveLse(lse)) continue;
          const float wgt = std::exp(lse - lse_final);
          const float* po = out.partial_o.data() + prow(p) * kHeadDimV;
          for (int d = 0; d < kHeadDimV; ++d) merged[d] += wgt * po[d];
        }
        for (int d = 0; d < kHeadDimV; ++d) o[d] = final_o(merged[d]);
        out.lse[row] = lse_final;
      }
      ++final_writes[t];
    }
  }
  for (int32_t n : final_writes) {
    if (n == 0) ++stats.unwritten_tokens;
    if (n > 1) ++stats.rewritten_tokens;
  }
  return out;
}

Gates GatesFor(DType dtype) {
  Gates gates;
  gates.max_cos_diff = dtype == DType::kFp8 ? 3e-2 : 1e-5;
  return gates;
}

std::string Comparison::Summary() const {
  return absl::StrFormat(
      "%s: cos_diff %.3g, max_abs_err %.3g at O[%d] (row %d, dim %d: %.6g vs %.6g), "
      "%d/%d elements fail abs/rel (%.3g), O inf/NaN mask mismatches %d, LSE mismatches %d, "
      "LSE max abs err %.3g at LSE[%d]",
      passed ? "PASS" : "FAIL", cos_diff, max_abs_err, worst_index,
      worst_index < 0 ? -1 : worst_index / kHeadDimV,
      worst_index < 0 ? -1 : worst_index % kHeadDimV, worst_actual, worst_expected, num_failing,
      num_elements, fail_fraction, o_mask_mismatches, lse_mask_mismatches, lse_max_abs_err,
      lse_worst_index);
}

namespace {

// 0 finite, 1 +inf, 2 -inf, 3 NaN.
int ValueClass(double x) {
  if (std::isnan(x)) return 3;
  if (std::isinf(x)) return x > 0 ? 1 : 2;
  return 0;
}

}  // namespace

absl::StatusOr<Comparison> CompareOutputs(absl::Span<const float> o, absl::Span<const float> lse,
                                          absl::Span<const double> expected_o,
                                          absl::Span<const double> expected_lse,
                                          const Gates& gates) {
  if (o.size() != expected_o.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("o has ", o.size(), " elements but expected_o has ", expected_o.size()));
  }
  if (lse.size() != expected_lse.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lse has ", lse.size(), " elements but expected_lse has ", expected_lse.size()));
  }
  Comparison c;
  double sxy = 0, sxx_yy = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double x = o[i], y = expected_o[i];
    const int cx = ValueClass(x), cy = ValueClass(y);
    if (cx != cy) ++c.o_mask_mismatches;
    if (cx != 0 || cy != 0) continue;
    ++c.num_elements;
    sxy += x * y;
    sxx_yy += x * x + y * y;
    const double abs_err = std::fabs(x - y);
    const double rel_err = abs_err / std::max(std::fabs(y), 1e-300);
    if (!(abs_err < gates.abs_tol || rel_err < gates.rel_tol)) ++c.num_failing;
    if (c.worst_index < 0 || abs_err > c.max_abs_err) {
      c.max_abs_err = abs_err;
      c.worst_index = static_cast<int64_t>(i);
      c.worst_actual = x;
      c.worst_expected = y;
    }
  }
  c.cos_diff = sxx_yy > 0 ? 1.0 - 2.0 * sxy / sxx_yy : 0.0;
  c.fail_fraction = c.num_elements > 0 ? static_cast<double>(c.num_failing) / c.num_elements : 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    const double x = lse[i], y = expected_lse[i];
    const int cx = ValueClass(x), cy = ValueClass(y);
    if (cx != cy) ++c.lse_mask_mismatches;
    if (cx != 0 || cy != 0) continue;
    const double err = std::fabs(x - y);
    if (c.lse_worst_index < 0 || err > c.lse_max_abs_err) {
      c.lse_max_abs_err = err;
      c.lse_worst_index = static_cast<int64_t>(i);
    }
  }
  c.passed = c.cos_diff < gates.max_cos_diff && c.fail_fraction <= gates.max_fail_fraction &&
             c.o_mask_mismatches == 0 && c.lse_mask_mismatches == 0 &&
             c.lse_max_abs_err <= gates.max_lse_abs_err;
  return c;
}

}  // namespace mlaps::sim
