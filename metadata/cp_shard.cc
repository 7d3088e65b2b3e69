#include "metadata/cp_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mlaps {

absl::Status ValidateSharding(const CpSharding& s, int page_size) {
  if (s.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp world_size = ", s.world_size, ": must be >= 1"));
  }
  if (s.interleave < 1 || (s.interleave & (s.interleave - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp interleave = ", s.interleave, ": must be a power of two"));
  }
  if (page_size > 0 && page_size % s.interleave != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp interleave = ", s.interleave, " does not divide page_size = ", page_size));
  }
  return absl::OkStatus();
}

int64_t CpLocalLength(int64_t kv_len, int rank, const CpSharding& s) {
  const int64_t cycle = int64_t{s.interleave} * s.world_size;
  const int64_t rem = kv_len % cycle;
  return (kv_len / cycle) * s.interleave +
         std::clamp<int64_t>(rem - int64_t{rank} * s.interleave, 0, s.interleave);
}

absl::StatusOr<Batch> MakeCpShardBatch(const Batch& global, const CpSharding& s, int rank) {
  if (absl::Status st = ValidateSharding(s, global.page_size); !st.ok()) return st;
  if (rank < 0 || rank >= s.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp rank = ", rank, ": must be in [0, ", s.world_size, ")"));
  }
  std::vector<int> local(global.num_requests());
  for (int b = 0; b < global.num_requests(); ++b) {
    local[b] = static_cast<int>(CpLocalLength(global.kv_len(b), rank, s));
  }
  Batch shard =
      MakeVarlenBatch(global.arch, global.q_dtype, global.num_heads, local, 1, global.page_size);
  shard.kv_dtype = global.kv_dtype;
  shard.qo_indptr = global.qo_indptr;
  shard.causal = global.causal;
  shard.cp_round_robin = true;
  return shard;
}

absl::StatusOr<CpShardView> MakeCpShardView(const Batch& global,
                                            absl::Span<const int32_t> global_kv_indices,
                                            const CpSharding& s, int rank,
                                            const CpShardOptions& options) {
  if (absl::Status st = ValidateSharding(s, global.page_size); !st.ok()) return st;
  if (rank < 0 || rank >= s.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp rank = ", rank, ": must be in [0, ", s.world_size, ")"));
  }
  const int32_t used_pages = global.kv_indptr.back();
  if (!global_kv_indices.empty() && global_kv_indices.size() != static_cast<size_t>(used_pages)) {
    return absl::InvalidArgumentError(absl::StrCat("kv_indices has ", global_kv_indices.size(),
                                                   " entries; kv_indptr[B] = ", used_pages));
  }
  const int sub_per_page = global.page_size / s.interleave;
  CpShardView view;
  std::vector<int> local(global.num_requests());
  for (int b = 0; b < global.num_requests(); ++b) {
    const int64_t kv_len = global.kv_len(b);
    if (options.require_nonempty_shards && kv_len < int64_t{s.world_size} * s.interleave) {
      return absl::InvalidArgumentError(absl::StrCat("request ", b, " has kv_len = ", kv_len,
                                                     " < W * I = ", s.world_size * s.interleave,
                                                     ": some rank would hold none of it"));
    }
    local[b] = static_cast<int>(CpLocalLength(kv_len, rank, s));
    view.global_kv_len.push_back(kv_len);
    // The rank's runs: global sub-pages rank, rank + W, rank + 2W, ... of this request.
    const int64_t runs = (local[b] + s.interleave - 1) / s.interleave;
    for (int64_t k = 0; k < runs; ++k) {
      const int64_t p = (k * s.world_size + rank) * s.interleave;  // first position of the run
      const int64_t page_slot = global.kv_indptr[b] + p / global.page_size;
      const int32_t page = global_kv_indices.empty() ? static_cast<int32_t>(page_slot)
                                                     : global_kv_indices[page_slot];
      view.kv_indices.push_back(page * sub_per_page +
                                static_cast<int32_t>((p % global.page_size) / s.interleave));
    }
  }
  view.batch =
      MakeVarlenBatch(global.arch, global.q_dtype, global.num_heads, local, 1, s.interleave);
  view.batch.kv_dtype = global.kv_dtype;
  view.batch.qo_indptr = global.qo_indptr;
  view.batch.causal = global.causal;
  view.batch.cp_round_robin = true;
  return view;
}

}  // namespace mlaps
