// Context-parallel round-robin sharding of KV (interleaved): with W ranks and interleave I,
// global position p lives on rank (p / I) % W at local index (p / (I*W)) * I + p % I.
#ifndef MLAPS_METADATA_CP_SHARD_H_
#define MLAPS_METADATA_CP_SHARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
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

// Rank `rank`'s shard of a (validated, dense) global batch as the rank stores it in a cache
// of its own: the same q tokens, local kv lengths laid out contiguously in the rank's own
// pages of the global page size, cp_round_robin = true.
absl::StatusOr<Batch> MakeCpShardBatch(const Batch& global, const CpSharding& s, int rank);

// Rank `rank`'s shard as a view into the one global paged cache, without copying KV: the
// global cache [num_pages, page_size, 576] is viewed as sub-pages of I tokens
// ([num_pages * page_size / I, I, 576]); every run of I consecutive positions lives in one
// sub-page and belongs to one rank, so the rank's kv_indices are the sub-page ids of its
// runs, in global order.
struct CpShardView {
  Batch batch;                         // page_size = I, cp_round_robin = true
  std::vector<int32_t> kv_indices;     // sub-page ids into the global cache's I-token view
  std::vector<int64_t> global_kv_len;  // [B]: L of each request (the mask's length)
};

struct CpShardOptions {
  // The kernel variant needs every rank to hold at least one kv token of every request
  // (false for mlaps' kernels: an empty shard gives O = 0, LSE = -inf).
  bool require_nonempty_shards = false;
};

// Errors: ValidateSharding's; InvalidArgument for a rank outside [0, W), kv_indices of the
// wrong size (empty means identity), or, with require_nonempty_shards, a request shorter
// than W * I tokens (naming it).
absl::StatusOr<CpShardView> MakeCpShardView(const Batch& global,
                                            absl::Span<const int32_t> global_kv_indices,
                                            const CpSharding& s, int rank,
                                            const CpShardOptions& options = {});

}  // namespace mlaps

#endif  // MLAPS_METADATA_CP_SHARD_H_
