// Execution traces: the ordered list of work items each CU runs, in a stable text format, to
// compare the simulator's schedule with what the GPU decode kernel reports it executed
// (docs/design.md section 14: identical text).
//
// Text format, version 1. One line per work item, '\n'-terminated, CUs in ascending order
// and each CU's items in execution order:
//
//   cu <c>: w<i> b=<batch_idx> qo=[<qo_start>,<qo_end>) kv=[<kv_start>,<kv_end>)
//       off=<kv_offset> part=<partial_qo_loc>          (one line, wrapped here)
//
// e.g. "cu 3: w17 b=5 qo=[10,12) kv=[40,48) off=3 part=-1". <i> is the item's index in
// work_info; all numbers are base-10 int32 (a leading '-' where negative). The eighth
// work_info word (pad) is appended as " pad=<pad>" only when it is not 0. A CU that runs
// nothing has no line. Parsing also accepts empty lines and lines starting with '#'
// (comments), and lines of different CUs interleaved (each CU's lines keep their order).
#ifndef MLAPS_SIM_TRACE_H_
#define MLAPS_SIM_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metadata/work_plan.h"

namespace mlaps::sim {

struct TraceItem {
  int32_t work = 0;  // index into work_info
  WorkInfo info{};   // the item's 8 words
};

struct Trace {
  std::vector<std::vector<TraceItem>> cus;  // cus[c]: what CU c runs, in order
};

// The trace a plan prescribes: CU c runs work_info[work_indptr[c] .. work_indptr[c+1]).
// Errors: InvalidArgument when work_indptr is not num_cu + 1 non-decreasing entries from 0
// to the number of work items.
absl::StatusOr<Trace> TraceOfPlan(const WorkPlan& plan);

// The text form (see the file comment).
std::string FormatTraceItem(int cu, const TraceItem& item);  // one line, no '\n'
std::string FormatTrace(const Trace& trace);

// Parses the text form. The result has max CU + 1 entries (trailing idle CUs are not
// representable in text). Errors: InvalidArgument naming the line number and the line for
// any malformed line (fields missing, out of order, not int32, a negative CU or item index).
absl::StatusOr<Trace> ParseTrace(absl::string_view text);

// Differences between two traces, one line each (at most `max_lines`), "" when equal.
// Trailing CUs that run nothing are ignored, so a plan's trace equals its parsed text.
std::string DiffTraces(const Trace& expected, const Trace& actual, int max_lines = 20);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_TRACE_H_
