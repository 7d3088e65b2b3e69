#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "metadata/registry.h"

namespace mlaps::sim {

CostParams BlockCostParams(const Batch& batch, const PlanOptions& o) {
  CostParams p;
  p.kv_granularity = o.kv_granularity;
  p.per_block = 1.0;
  p.per_item = o.fixed_overhead;
  p.max_split = o.max_split_per_batch;
  p.split_quantum = std::max(o.kv_granularity, batch.page_size);
  return p;
}

absl::StatusOr<CostParams> TimeCostParams(const Batch& batch, const PlanOptions& o,
                                          const WorkPlan& plan, const proto::CostModel& cost) {
  CostParams p = BlockCostParams(batch, o);
  const int rows = batch.num_heads / std::max(1, plan.head_fold) * plan.tokens_per_tile;
  // The entry of the occupancy the plan's grid runs: several blocks a CU exactly for a grid of
  // more than one block a CU (UseCompactLayout in kernels/decode/mla_decode_device.h). A grid
  // of one block a CU without an entry for the rows runs the one-block-a-CU kernel, whose cost
  // per kv block does not depend on the rows in use: the kernel-wide costs.
  // On sm90, the routed entry of the kernel the launcher runs the plan on where there is one.
  const UnitCosts unit = BatchUnitCosts(batch, cost, rows, plan.num_cu, p.kv_granularity);
  if (!(unit.ns_per_block > 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", plan.variant, "' has no calibrated cost for ", rows,
                     "-row tiles (ns_per_block = ", unit.ns_per_block, ")"));
  }
  p.per_block = unit.ns_per_block;
  p.per_item = unit.ns_per_item;
  return p;
}

absl::StatusOr<double> PredictedDecodeNs(const Batch& batch, const PlanOptions& options,
                                         const WorkPlan& plan) {
  absl::StatusOr<PlanOptions> resolved = ResolveOptions(batch, options);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<proto::CostModel> cost = VariantCost(batch.arch, plan.variant);
  if (!cost.ok()) return cost.status();
  absl::StatusOr<CostParams> params = TimeCostParams(batch, *resolved, plan, *cost);
  if (!params.ok()) return params.status();
  return EvaluatePlan(batch, plan, *params).makespan + cost->ns_per_launch();
}

int64_t ReducePartialRows(const Batch& batch, const WorkPlan& plan) {
  const int64_t heads = batch.num_heads / std::max(1, plan.head_fold);
  int64_t rows = 0;
  for (int t = 0; t < plan.num_reduce_tiles(); ++t) {
    const int64_t pieces = plan.reduce_indptr[t + 1] - plan.reduce_indptr[t];
    const int64_t tokens = plan.reduce_final_map[2 * t + 1] - plan.reduce_final_map[2 * t];
    rows += pieces * tokens * heads;
  }
  return rows;
}

absl::StatusOr<double> PredictedReduceNs(const Batch& batch, const WorkPlan& plan) {
  absl::StatusOr<proto::KernelRegistry> registry = LoadRegistry(batch.arch);
  if (!registry.ok()) return registry.status();
  return ReduceNs(registry->reduce(), ReducePartialRows(batch, plan));
}

double WorkItemCost(const Batch& batch, const WorkPlan& plan, const WorkInfo& w,
                    const CostParams& params) {
  const int fold = std::max(1, plan.head_fold);
  const bool causal_trim = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;
  const int b = w.batch_idx / fold;
  const int64_t base = batch.kv_indptr[b];
  const int64_t kv_len = batch.kv_len(b);
  // The tile's last token sees the most: L - q + (its index + 1) under the causal rule.
  const int64_t first_of_v =
      int64_t{batch.qo_indptr[b]} * fold + int64_t{w.batch_idx % fold} * batch.qlen(b);
  const int64_t last_token = w.qo_end - first_of_v;
  const int64_t visible = causal_trim ? kv_len - batch.qlen(b) + last_token : kv_len;
  const int64_t begin = (w.kv_start - base) * batch.page_size;
  const int64_t end = std::min({(w.kv_end - base) * int64_t{batch.page_size}, kv_len, visible});
  return std::ceil(std::max<int64_t>(end - begin, 0) / static_cast<double>(params.kv_granularity)) *
             params.per_block +
         params.per_item;
}

CostReport EvaluatePlan(const Batch& batch, const WorkPlan& plan, const CostParams& params) {
  CostReport r;
  r.cu_load.assign(plan.num_cu, 0.0);
  r.cu_items.assign(plan.num_cu, 0);
  const int fold = std::max(1, plan.head_fold);
  const bool causal_trim = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;
  const double g = params.kv_granularity;
  for (int c = 0; c < plan.num_cu; ++c) {
    for (int i = plan.work_indptr[c]; i < plan.work_indptr[c + 1]; ++i) {
      const double cost = WorkItemCost(batch, plan, plan.work_info[i], params);
      r.cu_load[c] += cost;
      r.cu_items[c] += 1;
      r.total += cost;
      ++r.works;
    }
  }
  r.makespan = r.cu_load.empty() ? 0 : *std::max_element(r.cu_load.begin(), r.cu_load.end());
  r.split_tiles = plan.num_reduce_tiles();
  r.pieces = static_cast<int>(plan.reduce_partial_map.size());

  // Lower bound over tiles (unsplit costs) and the largest piece a tile must keep.
  double unsplit = 0, largest_piece = 0;
  const double quantum_blocks = std::ceil(params.split_quantum / g);
  for (int v = 0; v + 1 < static_cast<int>(plan.qo_indptr.size()); ++v) {
    const int b = v / fold;
    const int q = batch.qlen(b);
    const int64_t kv_len = batch.kv_len(b);
    for (int t0 = 0; t0 < q; t0 += std::max(1, plan.tokens_per_tile)) {
      const int t1 = std::min(q, t0 + std::max(1, plan.tokens_per_tile));
      const int64_t kv = causal_trim ? kv_len - q + t1 : kv_len;
      if (kv <= 0) continue;
      const double blocks = std::ceil(kv / g);
      unsplit += blocks * params.per_block + params.per_item;
      double piece = params.max_split > 0 ? std::ceil(blocks / params.max_split)
                                          : std::min(blocks, quantum_blocks);
      largest_piece = std::max(largest_piece, piece * params.per_block + params.per_item);
    }
  }
  r.lower_bound = std::max(plan.num_cu > 0 ? unsplit / plan.num_cu : 0.0, largest_piece);
  return r;
}

}  // namespace mlaps::sim
