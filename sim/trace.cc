#include "sim/trace.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mlaps::sim {
namespace {

// Consumes an optionally negative base-10 int32 from the front of *s.
bool ConsumeInt(absl::string_view* s, int32_t* out) {
  size_t n = 0;
  if (n < s->size() && (*s)[n] == '-') ++n;
  const size_t digits_from = n;
  while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9') ++n;
  if (n == digits_from) return false;
  if (!absl::SimpleAtoi(s->substr(0, n), out)) return false;
  s->remove_prefix(n);
  return true;
}

bool ParseLine(absl::string_view s, int32_t* cu, TraceItem* item) {
  WorkInfo& w = item->info;
  w.pad = 0;
  const bool ok = absl::ConsumePrefix(&s, "cu ") && ConsumeInt(&s, cu) &&
                  absl::ConsumePrefix(&s, ": w") && ConsumeInt(&s, &item->work) &&
                  absl::ConsumePrefix(&s, " b=") && ConsumeInt(&s, &w.batch_idx) &&
                  absl::ConsumePrefix(&s, " qo=[") && ConsumeInt(&s, &w.qo_start) &&
                  absl::ConsumePrefix(&s, ",") && ConsumeInt(&s, &w.qo_end) &&
                  absl::ConsumePrefix(&s, ") kv=[") && ConsumeInt(&s, &w.kv_start) &&
                  absl::ConsumePrefix(&s, ",") && ConsumeInt(&s, &w.kv_end) &&
                  absl::ConsumePrefix(&s, ") off=") && ConsumeInt(&s, &w.kv_offset) &&
                  absl::ConsumePrefix(&s, " part=") && ConsumeInt(&s, &w.partial_qo_loc);
  if (!ok) return false;
  if (absl::ConsumePrefix(&s, " pad=") && !ConsumeInt(&s, &w.pad)) return false;
  return s.empty() && *cu >= 0 && item->work >= 0;
}

bool SameItem(const TraceItem& a, const TraceItem& b) {
  const WorkInfo &x = a.info, &y = b.info;
  return a.work == b.work && x.batch_idx == y.batch_idx && x.partial_qo_loc == y.partial_qo_loc &&
         x.qo_start == y.qo_start && x.qo_end == y.qo_end && x.kv_start == y.kv_start &&
         x.kv_end == y.kv_end && x.kv_offset == y.kv_offset && x.pad == y.pad;
}

}  // namespace

absl::StatusOr<Trace> TraceOfPlan(const WorkPlan& plan) {
  const auto& wi = plan.work_indptr;
  if (plan.num_cu < 0 || static_cast<int64_t>(wi.size()) != int64_t{plan.num_cu} + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "work_indptr has ", wi.size(), " entries; expected num_cu + 1 = ", plan.num_cu + 1));
  }
  if (wi[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat("work_indptr[0] = ", wi[0], ": must be 0"));
  }
  for (int c = 0; c < plan.num_cu; ++c) {
    if (wi[c + 1] < wi[c] || wi[c + 1] > plan.num_works()) {
      return absl::InvalidArgumentError(absl::StrCat("work_indptr[", c + 1, "] = ", wi[c + 1],
                                                     ": decreasing or past the ", plan.num_works(),
                                                     " work items"));
    }
  }
  if (wi[plan.num_cu] != plan.num_works()) {
    return absl::InvalidArgumentError(absl::StrCat("work_indptr[", plan.num_cu,
                                                   "] = ", wi[plan.num_cu],
                                                   " != number of work items ", plan.num_works()));
  }
  Trace trace;
  trace.cus.resize(plan.num_cu);
  for (int c = 0; c < plan.num_cu; ++c) {
    for (int w = wi[c]; w < wi[c + 1]; ++w) trace.cus[c].push_back({w, plan.work_info[w]});
  }
  return trace;
}

std::string FormatTraceItem(int cu, const TraceItem& item) {
  const WorkInfo& w = item.info;
  std::string line = absl::StrCat("cu ", cu, ": w", item.work, " b=", w.batch_idx, " qo=[",
                                  w.qo_start, ",", w.qo_end, ") kv=[", w.kv_start, ",", w.kv_end,
                                  ") off=", w.kv_offset, " part=", w.partial_qo_loc);
  if (w.pad != 0) absl::StrAppend(&line, " pad=", w.pad);
  return line;
}

std::string FormatTrace(const Trace& trace) {
  std::string out;
  for (int c = 0; c < static_cast<int>(trace.cus.size()); ++c) {
    for (const TraceItem& item : trace.cus[c]) {
      absl::StrAppend(&out, FormatTraceItem(c, item), "\n");
    }
  }
  return out;
}

absl::StatusOr<Trace> ParseTrace(absl::string_view text) {
  Trace trace;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty() || line[0] == '#') continue;
    int32_t cu = -1;
    TraceItem item;
    if (!ParseLine(line, &cu, &item)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace line ", line_no, " \"", line,
          "\" is not \"cu <c>: w<i> b=<b> qo=[<s>,<e>) kv=[<s>,<e>) off=<o> part=<p>\""));
    }
    if (cu >= static_cast<int32_t>(trace.cus.size())) trace.cus.resize(cu + 1);
    trace.cus[cu].push_back(item);
  }
  return trace;
}

std::string DiffTraces(const Trace& expected, const Trace& actual, int max_lines) {
  std::string out;
  int lines = 0;
  auto add = [&](std::string line) {
    if (lines++ < max_lines) absl::StrAppend(&out, line, "\n");
  };
  const size_t num_cu = std::max(expected.cus.size(), actual.cus.size());
  static const std::vector<TraceItem> kNone;
  for (size_t c = 0; c < num_cu; ++c) {
    const auto& e = c < expected.cus.size() ? expected.cus[c] : kNone;
    const auto& a = c < actual.cus.size() ? actual.cus[c] : kNone;
    const size_t n = std::max(e.size(), a.size());
    for (size_t k = 0; k < n; ++k) {
      if (k < e.size() && k < a.size()) {
        if (!SameItem(e[k], a[k])) {
          add(absl::StrCat("cu ", c, " item ", k, ": expected \"", FormatTraceItem(c, e[k]),
                           "\", got \"", FormatTraceItem(c, a[k]), "\""));
        }
      } else if (k < e.size()) {
        add(absl::StrCat("cu ", c, " item ", k, ": expected \"", FormatTraceItem(c, e[k]),
                         "\", missing"));
      } else {
        add(absl::StrCat("cu ", c, " item ", k, ": unexpected \"", FormatTraceItem(c, a[k]), "\""));
      }
    }
  }
  if (lines > max_lines) absl::StrAppend(&out, "... ", lines - max_lines, " more differences\n");
  return out;
}

}  // namespace mlaps::sim
