// A decode batch as a serving engine describes it, and its validation.
#ifndef MLAPS_METADATA_BATCH_H_
#define MLAPS_METADATA_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "metadata/types.h"

namespace mlaps {

// The batch. Request b has q tokens [qo_indptr[b], qo_indptr[b+1]) and KV pages
// [kv_indptr[b], kv_indptr[b+1]) of kv_indices; its KV token length is
// (pages_b - 1) * page_size + kv_last_page_lens[b] (0 when it has no pages).
struct Batch {
  Arch arch = Arch::kSm90;
  DType q_dtype = DType::kBf16;
  DType kv_dtype = DType::kBf16;
  int num_heads = 16;                      // H: 16, 32, 48, 64 or 128
  int page_size = 1;                       // power of two
  std::vector<int32_t> qo_indptr;          // [B+1]
  std::vector<int32_t> kv_indptr;          // [B+1]
  std::vector<int32_t> kv_last_page_lens;  // [B]
  // Bottom-right MTP causal rule: token i of a request with kv length L and qlen q sees
  // kv positions < L - q + i + 1.
  bool causal = true;
  // This batch is one rank's shard in CP round-robin: no local causal trim, the kernel
  // masks by global positions.
  bool cp_round_robin = false;
  // > 0: a sparse per-token batch (see sparse_layout.h): every request is one q token whose
  // kv (already trimmed to min(L_j, topk)) is not causally masked again.
  int sparse_topk = 0;

  int num_requests() const { return static_cast<int>(qo_indptr.size()) - 1; }
  int qlen(int b) const { return qo_indptr[b + 1] - qo_indptr[b]; }
  int num_pages(int b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
  // KV tokens of request b. Precondition: ValidateBatch passed.
  int64_t kv_len(int b) const {
    const int pages = num_pages(b);
    return pages == 0 ? 0 : int64_t{pages - 1} * page_size + kv_last_page_lens[b];
  }
  int max_qlen() const;
  int64_t total_q_tokens() const { return qo_indptr.empty() ? 0 : qo_indptr.back(); }
};

// Every malformed input returns InvalidArgument naming the field, the index and the value:
// sizes (qo_indptr and kv_indptr of B+1 >= 2 entries, kv_last_page_lens of B), indptrs
// starting at 0, non-decreasing and non-negative; last page lengths in [1, page_size]
// (a request with zero pages must carry any value in [0, page_size]); page_size a power of
// two in [1, 1<<20]; num_heads in {16, 32, 48, 64, 128}; every request with qlen >= 1 (dense)
// or exactly 1 (sparse); kv length >= qlen when causal (dense, not CP); totals that would
// overflow int32 (tokens, pages, kv tokens) rejected.
absl::Status ValidateBatch(const Batch& batch);

// Helpers to build batches in tests, tools and benchmarks.
// Uniform: B requests of qlen tokens and kv_len tokens each, pages laid out contiguously.
Batch MakeUniformBatch(Arch arch, DType dtype, int num_heads, int batch_size, int qlen, int kv_len,
                       int page_size);
// Varlen: request b has kv_lens[b] tokens (>= 1) and qlen tokens.
Batch MakeVarlenBatch(Arch arch, DType dtype, int num_heads, absl::Span<const int> kv_lens,
                      int qlen, int page_size);

}  // namespace mlaps

#endif  // MLAPS_METADATA_BATCH_H_
