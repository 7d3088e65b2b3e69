// The fp64 reference of MLA decode: a direct dense computation, no plan, no splitting, the
// ground truth the numeric executor (executor.h) and the GPU kernels are compared with.
//
// Also the input description shared by the reference and the executor (DecodeInputs) and
// the visibility rule both apply (KvVisibility).
#ifndef MLAPS_SIM_REFERENCE_H_
#define MLAPS_SIM_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "metadata/batch.h"

namespace mlaps::sim {

// 1 / sqrt(576): the MLA softmax scale (sqrt(576) = 24).
inline constexpr double kDefaultSmScale = 1.0 / 24.0;

// CP round-robin hook: maps a rank's local kv tokens to global positions so the causal mask
// uses global positions (docs/design.md section 12). For request b, local kv token j (in
// [0, batch.kv_len(b))) is global position global_position(b, j); the request's global kv
// length is global_kv_len[b]; its q tokens are the same on every rank (qlen = batch.qlen(b)).
// Token i then sees local j iff global_position(b, j) < global_kv_len[b] - qlen + i + 1.
struct CpGlobalPositions {
  std::function<int64_t(int b, int64_t local_j)> global_position;
  std::vector<int64_t> global_kv_len;  // [B]
};

// The numeric inputs of one decode call. Values are floats holding exactly the values of
// the batch's dtypes: bf16 values, or fp8 code values (stored = Fp8Quantize(x, scale)) for
// fp8, i.e. the caller rounds via numerics.h. Spans are views; the caller owns the data.
struct DecodeInputs {
  absl::Span<const float> q;  // [total_q, H, 576], rows in batch.qo_indptr order
  // Paged KV cache [num_pages, page_size, 576] (one KV head); V = the first 512 of a row.
  // num_pages = kv_cache.size() / (page_size * 576).
  absl::Span<const float> kv_cache;
  // Page ids, batch.kv_indptr[B] entries: request b's pages are
  // kv_indices[kv_indptr[b] .. kv_indptr[b+1]). Empty: identity (page id = index).
  absl::Span<const int32_t> kv_indices;
  double sm_scale = kDefaultSmScale;
  // fp8 per-tensor descales (1 for bf16): logits are multiplied by
  // sm_scale * q_scale * kv_scale, O by kv_scale.
  double q_scale = 1.0;
  double kv_scale = 1.0;
  // Required for a causal cp_round_robin batch, ignored otherwise. Not owned.
  const CpGlobalPositions* cp = nullptr;
};

// Checks `inputs` against `batch`: ValidateBatch(batch); q of total_q * H * 576 floats;
// kv_cache a whole number (>= 0) of pages of page_size * 576 floats; kv_indices empty or
// kv_indptr[B] entries, each page id in [0, num_pages) (identity: kv_indptr[B] <= num_pages);
// scales finite and > 0; for a causal CP batch, cp present with a function and B global
// lengths. Errors: InvalidArgument naming the buffer (and index) and the sizes.
absl::Status ValidateDecodeInputs(const Batch& batch, const DecodeInputs& inputs);

// Which request-local kv tokens q token i (0-based within request b) may see:
//   sparse per-token batch (sparse_topk > 0) or non-causal: all of [0, L);
//   dense causal, not CP: j < L - q + i + 1 (bottom-right MTP rule);
//   causal CP round-robin: global_position(b, j) < global_L - q + i + 1.
// `kv_len` is the length L the rule uses (the executor passes the one it reconstructs from
// kv_offset). Preconditions: ValidateDecodeInputs passed.
class KvVisibility {
 public:
  KvVisibility(const Batch& batch, const CpGlobalPositions* cp);
  // True when visibility is the prefix [0, VisibleEnd(...)) (every mode but CP).
  bool is_prefix() const { return mode_ != Mode::kCp; }
  // Exclusive end of the visible prefix (clamped to >= 0). Only when is_prefix().
  int64_t VisibleEnd(int b, int token, int64_t kv_len) const;
  // Whether local kv token j is visible to token i of request b.
  bool Visible(int b, int token, int64_t kv_len, int64_t j) const;

 private:
  enum class Mode { kAll, kCausal, kCp };
  const Batch& batch_;
  const CpGlobalPositions* cp_;
  Mode mode_;
};

// fp64 results. Rows with no visible kv: O = 0, LSE = -inf.
struct ReferenceOutput {
  std::vector<double> o;    // [total_q, H, 512]
  std::vector<double> lse;  // [total_q, H], natural log of sum(exp(logit))
};

// The reference: for every q token and head, softmax over the visible kv tokens of
// logits q.k * sm_scale * q_scale * kv_scale (k = the full 576-wide kv row), O = softmax . V
// * kv_scale, all in double. Errors: those of ValidateDecodeInputs.
absl::StatusOr<ReferenceOutput> ReferenceDecode(const Batch& batch, const DecodeInputs& inputs);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_REFERENCE_H_
