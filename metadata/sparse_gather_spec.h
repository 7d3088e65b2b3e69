// The sparse KV index gather of the DSA MTP per-token layout (sparse_layout.h), specified once.
// Two implementations follow this contract bit for bit: the CPU model (sim/sparse_gather.h)
// and the HIP kernel (kernels/sparse_gather/sparse_gather.h);
// tests/kernels/sparse_gather/sparse_gather_test.hip compares every output word of the two.
//
// ---- Inputs (T tokens, topk columns, B requests; all int32) ---------------------------------
//   topk_indices      [T, topk]  request-local kv positions each token selected; -1 padded
//   token_to_seq      [T]        the request of each token; -1: a graph-padded row
//   token_bound       [T]        L_j: the positions token j may attend (SparseLayout::token_bound)
//   sparse_kv_indptr  [T + 1]    token t's span of `packed` is [indptr[t], indptr[t+1]);
//                                MakeSparseLayout's batch.kv_indptr (min(L_j, topk) per token)
//   the request -> slot map, in one of two forms:
//     kBlockTable: block_table [B, max_blocks], page_size a power of two:
//                  slot(req, pos) = block_table[req, pos / page_size] * page_size
//                                   + pos % page_size
//     kFlat:       kv_indptr [B + 1], kv_indices [num_kv_indices] (page size 1):
//                  slot(req, pos) = kv_indices[kv_indptr[req] + pos]
//
// ---- Outputs (caller buffers; int32) ---------------------------------------------------------
//   packed  [packed_capacity]   the kept slots of token t in its span, in column order, from
//                               indptr[t]; the rest of the span is -1 (see "Spans" below)
//   counts  [T]                 slots kept (written to the span's prefix) per token
//   dense   [T, topk]           row t: the same kept slots, then -1 up to topk
//   status  [T, kSparseGatherStatusWords]
//                               per token: dropped entries by reason (columns
//                               SparseDropReason), then the row error (SparseRowError)
//
// ---- Rules, for token t with request s = token_to_seq[t], L = token_bound[t] --------------
// Row checks, first failing one wins (its code goes to status[t][kSparseStatusRowError]):
//   kSparseRowBadSpan      not 0 <= indptr[t] <= indptr[t+1] <= packed_capacity
//   kSparseRowBadSeq       s < -1 or s >= B
//   kSparseRowBadBound     s >= 0 and L < 0
//   kSparseRowSpanTooSmall s >= 0 and indptr[t+1] - indptr[t] < min(L, topk), the most
//                          entries a token can keep
// A row with an error, and a padded row (s = -1), keeps nothing: counts[t] = 0, dense row all
// -1, drop counts 0 (the padded row's entries are not looked at), and its span all -1 unless
// the error is kSparseRowBadSpan (then no packed entry is written for it).
//
// Entries of a live row (s >= 0, no row error), column c = 0 .. topk-1 with value v, are
// classified by the first rule that matches:
//   1. kSparseDropInvalid      v < 0 (-1 padding or any other negative value)
//   2. kSparseDropOutOfBound   v >= L
//   3. kSparseDropDuplicate    an earlier column of the row holds the same v: the first
//                              occurrence is the one judged by rule 4 and possibly kept, every
//                              later one is dropped here (even when the first is unmapped)
//   4. kSparseDropUnmapped     no slot for (s, v):
//                              kBlockTable: v / page_size >= max_blocks, or the entry
//                                block_table[s, v / page_size] < 0, or the slot exceeds INT32_MAX;
//                              kFlat: not 0 <= kv_indptr[s] <= kv_indptr[s+1] <= num_kv_indices,
//                                or v >= kv_indptr[s+1] - kv_indptr[s], or the entry < 0
//   5. kept                    slot(s, v), appended after the row's earlier kept slots
// So kept entries form a prefix in column order; nothing is ever mapped to slot 0 that a map
// entry does not say is slot 0. For a live row counts[t] + the four drop counts = topk, and
// counts[t] <= min(L, topk) <= its span.
//
// Spans: token t's span entries [indptr[t], indptr[t] + counts[t]) get the kept slots and
// [indptr[t] + counts[t], indptr[t+1]) get -1, so a consumer that reads whole spans reads -1
// (an invalid page id), never a stale or made-up slot. When entries were dropped, a decode
// must use counts (sim/sparse_gather.h CompactSparseBatch rebuilds the indptr from them).
// Packed entries outside every span are never written. If some row has kSparseRowBadSpan the
// indptr is not monotonic and the spans of other rows may overlap; what overlapping spans hold
// is then unspecified (the GPU writes them in any order) but nothing is written outside
// [0, packed_capacity).
//
// Neither implementation reads or writes outside the buffers these dims describe, whatever
// the values in them: every value read from an input is range-checked before it is used as an
// index. The dims themselves are checked by ValidateSparseGatherDims.
#ifndef MLAPS_METADATA_SPARSE_GATHER_SPEC_H_
#define MLAPS_METADATA_SPARSE_GATHER_SPEC_H_

#include <cstdint>

#include "absl/status/status.h"

namespace mlaps {

enum class SparseMapForm : int32_t {
  kBlockTable = 0,  // block_table [B, max_blocks] + page_size
  kFlat = 1,        // kv_indptr [B + 1] + kv_indices, page size 1
};

// Columns of a token's status row.
enum SparseDropReason : int32_t {
  kSparseDropInvalid = 0,     // -1 padding or another negative position
  kSparseDropOutOfBound = 1,  // position >= L_j
  kSparseDropUnmapped = 2,    // the map has no slot for the position
  kSparseDropDuplicate = 3,   // the position already appeared earlier in the row
};
inline constexpr int kSparseNumDropReasons = 4;
inline constexpr int kSparseStatusRowError = 4;  // the status column holding SparseRowError
inline constexpr int kSparseGatherStatusWords = 5;

enum SparseRowError : int32_t {
  kSparseRowOk = 0,
  kSparseRowBadSpan = 1,
  kSparseRowBadSeq = 2,
  kSparseRowBadBound = 3,
  kSparseRowSpanTooSmall = 4,
};

// The sizes every buffer of one gather call is checked against.
struct SparseGatherDims {
  int64_t num_tokens = 0;    // T >= 0
  int64_t topk = 0;          // >= 1; T * topk <= INT32_MAX
  int64_t num_requests = 0;  // B >= 0 (rows of block_table, or kv_indptr has B + 1 entries)
  SparseMapForm map_form = SparseMapForm::kBlockTable;
  int64_t page_size = 1;        // kBlockTable: a power of two in [1, 2^20]
  int64_t max_blocks = 0;       // kBlockTable: columns of block_table, >= 0;
                                //   B * max_blocks <= INT32_MAX
  int64_t num_kv_indices = 0;   // kFlat: entries of kv_indices, in [0, INT32_MAX]
  int64_t packed_capacity = 0;  // entries of `packed`, in [0, INT32_MAX]
};

// Buffer sizes in int32 entries implied by `dims`.
int64_t SparseTopkEntries(const SparseGatherDims& dims);        // T * topk (topk_indices, dense)
int64_t SparseStatusEntries(const SparseGatherDims& dims);      // T * kSparseGatherStatusWords
int64_t SparseBlockTableEntries(const SparseGatherDims& dims);  // B * max_blocks (kBlockTable)

// OK when every dim is in the range its comment gives. Errors: InvalidArgument naming the dim
// and its value.
absl::Status ValidateSparseGatherDims(const SparseGatherDims& dims);

}  // namespace mlaps

#endif  // MLAPS_METADATA_SPARSE_GATHER_SPEC_H_
