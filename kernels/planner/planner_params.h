// The static part of the GPU planner's params (planner_kernel.h) from a host batch and what
// the host planner resolved for it: the batch constants, the kernel variant and the resolved
// options, exactly as PlanDecodeInto plans with them. Device pointers, capacities and the
// tuning fields are the caller's.
#ifndef MLAPS_KERNELS_PLANNER_PLANNER_PARAMS_H_
#define MLAPS_KERNELS_PLANNER_PLANNER_PARAMS_H_

#include "kernels/planner/planner_kernel.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/registry.h"

namespace mlaps {

// `options` and `variant` as ResolvePlan (or ResolveOptions / ResolveVariant) gives them for
// `batch`, num_cu the grid actually planned; `max_qlen` >= every request's qlen.
inline GpuPlannerParams StaticPlannerParams(const Batch& batch, const PlanOptions& options,
                                            const ResolvedVariant& variant, int max_qlen) {
  GpuPlannerParams p;
  p.num_requests = batch.num_requests();
  p.max_qlen = max_qlen;
  p.num_heads = batch.num_heads;
  p.page_size = batch.page_size;
  p.causal_trim = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;
  p.sparse_topk = batch.sparse_topk;
  p.head_fold = variant.head_fold;
  p.tokens_per_tile = variant.tokens_per_tile;
  p.num_cu = options.num_cu;
  p.kv_granularity = options.kv_granularity;
  p.fixed_overhead = options.fixed_overhead;
  p.max_split_per_batch = options.max_split_per_batch;
  p.policy = static_cast<int>(options.policy);
  p.kv_lanes = options.kv_lanes;
  return p;
}

}  // namespace mlaps

#endif  // MLAPS_KERNELS_PLANNER_PLANNER_PARAMS_H_
