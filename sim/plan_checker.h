// The plan checker: every structural invariant of a WorkPlan in AITER's layout, for plans
// made by mlaps or dumped from another implementation.
#ifndef MLAPS_SIM_PLAN_CHECKER_H_
#define MLAPS_SIM_PLAN_CHECKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "metadata/batch.h"
#include "metadata/work_plan.h"

namespace mlaps::sim {

// The class of a violated invariant (tests plant one of each).
enum class Defect {
  kWorkIndptr,    // work_indptr malformed: size != num_cu + 1, not from 0, decreasing,
                  // or not ending at the number of works
  kBatchIdx,      // batch_idx outside [0, B * head_fold)
  kQoRange,       // qo range empty or outside its virtual request's tokens
  kKvRange,       // kv pages empty or outside the request's pages
  kKvOffset,      // kv_offset != kv tokens after kv_end up to the request's end
  kPad,           // pad word != 0
  kCausal,        // no q token of the item sees any of its kv tokens
  kUncovered,     // a (request, q token, kv token) that no item covers
  kCoveredTwice,  // a (request, q token, kv token) covered by more than one item
  kTileOverlap,   // two items' qo ranges overlap without being equal
  kPartialRow,    // partial rows outside capacity or shared by two items
  kMixedTile,     // a qo tile written both finally (-1) and through partial rows
  kReduceMap,     // reduce maps inconsistent with the split items
};
absl::string_view DefectName(Defect defect);

struct Violation {
  Defect defect;
  int work = -1;      // work item index, -1 when not about one item
  std::string field;  // e.g. "kv_end", "reduce_partial_map[3]"
  std::string message;
};

struct CheckOptions {
  int num_cu = -1;                     // expected CUs; -1: take plan.num_cu
  int head_fold = -1;                  // -1: take plan.head_fold
  int64_t partial_rows_capacity = -1;  // -1: no limit beyond non-negative rows
  int max_violations = 1000;           // stop collecting after this many
};

// Checks `plan` against `batch` (already validated by ValidateBatch). Returns every
// violated invariant found (empty when the plan is sound), each naming the work item and
// field. Coverage: each work item covers, for each of its q tokens t, request-local kv tokens
// [(kv_start - kv_indptr[b]) * page_size, min((kv_end - kv_indptr[b]) * page_size, L))
// intersected with what t may see (L - q + t + 1 under the dense causal rule, else L);
// the union over items must be exactly what each token may see, with no overlap.
std::vector<Violation> CheckPlan(const Batch& batch, const WorkPlan& plan,
                                 const CheckOptions& options = {});

// One line per violation, for CLIs and test failure messages.
std::string FormatViolations(const std::vector<Violation>& violations);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_PLAN_CHECKER_H_
