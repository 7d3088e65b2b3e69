// Host side of one context-parallel rank (docs/design.md "CP round-robin"): what rank r of W
// needs before its GPU step (kernels/cp/cp_rank_runner.h) can run. From the global batch it
// takes the rank's round-robin shard (metadata/cp_shard.h), resolves the plan's static
// inputs exactly as PlanDecodeInto resolves them (options, variant, persistent buffer
// capacities: what the GPU planner needs, kernels/planner/planner_kernel.h), and lays out the
// rank's own KV cache: the shard's sub-pages of I tokens copied out of the global cache into
// contiguous local pages (page_size = I, local kv_indices 0..n-1), so that a rank holds only
// its tokens. Plain C++ (no GPU headers): the CPU tests check it against the host planner and
// the simulator (tests/kernels/cp/cp_rank_setup_test.cc).
#ifndef MLAPS_KERNELS_CP_CP_RANK_SETUP_H_
#define MLAPS_KERNELS_CP_CP_RANK_SETUP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "metadata/batch.h"
#include "metadata/capacity.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "metadata/registry.h"

namespace mlaps::cp {

struct CpRankSetup {
  int rank = 0;
  CpSharding sharding;
  // The shard as the rank stores it: view.batch (page_size = I, cp_round_robin = true) with
  // local_kv_indices 0..n-1 into the rank's own cache of n sub-pages; view.kv_indices are
  // the sub-page ids of the same tokens in the global cache (what to copy from).
  CpShardView view;
  std::vector<int32_t> local_kv_indices;
  std::vector<int32_t> global_kv_len;  // [B] the mask's L per request (int32 for the kernel)
  // The plan's static inputs, resolved as PlanDecodeInto resolves them for view.batch.
  PlanOptions options;  // num_cu already multiplied by the variant's blocks_per_cu
  ResolvedVariant variant;
  PlanCapacity capacity;  // buffers any plan of this batch shape fits
  int max_qlen = 1;
  int64_t rows = 0;  // q tokens x heads of the global batch (= the shard's)
};

// Errors: MakeCpShardView's, ResolveOptions', ResolveVariant's, ComputePlanCapacity's;
// InvalidArgument when `options` asks for a policy the GPU planner does not run.
absl::StatusOr<CpRankSetup> MakeCpRankSetup(const Batch& global,
                                            absl::Span<const int32_t> global_kv_indices,
                                            const CpSharding& sharding, int rank,
                                            const PlanOptions& options = {});

// The rank's own cache, [max(1, n) sub-pages][I][576] floats: sub-page k is the global
// cache's sub-page view.kv_indices[k] (the global cache viewed as I-token sub-pages). One
// zero sub-page when the rank holds no token (the kernel needs a cache to point at).
std::vector<float> GatherShardCache(const CpRankSetup& setup,
                                    absl::Span<const float> global_kv_cache);

// Where rank `source`'s (O, LSE) lands in every rank's gather buffers, in elements: the
// layout ncclAllGather produces from W equal sends (rank-major), what
// kernels/cp/lse_merge.h reads. O rows are 512 floats (kHeadDimV).
inline int64_t GatherOffsetO(int source, int64_t rows) { return source * rows * 512; }
inline int64_t GatherOffsetLse(int source, int64_t rows) { return source * rows; }

}  // namespace mlaps::cp

#endif  // MLAPS_KERNELS_CP_CP_RANK_SETUP_H_
