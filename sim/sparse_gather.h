// The CPU model of the sparse KV index gather (contract: metadata/sparse_gather_spec.h),
// word for word what the HIP kernel (kernels/sparse_gather/sparse_gather.h) writes; plus the step
// from a gather's outputs to the batch a decode consumes.
#ifndef MLAPS_SIM_SPARSE_GATHER_H_
#define MLAPS_SIM_SPARSE_GATHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "metadata/batch.h"
#include "metadata/sparse_gather_spec.h"

namespace mlaps::sim {

// The request -> slot map (one of the two forms of the spec). Views; the caller owns the data.
struct SparseKvMap {
  SparseMapForm form = SparseMapForm::kBlockTable;
  int num_requests = 0;  // B
  // kBlockTable: [B, max_blocks] row-major, page_size a power of two.
  absl::Span<const int32_t> block_table;
  int max_blocks = 0;
  int page_size = 1;
  // kFlat: kv_indptr [B + 1] into kv_indices.
  absl::Span<const int32_t> kv_indptr;
  absl::Span<const int32_t> kv_indices;
};

struct SparseGatherInputs {
  int topk = 0;
  absl::Span<const int32_t> topk_indices;      // [T, topk]; T = token_to_seq.size()
  absl::Span<const int32_t> token_to_seq;      // [T]
  absl::Span<const int32_t> token_bound;       // [T]
  absl::Span<const int32_t> sparse_kv_indptr;  // [T + 1]
  SparseKvMap map;
};

// Caller buffers. packed may be any size (its size is packed_capacity); the others are sized
// exactly: counts [T], dense [T * topk], status [T * kSparseGatherStatusWords].
struct SparseGatherOutputs {
  absl::Span<int32_t> packed;
  absl::Span<int32_t> counts;
  absl::Span<int32_t> dense;
  absl::Span<int32_t> status;
};

// The dims of a call (packed_capacity from `packed_capacity`).
SparseGatherDims DimsOf(const SparseGatherInputs& inputs, int64_t packed_capacity);

// Checks the spans against the dims: ValidateSparseGatherDims, topk_indices of T * topk,
// token_bound of T, sparse_kv_indptr of T + 1, block_table of B * max_blocks (kBlockTable) or
// kv_indptr of B + 1 (kFlat), outputs as above. Values inside the spans are not checked here:
// the gather judges them per row and entry (the spec's row errors and drop reasons).
// Errors: InvalidArgument naming the buffer, its size and the size expected.
absl::Status ValidateSparseGather(const SparseGatherInputs& inputs,
                                  const SparseGatherOutputs& outputs);

// Runs the gather into caller buffers (the spec's outputs; packed entries outside every span
// are left as they were). Errors: those of ValidateSparseGather, before anything is written.
absl::Status SparseGatherInto(const SparseGatherInputs& inputs, const SparseGatherOutputs& outputs);

// Owning outputs.
struct SparseGatherResult {
  std::vector<int32_t> packed;  // [packed_capacity]; entries outside every span are -1
  std::vector<int32_t> counts;  // [T]
  std::vector<int32_t> dense;   // [T, topk]
  std::vector<int32_t> status;  // [T, kSparseGatherStatusWords]

  // status[token][column].
  int32_t Status(int64_t token, int column) const {
    return status[token * kSparseGatherStatusWords + column];
  }
  // Sum over tokens of one status column.
  int64_t Total(int column) const;
};

// Runs the gather into fresh buffers; packed_capacity -1 means sparse_kv_indptr[T] (which must
// then be >= 0).
absl::StatusOr<SparseGatherResult> SparseGather(const SparseGatherInputs& inputs,
                                                int64_t packed_capacity = -1);

// The batch and kv_indices a decode consumes after a gather: `layout_batch` (MakeSparseLayout's
// per-token batch, page size 1) with kv_indptr rebuilt as the exclusive scan of `counts` and
// kv_indices the first counts[t] entries of each token's span, concatenated. With nothing
// dropped this is layout_batch and the packed buffer's used prefix unchanged.
struct GatheredBatch {
  Batch batch;
  std::vector<int32_t> kv_indices;
};
// Errors: InvalidArgument when layout_batch is not a per-token batch of T = counts.size()
// requests with page size 1, sparse_kv_indptr is not T + 1 monotone entries inside packed, or
// some count is negative or exceeds its span.
absl::StatusOr<GatheredBatch> CompactSparseBatch(const Batch& layout_batch,
                                                 absl::Span<const int32_t> sparse_kv_indptr,
                                                 absl::Span<const int32_t> packed,
                                                 absl::Span<const int32_t> counts);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_SPARSE_GATHER_H_
