#include "sim/sparse_gather.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaps::sim {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

absl::Status WrongSize(const char* buffer, int64_t size, int64_t expected, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("sparse gather: ", buffer, " has ", size,
                                                 " entries; expected ", what, " = ", expected));
}

// The slot of request-local position v of request s, or -1 when the map has none
// (kSparseDropUnmapped). Preconditions: 0 <= s < B, v >= 0, ValidateSparseGather passed.
int64_t MapSlot(const SparseKvMap& map, int64_t s, int64_t v) {
  if (map.form == SparseMapForm::kBlockTable) {
    const int64_t block = v / map.page_size;
    if (block >= map.max_blocks) return -1;
    const int64_t entry = map.block_table[s * map.max_blocks + block];
    if (entry < 0) return -1;
    const int64_t slot = entry * map.page_size + v % map.page_size;
    return slot > kInt32Max ? -1 : slot;
  }
  const int64_t lo = map.kv_indptr[s], hi = map.kv_indptr[s + 1];
  if (lo < 0 || lo > hi || hi > static_cast<int64_t>(map.kv_indices.size())) return -1;
  if (v >= hi - lo) return -1;
  const int64_t slot = map.kv_indices[lo + v];
  return slot < 0 ? -1 : slot;
}

}  // namespace

SparseGatherDims DimsOf(const SparseGatherInputs& inputs, int64_t packed_capacity) {
  SparseGatherDims d;
  d.num_tokens = static_cast<int64_t>(inputs.token_to_seq.size());
  d.topk = inputs.topk;
  d.num_requests = inputs.map.num_requests;
  d.map_form = inputs.map.form;
  d.page_size = inputs.map.page_size;
  d.max_blocks = inputs.map.max_blocks;
  d.num_kv_indices = static_cast<int64_t>(inputs.map.kv_indices.size());
  d.packed_capacity = packed_capacity;
  return d;
}

absl::Status ValidateSparseGather(const SparseGatherInputs& inputs,
                                  const SparseGatherOutputs& outputs) {
  const SparseGatherDims d = DimsOf(inputs, static_cast<int64_t>(outputs.packed.size()));
  if (absl::Status s = ValidateSparseGatherDims(d); !s.ok()) return s;
  const int64_t t = d.num_tokens;
  auto size = [](auto span) { return static_cast<int64_t>(span.size()); };
  if (size(inputs.topk_indices) != SparseTopkEntries(d)) {
    return WrongSize("topk_indices", size(inputs.topk_indices), SparseTopkEntries(d), "T * topk");
  }
  if (size(inputs.token_bound) != t) {
    return WrongSize("token_bound", size(inputs.token_bound), t, "T (token_to_seq's size)");
  }
  if (size(inputs.sparse_kv_indptr) != t + 1) {
    return WrongSize("sparse_kv_indptr", size(inputs.sparse_kv_indptr), t + 1, "T + 1");
  }
  if (d.map_form == SparseMapForm::kBlockTable) {
    if (size(inputs.map.block_table) != SparseBlockTableEntries(d)) {
      return WrongSize("block_table", size(inputs.map.block_table), SparseBlockTableEntries(d),
                       "B * max_blocks");
    }
  } else if (size(inputs.map.kv_indptr) != d.num_requests + 1) {
    return WrongSize("kv_indptr", size(inputs.map.kv_indptr), d.num_requests + 1, "B + 1");
  }
  if (size(outputs.counts) != t) return WrongSize("counts", size(outputs.counts), t, "T");
  if (size(outputs.dense) != SparseTopkEntries(d)) {
    return WrongSize("dense", size(outputs.dense), SparseTopkEntries(d), "T * topk");
  }
  if (size(outputs.status) != SparseStatusEntries(d)) {
    return WrongSize("status", size(outputs.status), SparseStatusEntries(d),
                     "T * kSparseGatherStatusWords");
  }
  return absl::OkStatus();
}

