#include "tools/cli/gantt_svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaps::cli {

std::string RenderGanttSvg(const Batch& batch, const WorkPlan& plan, const sim::CostParams& cost,
                           const std::string& title) {
  const sim::CostReport report = sim::EvaluatePlan(batch, plan, cost);
  const double row_h = std::clamp(600.0 / std::max(1, plan.num_cu), 3.0, 22.0);
  const double left = 60, top = 40, width = 900;
  // Label every k-th CU so that labels (11 px) do not overlap.
  const int label_every = static_cast<int>(std::ceil(13.0 / row_h));
  const double scale = width / std::max({report.makespan, report.lower_bound, 1.0});
  const double height = top + row_h * plan.num_cu + 40;
  const int fold = std::max(1, plan.head_fold);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"monospace\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%d\" y=\"16\">%s</text>\n<text x=\"%d\" y=\"30\">makespan "
      "%.0f blocks, lower bound %.0f (ratio %.3f), %d items, %d split tiles in %d pieces</text>\n",
      static_cast<int>(left + width + 20), static_cast<int>(height), static_cast<int>(left), title,
      static_cast<int>(left), report.makespan, report.lower_bound, report.balance(), report.works,
      report.split_tiles, report.pieces);
  std::vector<double> x(plan.num_cu, 0.0);
  for (int c = 0; c < plan.num_cu; ++c) {
    const double y = top + c * row_h;
    if (c % label_every == 0) {
      absl::StrAppendFormat(&svg, "<text x=\"2\" y=\"%.1f\">cu %d</text>\n", y + row_h * 0.8, c);
    }
    for (int i = plan.work_indptr[c]; i < plan.work_indptr[c + 1]; ++i) {
      const WorkInfo& w = plan.work_info[i];
      const double item = sim::WorkItemCost(batch, plan, w, cost);
      const int b = w.batch_idx / fold;
      const double hue = std::fmod(b * 137.508, 360.0);
      const bool split = w.partial_qo_loc != kNoPartial;
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"hsl(%.0f,65%%,60%%)\" "
          "stroke=\"%s\" stroke-width=\"%s\"%s><title>cu %d item %d: request %d qo [%d,%d) kv "
          "pages [%d,%d)%s</title></rect>\n",
          left + x[c] * scale, y, std::max(item * scale, 0.5), row_h * 0.9, hue,
          split ? "black" : "white", split ? "1" : "0.3", split ? " stroke-dasharray=\"2,1\"" : "",
          c, i, b, w.qo_start, w.qo_end, w.kv_start, w.kv_end,
          split ? absl::StrCat(", split piece -> partial row ", w.partial_qo_loc) : "");
      x[c] += item;
    }
  }
  const double bottom = top + row_h * plan.num_cu;
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"red\"/>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" fill=\"red\">makespan</text>\n",
                        left + report.makespan * scale, top - 4, left + report.makespan * scale,
                        bottom, left + report.makespan * scale - 60, bottom + 14);
  absl::StrAppendFormat(
      &svg,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"blue\" "
      "stroke-dasharray=\"4,2\"/>\n<text x=\"%.1f\" y=\"%.1f\" fill=\"blue\">lower bound</text>\n",
      left + report.lower_bound * scale, top - 4, left + report.lower_bound * scale, bottom,
      left + report.lower_bound * scale - 90, bottom + 28);
  svg += "</svg>\n";
  return svg;
}

}  // namespace mlaps::cli
