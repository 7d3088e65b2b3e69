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

}  // namespace mlaps
