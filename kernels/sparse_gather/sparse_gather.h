// The sparse KV index gather on the GPU: one launch turns a step's topk_indices into the packed
// per-token slots of the DSA MTP layout, the kept counts, the dense -1-padded form and the
// per-token drop status, exactly as metadata/sparse_gather_spec.h specifies and word for word
// what the CPU model (sim/sparse_gather.h) writes.
//
// Plain C++ (no GPU headers): usable from .cc files. The launch takes the stream as void*
// (a hipStream_t / cudaStream_t), enqueues one kernel, never synchronizes, and can be captured
// into a CUDA/HIP graph: everything that changes per step is read from device memory at run
// time; the dims and pointers are static per graph.
//
// Implementation (kernels/sparse_gather/sparse_gather.hip): one thread block of 256 threads per
// token. The row is staged in shared memory; duplicates are found with a bucket filter (one
// atomicOr per column) and, for the columns whose bucket is shared, an exact shared-memory
// hash table (position -> first column, atomicCAS + atomicMin, so the answer does not depend
// on thread timing); kept entries are compacted in column order with warp ballots and one
// scan of per-warp counts; the dense row and the span are written with coalesced stores.
// Shared memory: 32 KiB at topk 2048, 56 KiB at the limit topk 4096 (above 48 KiB the launch
// opts in).
#ifndef MLAPS_KERNELS_SPARSE_GATHER_H_
#define MLAPS_KERNELS_SPARSE_GATHER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "metadata/sparse_gather_spec.h"

namespace mlaps {

// The largest topk the kernel takes (its hash table and row live in shared memory).
inline constexpr int kGpuSparseGatherMaxTopk = 4096;

// Device pointers; sizes in `dims` (SparseGatherDims). int32 buffers, 4-byte aligned; 16-byte
// alignment of topk_indices and dense (and topk % 4 == 0) enables vector loads and stores.
struct GpuSparseGatherParams {
  SparseGatherDims dims;
  // ---- Inputs (read only) ----------------------------------------------------------------
  const int32_t* topk_indices = nullptr;      // [T, topk]
  const int32_t* token_to_seq = nullptr;      // [T]
  const int32_t* token_bound = nullptr;       // [T]
  const int32_t* sparse_kv_indptr = nullptr;  // [T + 1]
  const int32_t* block_table = nullptr;       // kBlockTable: [B, max_blocks]
  const int32_t* kv_indptr = nullptr;         // kFlat: [B + 1]
  const int32_t* kv_indices = nullptr;        // kFlat: [num_kv_indices]
  // ---- Outputs ---------------------------------------------------------------------------
  int32_t* packed = nullptr;  // [packed_capacity]; entries outside every span untouched
  int32_t* counts = nullptr;  // [T]
  int32_t* dense = nullptr;   // [T, topk]
  int32_t* status = nullptr;  // [T, kSparseGatherStatusWords]
  // ---- Diagnostics (the benchmark) -------------------------------------------------------
  // When set ([T, kGpuSparseGatherProfileSlots]), thread 0 of each live block writes: [0] the
  // wall clock (ns) at its start, [1]..[4] clock64() cycles from its start to the end of
  // staging (barrier), the bucket filter (barrier), the exact table of contested columns and
  // the compaction (barrier), [5] cycles to its last store issued, [6] the wall clock there,
  // [7] 0. Rows of empty (padded / error) rows: untouched.
  long long* profile = nullptr;
};

inline constexpr int kGpuSparseGatherProfileSlots = 8;

// OK when the params can be launched: ValidateSparseGatherDims(dims), topk <=
// kGpuSparseGatherMaxTopk, and every pointer a non-empty buffer needs present and 4-byte
// aligned (a buffer of 0 entries may be null). Errors: InvalidArgument naming the field.
absl::Status ValidateGpuSparseGatherParams(const GpuSparseGatherParams& params);

// Dynamic shared memory bytes of one block for `topk`.
int64_t GpuSparseGatherSharedBytes(int64_t topk);

// Enqueues the gather on `stream` (nullptr: the default stream). T = 0 enqueues nothing.
// Errors: those of ValidateGpuSparseGatherParams (nothing enqueued), or Internal with the
// HIP/CUDA error of the launch.
absl::Status LaunchGpuSparseGather(const GpuSparseGatherParams& params, void* stream);

}  // namespace mlaps

#endif  // MLAPS_KERNELS_SPARSE_GATHER_H_
