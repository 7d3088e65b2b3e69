// An SVG Gantt chart of a plan: a row per CU, items coloured by request, pieces of split
// tiles outlined in black with a dashed border, the makespan and lower bound as lines.
#ifndef MLAPS_TOOLS_CLI_GANTT_SVG_H_
#define MLAPS_TOOLS_CLI_GANTT_SVG_H_

#include <string>

#include "metadata/batch.h"
#include "metadata/work_plan.h"
#include "sim/cost_model.h"

namespace mlaps::cli {

std::string RenderGanttSvg(const Batch& batch, const WorkPlan& plan, const sim::CostParams& cost,
                           const std::string& title);

}  // namespace mlaps::cli

#endif  // MLAPS_TOOLS_CLI_GANTT_SVG_H_
