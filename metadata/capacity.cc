#include "metadata/capacity.h"

#include <algorithm>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "metadata/registry.h"

namespace mlaps {

CapacityQuery CapacityQueryOf(const Batch& batch, int num_cu, bool lse) {
  CapacityQuery q;
  q.arch = batch.arch;
  q.q_dtype = batch.q_dtype;
  q.kv_dtype = batch.kv_dtype;
  q.num_heads = batch.num_heads;
  q.max_batch = batch.num_requests();
  q.max_qlen = batch.max_qlen();
  q.num_cu = num_cu;
  q.cp_round_robin = batch.cp_round_robin;
  q.lse = lse;
  return q;
}

absl::StatusOr<PlanCapacity> ComputePlanCapacity(const CapacityQuery& query) {
  if (query.max_batch < 1 || query.max_qlen < 1 || query.num_cu < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity needs max_batch >= 1 (got ", query.max_batch, "), max_qlen >= 1 (got ",
        query.max_qlen, ") and num_cu >= 0 (got ", query.num_cu, ")"));
  }
  // The planner's default grid grows with the variant's blocks_per_cu: take the largest.
  int64_t num_cu = query.num_cu;
  int64_t max_fold = 0, max_tiles_per_request = 0, max_tokens_per_tile = 0;
  absl::Status last_error;
  // The matching rows only change where some Serves range starts or ends, and within a
  // range tiles per request grow with qlen, so the candidates below cover the maximum
  // without visiting every qlen up to max_qlen (which may be large).
  absl::btree_set<int> candidates = {1, query.max_qlen};
  const absl::StatusOr<proto::KernelRegistry> registry = LoadRegistry(query.arch);
  if (registry.ok()) {
    for (const proto::KernelRow& row : registry->kernel()) {
      for (const proto::Serves& s : row.serves()) {
        for (int64_t q : {int64_t{s.qlen_min()} - 1, int64_t{s.qlen_min()}, int64_t{s.qlen_max()},
                          int64_t{s.qlen_max()} + 1}) {
          if (q >= 1 && q <= query.max_qlen) candidates.insert(static_cast<int>(q));
        }
      }
    }
  }
  for (int qlen : candidates) {
    VariantQuery vq{query.arch, query.q_dtype,        query.kv_dtype, query.num_heads,
                    qlen,       query.cp_round_robin, query.lse};
    absl::StatusOr<ResolvedVariant> v = ResolveVariant(vq);
    if (!v.ok()) {
      last_error = v.status();
      continue;
    }
    if (query.num_cu == 0) {
      num_cu = std::max<int64_t>(num_cu, int64_t{DefaultNumCu(query.arch)} * v->blocks_per_cu);
    }
    max_fold = std::max<int64_t>(max_fold, v->head_fold);
    max_tokens_per_tile = std::max<int64_t>(max_tokens_per_tile, v->tokens_per_tile);
    const int64_t tiles =
        int64_t{v->head_fold} * ((qlen + v->tokens_per_tile - 1) / v->tokens_per_tile);
    max_tiles_per_request = std::max(max_tiles_per_request, tiles);
  }
  if (max_fold == 0) return last_error;
  const int64_t max_tiles = max_tiles_per_request * query.max_batch;
  PlanCapacity c;
  c.qo_indptr = query.max_batch * max_fold + 1;
  c.work_indptr = num_cu + 1;
  c.work_info = max_tiles + num_cu;
  const int64_t split_tiles = std::min(max_tiles, num_cu);
  c.reduce_indptr = split_tiles + 1;
  c.reduce_final_map = 2 * split_tiles;
  c.reduce_partial_map = std::min(2 * num_cu, max_tiles + num_cu);
  c.partial_rows = c.reduce_partial_map * max_tokens_per_tile;
  c.partial_o_bytes = c.partial_rows * query.num_heads * kHeadDimV * 4;
  c.partial_lse_bytes = c.partial_rows * query.num_heads * 4;
  return c;
}

}  // namespace mlaps
