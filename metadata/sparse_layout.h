// The sparse (DSA) MTP per-token layout: T = B * qlen virtual sequences of one q token each.
// Token j of request b (kv length L, qlen q) may attend L_j = max(L - q + j + 1, 0) positions
// and keeps min(L_j, topk) of them; graph-padded rows get 0.
#ifndef MLAPS_METADATA_SPARSE_LAYOUT_H_
#define MLAPS_METADATA_SPARSE_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "metadata/batch.h"

namespace mlaps {

struct SparseLayout {
  // qo_indptr = arange(T + 1); kv_indptr = sparse_kv_indptr (page size 1, so pages are
  // slots); last page lens 1; sparse_topk = topk; causal = false (already trimmed).
  Batch batch;
  std::vector<int32_t> token_to_seq;  // [T]: request of each token, -1 for padded rows
  std::vector<int32_t> token_bound;   // [T]: L_j (positions the token may attend)
};

// Errors: InvalidArgument for qlen < 1, topk < 1, padded_batch < context_lens.size(), a
// negative context length, or T * topk overflowing int32.
absl::StatusOr<SparseLayout> MakeSparseLayout(Arch arch, DType dtype, int num_heads,
                                              absl::Span<const int32_t> context_lens, int qlen,
                                              int topk, int padded_batch);

// Entries of the persistent sparse buffers for up to max_tokens tokens: the packed slots
// (max_tokens * topk) and sparse_kv_indptr (max_tokens + 1).
struct SparseCapacity {
  int64_t slots = 0;
  int64_t kv_indptr = 0;
};
SparseCapacity ComputeSparseCapacity(int64_t max_tokens, int topk);

}  // namespace mlaps

#endif  // MLAPS_METADATA_SPARSE_LAYOUT_H_
