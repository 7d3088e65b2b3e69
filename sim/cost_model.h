// The cost model: per-CU load of a plan, makespan, and the lower bound no plan can beat.
// Cost of a work item = ceil(visible kv tokens / kv_granularity) * ns_per_block + ns_per_item
// (in blocks when the unit costs are 1 and fixed_overhead).
#ifndef MLAPS_SIM_COST_MODEL_H_
#define MLAPS_SIM_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/proto/mlaps.pb.h"
#include "metadata/work_plan.h"

namespace mlaps::sim {

struct CostParams {
  int kv_granularity = 16;
  double per_block = 1.0;  // cost of one kv block of one qo tile
  double per_item = 1.0;   // fixed cost of one work item (blocks: PlanOptions.fixed_overhead)
  int max_split = 0;       // the plan's max_split_per_batch (0: unlimited), for the bound
  int split_quantum = 16;  // kv tokens: max(kv_granularity, page_size)
};

// Unit costs in blocks, matching the planner's accounting for `options` (resolved).
CostParams BlockCostParams(const Batch& batch, const PlanOptions& resolved_options);

struct CostReport {
  std::vector<double> cu_load;  // [num_cu]
  std::vector<int> cu_items;    // [num_cu]
  double total = 0;             // sum of item costs
  double makespan = 0;          // max cu_load
  double lower_bound = 0;       // max(sum of unsplit tile costs / num_cu, largest piece)
  int works = 0;
  int split_tiles = 0;  // reduce tiles
  int pieces = 0;       // items of split tiles
  double balance() const { return lower_bound > 0 ? makespan / lower_bound : 1.0; }
};

// Unit costs in nanoseconds from a calibrated cost model (the registry row of plan.variant,
// see VariantCost): on sm90 the routed entry (CostModel.routed) of the kernel the launcher runs
// the plan on (Sm90DecodeKernelName in metadata/decode_route.h), its rows and kv_granularity
// where the model has one; else the tile entry for the plan's rows in use ((H / head_fold) *
// tokens_per_tile) and the occupancy its grid runs (blocks_per_cu > 1 for a plan of more than
// DefaultNumCu(arch) CUs, where a one-block entry stands in when there is no such entry; one
// block a CU otherwise), else the model's ns_per_block /
// ns_per_item; block costs scale with the plan's kv_granularity over the model's
// (cost.kv_granularity). Makespans are then
// predicted kernel times in ns (the decode alone: launch and reduce not included).
// Errors: FailedPrecondition when the model has no entry for the rows and no positive
// kernel-wide ns_per_block (not calibrated).
absl::StatusOr<CostParams> TimeCostParams(const Batch& batch, const PlanOptions& resolved_options,
                                          const WorkPlan& plan, const proto::CostModel& cost);

// The decode time (ns) the simulator predicts for `plan` of `batch`: its makespan under the
// calibrated costs of plan.variant in the embedded registry of batch.arch (VariantCost, then
// TimeCostParams with the resolved `options`) plus the model's ns_per_launch. Errors: those of
// ResolveOptions, VariantCost and TimeCostParams (FailedPrecondition for an uncalibrated variant,
// e.g. the AMD ones).
absl::StatusOr<double> PredictedDecodeNs(const Batch& batch, const PlanOptions& options,
                                         const WorkPlan& plan);

// The partial rows the reduce of `plan` reads: over its split tiles, pieces x q tokens x
// heads of a group (batch.num_heads / plan.head_fold).
int64_t ReducePartialRows(const Batch& batch, const WorkPlan& plan);

// The reduce time (ns) the simulator predicts for `plan`: ReduceNs (metadata/registry.h) under the
// embedded registry's reduce entry for batch.arch (0 for a plan without split tiles, or an
// uncalibrated entry). Errors: those of LoadRegistry.
absl::StatusOr<double> PredictedReduceNs(const Batch& batch, const WorkPlan& plan);

// Cost of one item of `plan` (its visible kv blocks, plus the per-item cost).
double WorkItemCost(const Batch& batch, const WorkPlan& plan, const WorkInfo& item,
                    const CostParams& params);

// Precondition: the plan passed CheckPlan for this batch.
CostReport EvaluatePlan(const Batch& batch, const WorkPlan& plan, const CostParams& params);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_COST_MODEL_H_
