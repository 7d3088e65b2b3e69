// The work plan of the persistent decode kernel, in AITER's layout (so a plan dumped from
// AITER can be checked by mlaps, and ours can be fed to the same kernels).
#ifndef MLAPS_METADATA_WORK_PLAN_H_
#define MLAPS_METADATA_WORK_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace mlaps {

// One work item: work_info[i][0..7]. Ranges are half-open.
struct WorkInfo {
  int32_t batch_idx;       // virtual request v = b * head_fold + g
  int32_t partial_qo_loc;  // -1: whole qo tile, writes final O / LSE; else the first row of
                           // this piece in the fp32 partial buffers (rows are q tokens)
  int32_t qo_start;        // global q token in the folded qo_indptr
  int32_t qo_end;
  int32_t kv_start;  // global page index into kv_indices (request b's pages)
  int32_t kv_end;
  int32_t kv_offset;  // kv tokens after the piece's last token up to the request's end
  int32_t pad;        // 0
};
static_assert(sizeof(WorkInfo) == 8 * sizeof(int32_t), "work_info rows are 8 int32");

inline constexpr int32_t kNoPartial = -1;

// An owning plan. The same arrays can also live in caller-provided buffers (PlanBuffers in
// planner.h); this struct is what tools and tests hold.
struct WorkPlan {
  std::string variant;      // registry kernel name
  int rows_per_tile = 64;   // 64 | 128
  int tokens_per_tile = 1;  // q tokens per qo tile
  int head_fold = 1;        // r
  int num_cu = 0;
  int kv_lanes = 1;  // the planner's kv lanes (metadata/planner.h); 1 for a plan read back
  std::vector<int32_t> qo_indptr;           // folded: [B*r + 1]
  std::vector<int32_t> work_indptr;         // [num_cu + 1]
  std::vector<WorkInfo> work_info;          // [work_indptr[num_cu]]
  std::vector<int32_t> reduce_indptr;       // [split tiles + 1] into reduce_partial_map
  std::vector<int32_t> reduce_final_map;    // [split tiles][2]: qo_start, qo_end
  std::vector<int32_t> reduce_partial_map;  // [pieces]: partial_qo_loc of each piece
  int32_t num_partial_rows = 0;             // partial buffer rows in use

  int num_works() const { return static_cast<int>(work_info.size()); }
  int num_reduce_tiles() const {
    return reduce_indptr.empty() ? 0 : static_cast<int>(reduce_indptr.size()) - 1;
  }
};

}  // namespace mlaps

#endif  // MLAPS_METADATA_WORK_PLAN_H_
