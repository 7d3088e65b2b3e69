// The persistent-scheduling planner: splits a batch's attention into work items over the
// compute units, in AITER's WorkPlan layout (work_plan.h).
//
// Pipeline: ValidateBatch -> ResolveVariant (registry) -> qo tiles -> policy assigns kv pieces
// of tiles to CUs -> layout (work_indptr / work_info / reduce maps).
#ifndef MLAPS_METADATA_PLANNER_H_
#define MLAPS_METADATA_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "metadata/batch.h"
#include "metadata/capacity.h"
#include "metadata/registry.h"
#include "metadata/work_plan.h"

namespace mlaps {

enum class PlanPolicy {
  // AITER v1.2 / FlashMLA: payload = ceil(total / num_cu) + overhead; fill CUs in order,
  // splitting a tile when a CU's payload runs out.
  kGreedyPayload,
  // Tiles larger than the payload are wrapped over the CUs first (as greedy payload does);
  // then the rest, longest first, each whole to the least-loaded CU while it fits under the
  // same payload; only tiles that fit nowhere are split, into the largest gaps. Same
  // makespan bound, far fewer split tiles (and reduce work) when tiles are small.
  kLongestFirst,
};
absl::string_view PolicyName(PlanPolicy policy);
absl::StatusOr<PlanPolicy> ParsePolicy(absl::string_view name);

struct PlanOptions {
  int num_cu = 0;               // persistent blocks (the grid); 0: DefaultNumCu(batch.arch)
                                // x the variant's blocks_per_cu for the plan's tiles
  int kv_granularity = 0;       // kv tokens per cost block, a power of two; 0: AITER's
                                // max(16, page_size), so splits fall on page boundaries
  int fixed_overhead = -1;      // blocks per work item; -1: BatchFixedOverhead's choice
  int max_split_per_batch = 0;  // most pieces per qo tile; 0: no limit beyond num_cu
  PlanPolicy policy = PlanPolicy::kGreedyPayload;
  bool lse = false;  // the caller needs LSE (restricts the variant)
  // Most kv lanes (KvLanes below) for greedy_payload; 0: the arch's default
  // (DefaultKvLanes: kMaxKvLanes on sm90, 1 on the AMD archs); 1: none. The GPU planner
  // walks lanes too (GpuPlannerParams::kv_lanes: pass the resolved value).
  int kv_lanes = 0;
};

// kv lanes: when every request with kv has the same number M of qo tiles (uniform qlen; H = 128
// folds into 2 head groups), the greedy walk runs once per lane on its own CU group
// [l * num_cu / L, (l + 1) * num_cu / L) over the tiles whose index inside their request is
// l mod L (the tile order becomes lane-major). The groups' walks are alike, so the CUs
// that read one request's kv do so at the same time and all but one read hit the L2 instead
// of HBM (the decode of H = 128 or qlen > 64 / H reads the kv once). L is the largest
// divisor of M that also divides num_cu, at most the option's cap; otherwise 1.
inline constexpr int kMaxKvLanes = 8;
int DefaultKvLanes(Arch arch);

// One qo tile: `tokens` q tokens of virtual request v (head group g of request b) and the kv
// tokens [0, kv_tokens) of request b it must attend (causally trimmed in dense MTP mode).
struct QoTile {
  int32_t v;                 // virtual request b * head_fold + g
  int32_t b;                 // request
  int32_t qo_start, qo_end;  // folded global q tokens
  int32_t first_token;       // index of qo_start's token within its request
  int64_t kv_tokens;         // visible kv tokens (request-local, from position 0)
  int64_t kv_len;            // the request's kv length L
  int64_t blocks;            // cost: ceil(kv_tokens / kv_granularity)
  int32_t lane = 0;          // kv lane (LaneMajorTiles); 0 without lanes
  int32_t tokens() const { return qo_end - qo_start; }
};

// The kv lanes of a plan over `tiles` (request order, BuildTiles) on num_cu CUs (see
// PlanOptions::kv_lanes), at most max_lanes (>= 1).
int KvLanes(absl::Span<const QoTile> tiles, int num_cu, int max_lanes);

// KvLanes of the plan of a batch whose requests all have qlen q tokens (and kv): its requests
// have head_fold * ceil(qlen / tokens_per_tile) tiles each. What a decode launch that did not
// see the plan being made passes as MlaDecodeParams::cu_lanes (the C API's mlaps_kv_lanes):
// placement only, any divisor of num_cu computes the same output.
int UniformKvLanes(const ResolvedVariant& variant, int qlen, int num_cu, int max_lanes);

// A contiguous kv piece of a tile assigned to one CU: request-local kv tokens
// [kv_begin, kv_end).
struct Assignment {
  int32_t tile;
  int32_t cu;
  int64_t kv_begin, kv_end;
};

// The registry query of a batch: its arch, dtypes, H, largest qlen and CP flag.
VariantQuery VariantQueryOf(const Batch& batch, bool lse);

// The item charge of a calibrated variant, batch-independent: its cost of one item in cost
// blocks of kv_granularity tokens, rounded up (the tiles' entry at the occupancy of a grid of
// num_cu blocks, num_cu 0 the default grid: TileUnitCosts); else AITER's max(1, ceil(16 /
// page_size)). At least 1. Charging items what they cost keeps the greedy payload from
// stacking many short items on one CU and from splitting a tile to save less time than its
// extra item (e.g. on the H200, 128 x 8192 tokens at (16, 4): 128 tiles on 132 CUs run whole
// instead of split in two). PlanOptions::fixed_overhead -1 starts from it (BatchFixedOverhead).
int DefaultFixedOverhead(const ResolvedVariant& variant, Arch arch, int page_size,
                         int kv_granularity, int num_cu);

// The reduce of a plan that splits a tile at each of the grid's CU boundaries (the most the
// greedy walk cuts), in ns: its launch plus, a split, two fp32 partials of `rows` rows read
// back (2 x rows x ns_per_partial_row), `grid` times. 0 when the reduce is not calibrated.
double SplitReduceNs(const proto::ReduceCost& reduce, int rows, int grid);

// The unit costs of `batch`'s plans on a grid of num_cu blocks with `rows`-row tiles at
// kv_granularity: on sm90 the registry's routed entry (CostModel.routed) of the kernel the
// launcher runs them on (Sm90DecodeKernelName, metadata/decode_route.h) where there is one,
// else TileUnitCosts (several blocks a CU for num_cu > DefaultNumCu). BatchFixedOverhead and the
// simulator (sim::TimeCostParams) cost plans with it.
UnitCosts BatchUnitCosts(const Batch& batch, const proto::CostModel& cost, int rows, int num_cu,
                         int kv_granularity);

// The item charge PlanOptions::fixed_overhead -1 resolves to for `batch`: `options` (resolved,
// num_cu the grid planned) carry DefaultFixedOverhead; the charge of DefaultFixedOverhead's item
// plus SplitReduceNs (a CU may then run that much over the mean load before the walk splits a tile
// there) replaces it when the registry's costs predict its plan faster (busiest CU + reduce; ties
// keep the item charge), for kv blocks of whole pages (page_size >= 64) and where the item plan's
// predicted reduce is at most a tenth of its busiest CU. Past that (short items) the reduce's cost,
// timed alone, overstates what it adds after the bf16 hi + lo kernel, whose plans keep the item
// charge; plans on the f16 P V kernel take the least charge with which an empty CU holds the
// largest tile, where that plan splits no tile and is predicted faster (fp8 32 x 1024 (64,2): whole
// tiles 44.4 us against 61.1 split on the H100, notes.md session 39). The split charge pays where
// whole tiles fill the CUs evenly enough (e.g. on the H200, 128 x 8192 at fp8 (64, 2): 256 tiles on
// 132 CUs, two a CU, with no reduce, 6% faster than split at every CU boundary) and is not taken
// where the larger payload would only lengthen the busiest CU (mixed long and short requests).
// Uncalibrated variants keep options.fixed_overhead. It walks the batch twice more on the host
// (planner_bench, 2 cores: b = 1024 H16 0.11 -> 0.40 ms a plan, b = 1024 H128 qlen 4 3.5 -> 8.1
// ms); an explicit fixed_overhead skips it.
int BatchFixedOverhead(const Batch& batch, const ResolvedVariant& variant,
                       const PlanOptions& options);

// The options with defaults filled in and checked against the batch. num_cu 0 becomes
// DefaultNumCu(arch); PlanDecode then multiplies that default by the variant's
// blocks_per_cu (the plan's num_cu is the grid actually planned).
// Errors: InvalidArgument naming the option and value.
absl::StatusOr<PlanOptions> ResolveOptions(const Batch& batch, const PlanOptions& options);

// What PlanDecodeInto plans a batch with, for callers that size buffers or pass the resolved
// values on (the GPU planner's params): the options resolved, num_cu the grid actually
// planned (the default grid times the variant's blocks_per_cu when options.num_cu is 0),
// the variant at the batch's largest qlen, and the buffer capacity for that grid.
struct ResolvedPlan {
  PlanOptions options;
  ResolvedVariant variant;
  PlanCapacity capacity;
};
absl::StatusOr<ResolvedPlan> ResolvePlan(const Batch& batch, const PlanOptions& options);

// The qo tiles of a (validated) batch under a resolved variant, in request order (request,
// head group, token tile).
std::vector<QoTile> BuildTiles(const Batch& batch, const ResolvedVariant& variant,
                               int kv_granularity);

// The tiles reordered lane-major for `lanes` kv lanes (lane l: every request's tiles with index
// l mod lanes inside the request, in request order); the plan order. lanes = 1: unchanged.
std::vector<QoTile> LaneMajorTiles(std::vector<QoTile> tiles, int lanes);

// Policies: assign every tile with kv_tokens > 0 to CUs as pieces. Pieces of one tile are
// emitted in kv order; split boundaries are multiples of max(kv_granularity, page_size).
// Greedy payload with lanes > 1 takes the tiles lane-major (LaneMajorTiles) and walks each
// lane's equal share of them on its CU group (num_cu must be a multiple of lanes).
std::vector<Assignment> AssignGreedyPayload(absl::Span<const QoTile> tiles,
                                            const PlanOptions& options, int page_size,
                                            int lanes = 1);

std::vector<Assignment> AssignLongestFirst(absl::Span<const QoTile> tiles,
                                           const PlanOptions& options, int page_size);

// Caller-provided output arrays (device-mirrored persistent buffers under graph capture).
// Sizes come from PlanCapacity (capacity.h).
struct PlanBuffers {
  absl::Span<int32_t> qo_indptr;           // folded, >= B * head_fold + 1
  absl::Span<int32_t> work_indptr;         // >= num_cu + 1
  absl::Span<WorkInfo> work_info;          // >= works
  absl::Span<int32_t> reduce_indptr;       // >= split tiles + 1
  absl::Span<int32_t> reduce_final_map;    // >= 2 * split tiles
  absl::Span<int32_t> reduce_partial_map;  // >= pieces of split tiles
};

// What PlanDecodeInto wrote: the used prefix of each buffer.
struct PlanSizes {
  ResolvedVariant variant;
  int num_cu = 0;
  int kv_lanes = 1;              // KvLanes of the plan
  int num_virtual_requests = 0;  // B * head_fold
  int num_works = 0;
  int num_reduce_tiles = 0;
  int num_reduce_pieces = 0;
  int32_t num_partial_rows = 0;
};

// Plans into caller buffers. Errors: InvalidArgument (bad batch or options, named), NotFound
// (no kernel variant for the shape; lists the nearest supported ones), ResourceExhausted
// (a buffer is too small: names the buffer, its size and the size needed; nothing is written
// past any span's end, and buffers are left unmodified).
absl::StatusOr<PlanSizes> PlanDecodeInto(const Batch& batch, const PlanOptions& options,
                                         const PlanBuffers& buffers);

// Plans into a freshly sized owning WorkPlan.
absl::StatusOr<WorkPlan> PlanDecode(const Batch& batch, const PlanOptions& options);

}  // namespace mlaps

#endif  // MLAPS_METADATA_PLANNER_H_
