// Buffer sizing for persistent plan buffers (CUDA/HIP graph capture): a pure function of the
// maxima a serving engine is configured with, so buffers are allocated once and every plan
// for a batch within those maxima fits.
#ifndef MLAPS_METADATA_CAPACITY_H_
#define MLAPS_METADATA_CAPACITY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "metadata/batch.h"
#include "metadata/types.h"

namespace mlaps {

struct CapacityQuery {
  Arch arch = Arch::kSm90;
  DType q_dtype = DType::kBf16;
  DType kv_dtype = DType::kBf16;
  int num_heads = 16;
  int max_batch = 1;  // requests (sparse per-token mode: tokens T = B * qlen)
  int max_qlen = 1;   // q tokens per request (sparse: 1)
  int num_cu = 0;     // 0: the planner's default (DefaultNumCu(arch) x blocks_per_cu)
  bool cp_round_robin = false;
  bool lse = false;
};

// The maxima of one batch itself (its requests, its longest qlen): what PlanDecode sizes by.
CapacityQuery CapacityQueryOf(const Batch& batch, int num_cu, bool lse);

// Entries of each plan buffer (int32 words for work_info: 8 per work item), and bytes of
// the fp32 partial buffers.
struct PlanCapacity {
  int64_t qo_indptr = 0;           // folded, B * head_fold + 1
  int64_t work_indptr = 0;         // num_cu + 1
  int64_t work_info = 0;           // work items
  int64_t reduce_indptr = 0;       // split tiles + 1
  int64_t reduce_final_map = 0;    // 2 * split tiles
  int64_t reduce_partial_map = 0;  // split pieces
  int64_t partial_rows = 0;        // q-token rows of the partial buffers
  int64_t partial_o_bytes = 0;     // partial_rows * H * 512 * 4
  int64_t partial_lse_bytes = 0;   // partial_rows * H * 4
};

// Bounds (why they hold): every policy gives each CU at most one non-final piece (greedy
// payload moves on to the next CU after one; longest-first fills a CU's gap to within one
// split quantum, after which no further piece fits there), so a plan has at most num_cu
// non-final pieces; hence works <= tiles + num_cu, split tiles <= num_cu, pieces of split
// tiles <= 2 num_cu. Tiles per request are
// maximized over every qlen <= max_qlen and the variant that qlen resolves to.
// Errors: InvalidArgument for non-positive maxima; NotFound when no qlen in [1, max_qlen] has
// a kernel variant for the arch, dtypes and H.
absl::StatusOr<PlanCapacity> ComputePlanCapacity(const CapacityQuery& query);

}  // namespace mlaps

#endif  // MLAPS_METADATA_CAPACITY_H_