absl::Status SparseGatherInto(const SparseGatherInputs& inputs,
                              const SparseGatherOutputs& outputs) {
  if (absl::Status s = ValidateSparseGather(inputs, outputs); !s.ok()) return s;
  const int64_t num_tokens = static_cast<int64_t>(inputs.token_to_seq.size());
  const int64_t topk = inputs.topk;
  const int64_t capacity = static_cast<int64_t>(outputs.packed.size());
  const int64_t num_requests = inputs.map.num_requests;

  std::vector<int32_t> reason(topk);                     // per column: drop reason or -1 kept
  std::vector<int64_t> slot(topk);                       // per column: slot when kept
  std::vector<std::pair<int32_t, int32_t>> by_position;  // (v, column) of in-bound entries
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t s = inputs.token_to_seq[t];
    const int64_t bound = inputs.token_bound[t];
    const int64_t lo = inputs.sparse_kv_indptr[t], hi = inputs.sparse_kv_indptr[t + 1];
    int32_t* status = outputs.status.data() + t * kSparseGatherStatusWords;
    int32_t* dense = outputs.dense.data() + t * topk;
    std::fill(status, status + kSparseGatherStatusWords, 0);

    // Row checks, in the spec's order.
    int32_t row_error = kSparseRowOk;
    if (lo < 0 || lo > hi || hi > capacity) {
      row_error = kSparseRowBadSpan;
    } else if (s < -1 || s >= num_requests) {
      row_error = kSparseRowBadSeq;
    } else if (s >= 0 && bound < 0) {
      row_error = kSparseRowBadBound;
    } else if (s >= 0 && hi - lo < std::min(bound, topk)) {
      row_error = kSparseRowSpanTooSmall;
    }
    status[kSparseStatusRowError] = row_error;

    int64_t kept = 0;
    if (row_error == kSparseRowOk && s >= 0) {
      const int32_t* row = inputs.topk_indices.data() + t * topk;
      // Rules 1, 2; then rule 3 by sorting the in-bound entries by (position, column).
      by_position.clear();
      for (int64_t c = 0; c < topk; ++c) {
        const int64_t v = row[c];
        if (v < 0) {
          reason[c] = kSparseDropInvalid;
        } else if (v >= bound) {
          reason[c] = kSparseDropOutOfBound;
        } else {
          reason[c] = -1;
          by_position.emplace_back(static_cast<int32_t>(v), static_cast<int32_t>(c));
        }
      }
      std::sort(by_position.begin(), by_position.end());
      for (size_t k = 1; k < by_position.size(); ++k) {
        if (by_position[k].first == by_position[k - 1].first) {
          reason[by_position[k].second] = kSparseDropDuplicate;
        }
      }
      // Rule 4, then the kept ones in column order.
      for (int64_t c = 0; c < topk; ++c) {
        if (reason[c] != -1) continue;
        slot[c] = MapSlot(inputs.map, s, row[c]);
        if (slot[c] < 0) reason[c] = kSparseDropUnmapped;
      }
      for (int64_t c = 0; c < topk; ++c) {
        if (reason[c] == -1) {
          dense[kept++] = static_cast<int32_t>(slot[c]);
        } else {
          ++status[reason[c]];
        }
      }
    }
    std::fill(dense + kept, dense + topk, -1);
    outputs.counts[t] = static_cast<int32_t>(kept);
    if (row_error != kSparseRowBadSpan) {
      int32_t* span = outputs.packed.data() + lo;
      std::copy(dense, dense + kept, span);
      std::fill(span + kept, span + (hi - lo), -1);
    }
  }
  return absl::OkStatus();
}

int64_t SparseGatherResult::Total(int column) const {
  int64_t total = 0;
  for (size_t i = column; i < status.size(); i += kSparseGatherStatusWords) total += status[i];
  return total;
}

absl::StatusOr<SparseGatherResult> SparseGather(const SparseGatherInputs& inputs,
                                                int64_t packed_capacity) {
  if (packed_capacity < 0) {
    if (inputs.sparse_kv_indptr.empty() || inputs.sparse_kv_indptr.back() < 0) {
      return absl::InvalidArgumentError(
          "sparse gather: packed_capacity -1 needs sparse_kv_indptr[T] >= 0");
    }
    packed_capacity = inputs.sparse_kv_indptr.back();
  }
  const SparseGatherDims d = DimsOf(inputs, packed_capacity);
  if (absl::Status s = ValidateSparseGatherDims(d); !s.ok()) return s;
  SparseGatherResult r;
  r.packed.assign(packed_capacity, -1);
  r.counts.assign(d.num_tokens, 0);
  r.dense.assign(SparseTopkEntries(d), -1);
  r.status.assign(SparseStatusEntries(d), 0);
  const SparseGatherOutputs outputs{absl::MakeSpan(r.packed), absl::MakeSpan(r.counts),
                                    absl::MakeSpan(r.dense), absl::MakeSpan(r.status)};
  if (absl::Status s = SparseGatherInto(inputs, outputs); !s.ok()) return s;
  return r;
}

absl::StatusOr<GatheredBatch> CompactSparseBatch(const Batch& layout_batch,
                                                 absl::Span<const int32_t> sparse_kv_indptr,
                                                 absl::Span<const int32_t> packed,
                                                 absl::Span<const int32_t> counts) {
  const int64_t t = static_cast<int64_t>(counts.size());
  if (layout_batch.num_requests() != t || layout_batch.page_size != 1 ||
      layout_batch.sparse_topk <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CompactSparseBatch: layout_batch must be a sparse per-token batch of T = ", t,
        " requests with page size 1; it has ", layout_batch.num_requests(), " requests, page size ",
        layout_batch.page_size, ", sparse_topk ", layout_batch.sparse_topk));
  }
  if (static_cast<int64_t>(sparse_kv_indptr.size()) != t + 1) {
    return WrongSize("sparse_kv_indptr", sparse_kv_indptr.size(), t + 1, "T + 1");
  }
  GatheredBatch out;
  out.batch = layout_batch;
  out.batch.kv_indptr.assign(1, 0);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t lo = sparse_kv_indptr[i], hi = sparse_kv_indptr[i + 1];
    if (lo < 0 || lo > hi || hi > static_cast<int64_t>(packed.size())) {
      return absl::InvalidArgumentError(absl::StrCat("CompactSparseBatch: token ", i, "'s span [",
                                                     lo, ", ", hi, ") is not inside packed (",
                                                     packed.size(), " entries)"));
    }
    if (counts[i] < 0 || counts[i] > hi - lo) {
      return absl::InvalidArgumentError(absl::StrCat("CompactSparseBatch: counts[", i,
                                                     "] = ", counts[i], " outside [0, ", hi - lo,
                                                     "] (its span)"));
    }
    out.kv_indices.insert(out.kv_indices.end(), packed.begin() + lo,
                          packed.begin() + lo + counts[i]);
    out.batch.kv_indptr.push_back(static_cast<int32_t>(out.kv_indices.size()));
  }
  return out;
}

}  // namespace mlaps::sim
