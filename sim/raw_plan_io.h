// Reading plans and batches that an engine dumped as raw little-endian int32 arrays, e.g.
// `tensor.cpu().numpy().tofile(path)` for AITER's work_indptr, work_info_set, reduce_indptr,
// reduce_final_map, reduce_partial_map and the batch's qo_indptr, kv_indptr,
// kv_last_page_lens.
#ifndef MLAPS_SIM_RAW_PLAN_IO_H_
#define MLAPS_SIM_RAW_PLAN_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "metadata/batch.h"
#include "metadata/work_plan.h"

namespace mlaps::sim {

// The whole file as int32 values. Errors: NotFound (cannot open), InvalidArgument (size not a
// multiple of 4), both naming the path.
absl::StatusOr<std::vector<int32_t>> ReadInt32File(const std::string& path);

// Reads DIR/{work_indptr,work_info_set,reduce_indptr,reduce_final_map,reduce_partial_map}.bin
// into a WorkPlan (num_cu = entries of work_indptr - 1; work_info_set must hold 8 int32 per
// item; head_fold as given). Missing reduce files mean no split tiles.
absl::StatusOr<WorkPlan> ReadRawPlan(const std::string& dir, int head_fold);

// Reads DIR/{qo_indptr,kv_indptr,kv_last_page_lens}.bin into `batch`'s arrays, keeping its
// other fields (arch, dtypes, heads, page size, flags) as given.
absl::Status ReadRawBatch(const std::string& dir, Batch* batch);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_RAW_PLAN_IO_H_
