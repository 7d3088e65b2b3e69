#include "metadata/sparse_layout.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaps {

absl::StatusOr<SparseLayout> MakeSparseLayout(Arch arch, DType dtype, int num_heads,
                                              absl::Span<const int32_t> context_lens, int qlen,
                                              int topk, int padded_batch) {
  if (qlen < 1) return absl::InvalidArgumentError(absl::StrCat("qlen = ", qlen, ": must be >= 1"));
  if (topk < 1) return absl::InvalidArgumentError(absl::StrCat("topk = ", topk, ": must be >= 1"));
  if (padded_batch < static_cast<int64_t>(context_lens.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "padded_batch = ", padded_batch, " is less than the batch size ", context_lens.size()));
  }
  const int64_t tokens = int64_t{padded_batch} * qlen;
  if (tokens * topk > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("T * topk = ", tokens, " * ", topk, " overflows int32"));
  }
  SparseLayout out;
  Batch& batch = out.batch;
  batch.arch = arch;
  batch.q_dtype = batch.kv_dtype = dtype;
  batch.num_heads = num_heads;
  batch.page_size = 1;
  batch.causal = false;
  batch.sparse_topk = topk;
  batch.qo_indptr.resize(tokens + 1);
  batch.kv_indptr.assign(1, 0);
  batch.kv_last_page_lens.assign(tokens, 1);
  for (int64_t t = 0; t <= tokens; ++t) batch.qo_indptr[t] = static_cast<int32_t>(t);
  for (int b = 0; b < padded_batch; ++b) {
    const bool real = b < static_cast<int>(context_lens.size());
    if (real && context_lens[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("context_lens[", b, "] = ", context_lens[b], ": must be >= 0"));
    }
    for (int j = 0; j < qlen; ++j) {
      const int64_t bound =
          real ? std::max<int64_t>(int64_t{context_lens[b]} - qlen + j + 1, 0) : 0;
      out.token_to_seq.push_back(real ? b : -1);
      out.token_bound.push_back(static_cast<int32_t>(bound));
      batch.kv_indptr.push_back(batch.kv_indptr.back() +
                                static_cast<int32_t>(std::min<int64_t>(bound, topk)));
    }
  }
  return out;
}

SparseCapacity ComputeSparseCapacity(int64_t max_tokens, int topk) {
  return {max_tokens * topk, max_tokens + 1};
}

}  // namespace mlaps
