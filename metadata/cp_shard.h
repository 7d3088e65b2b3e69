// Context-parallel round-robin sharding of KV (interleaved): with W ranks and interleave I,
// global position p lives on rank (p / I) % W at local index (p / (I*W)) * I + p % I.
#ifndef MLAPS_METADATA_CP_SHARD_H_
#define MLAPS_METADATA_CP_SHARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "metadata/batch.h"

namespace mlaps {

struct CpSharding {
  int world_size = 1;  // W >= 1
  int interleave = 1;  // I, a power of two (1: token granular)
};

// Errors: InvalidArgument for W < 1, I not a power of two, or (when page_size > 0) I not
// dividing the page size (an interleave run would straddle pages).
absl::Status ValidateSharding(const CpSharding& s, int page_size = 0);

inline int CpOwner(int64_t p, const CpSharding& s) {
  return static_cast<int>((p / s.interleave) % s.world_size);
}
inline int64_t CpLocalIndex(int64_t p, const CpSharding& s) {
  return (p / (int64_t{s.interleave} * s.world_size)) * s.interleave + p % s.interleave;
}
inline int64_t CpGlobalPosition(int rank, int64_t j, const CpSharding& s) {
  return (j / s.interleave) * s.interleave * s.world_size + int64_t{rank} * s.interleave +
         j % s.interleave;
}
// Tokens of a length-L sequence that rank `rank` holds.
int64_t CpLocalLength(int64_t kv_len, int rank, const CpSharding& s);

// Rank `rank`'s shard of a (validated, dense) global batch: the same q tokens, local kv
// lengths laid out contiguously in the rank's own pages, cp_round_robin = true.
absl::StatusOr<Batch> MakeCpShardBatch(const Batch& global, const CpSharding& s, int rank);

}  // namespace mlaps

#endif  // MLAPS_METADATA_CP_SHARD_H_
