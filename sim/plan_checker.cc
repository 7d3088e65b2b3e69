#include "sim/plan_checker.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace mlaps::sim {
namespace {

struct Interval {
  int64_t begin, end;
  int work;
};

class Collector {
 public:
  explicit Collector(int max) : max_(max) {}
  void Add(Defect d, int work, std::string field, std::string message) {
    if (static_cast<int>(out_.size()) < max_) {
      out_.push_back({d, work, std::move(field), std::move(message)});
    }
  }
  std::vector<Violation> Take() { return std::move(out_); }

 private:
  int max_;
  std::vector<Violation> out_;
};

}  // namespace

absl::string_view DefectName(Defect defect) {
  switch (defect) {
    case Defect::kWorkIndptr:
      return "work_indptr";
    case Defect::kBatchIdx:
      return "batch_idx";
    case Defect::kQoRange:
      return "qo_range";
    case Defect::kKvRange:
      return "kv_range";
    case Defect::kKvOffset:
      return "kv_offset";
    case Defect::kPad:
      return "pad";
    case Defect::kCausal:
      return "causal";
    case Defect::kUncovered:
      return "uncovered";
    case Defect::kCoveredTwice:
      return "covered_twice";
    case Defect::kTileOverlap:
      return "tile_overlap";
    case Defect::kPartialRow:
      return "partial_row";
    case Defect::kMixedTile:
      return "mixed_tile";
    case Defect::kReduceMap:
      return "reduce_map";
  }
  return "unknown";
}

std::vector<Violation> CheckPlan(const Batch& batch, const WorkPlan& plan,
                                 const CheckOptions& options) {
  Collector out(options.max_violations);
  const int num_cu = options.num_cu >= 0 ? options.num_cu : plan.num_cu;
  const int r = options.head_fold >= 1 ? options.head_fold : std::max(1, plan.head_fold);
  const int num_works = plan.num_works();
  const int num_v = batch.num_requests() * r;
  const bool causal_trim = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;

  // --- work_indptr -----------------------------------------------------------------------
  const auto& wi = plan.work_indptr;
  if (static_cast<int>(wi.size()) != num_cu + 1) {
    out.Add(Defect::kWorkIndptr, -1, "work_indptr",
            absl::StrCat("has ", wi.size(), " entries; expected num_cu + 1 = ", num_cu + 1));
  } else {
    if (wi[0] != 0) out.Add(Defect::kWorkIndptr, -1, "work_indptr[0]", "must be 0");
    for (int c = 0; c < num_cu; ++c) {
      if (wi[c + 1] < wi[c]) {
        out.Add(Defect::kWorkIndptr, -1, absl::StrCat("work_indptr[", c + 1, "]"),
                absl::StrCat(wi[c + 1], " < previous ", wi[c], " (CU ", c, ")"));
      }
    }
    if (wi[num_cu] != num_works) {
      out.Add(Defect::kWorkIndptr, -1, absl::StrCat("work_indptr[", num_cu, "]"),
              absl::StrCat(wi[num_cu], " != number of work items ", num_works));
    }
  }

  // Head folding must split H into whole groups; anything else makes every index meaningless.
  if (r > batch.num_heads || batch.num_heads % r != 0) {
    out.Add(Defect::kBatchIdx, -1, "head_fold",
            absl::StrCat(r, " does not divide num_heads = ", batch.num_heads));
    return out.Take();
  }

  // Folded qo_indptr from the batch (each request's q tokens repeated r times).
  std::vector<int32_t> fqo(num_v + 1, 0);
  for (int v = 0; v < num_v; ++v) fqo[v + 1] = fqo[v] + batch.qlen(v / r);
  if (!plan.qo_indptr.empty() && plan.qo_indptr != fqo) {
    out.Add(Defect::kQoRange, -1, "qo_indptr",
            "the plan's folded qo_indptr differs from the batch's qo_indptr folded by head_fold");
  }
  const int64_t total_fq = fqo[num_v];

  // Visible kv tokens of folded q token t.
  std::vector<int32_t> token_v(total_fq);
  for (int v = 0; v < num_v; ++v) {
    for (int t = fqo[v]; t < fqo[v + 1]; ++t) token_v[t] = v;
  }
  auto visible = [&](int64_t t) -> int64_t {
    const int v = token_v[t], b = v / r;
    const int64_t kv_len = batch.kv_len(b);
    if (!causal_trim) return kv_len;
    return std::max<int64_t>(0, kv_len - batch.qlen(b) + (t - fqo[v]) + 1);
  };

  std::vector<std::vector<Interval>> cover(total_fq);
  // Tile bookkeeping keyed by (qo_start, qo_end).
  struct TileUse {
    int finals = 0;
    std::vector<std::pair<int32_t, int>> partial_rows;  // (loc, work)
  };
  std::map<std::pair<int32_t, int32_t>, TileUse> tiles;
  std::vector<int32_t> tile_start_of(total_fq, -1), tile_end_of(total_fq, -1);
  // Partial rows in use -> the work item writing them (a map: a plan from elsewhere may
  // name any row, and the checker must not allocate by its word).
  absl::flat_hash_map<int64_t, int> row_owner;

  for (int w = 0; w < num_works; ++w) {
    const WorkInfo& x = plan.work_info[w];
    if (x.pad != 0) out.Add(Defect::kPad, w, "pad", absl::StrCat(x.pad, " != 0"));
    if (x.batch_idx < 0 || x.batch_idx >= num_v) {
      out.Add(Defect::kBatchIdx, w, "batch_idx",
              absl::StrCat(x.batch_idx, " outside [0, ", num_v, ")"));
      continue;
    }
    const int v = x.batch_idx, b = v / r;
    if (x.qo_start >= x.qo_end || x.qo_start < fqo[v] || x.qo_end > fqo[v + 1]) {
      out.Add(Defect::kQoRange, w, "qo_start/qo_end",
              absl::StrCat("[", x.qo_start, ", ", x.qo_end, ") is empty or outside request ", v,
                           "'s q tokens [", fqo[v], ", ", fqo[v + 1], ")"));
      continue;
    }
    const int32_t base = batch.kv_indptr[b], pages_end = batch.kv_indptr[b + 1];
    if (x.kv_start >= x.kv_end || x.kv_start < base || x.kv_end > pages_end) {
      out.Add(Defect::kKvRange, w, "kv_start/kv_end",
              absl::StrCat("[", x.kv_start, ", ", x.kv_end, ") is empty or outside request ", b,
                           "'s pages [", base, ", ", pages_end, ")"));
      continue;
    }
    const int64_t kv_len = batch.kv_len(b);
    const int64_t begin = int64_t{x.kv_start - base} * batch.page_size;
    const int64_t end = std::min<int64_t>(int64_t{x.kv_end - base} * batch.page_size, kv_len);
    if (x.kv_offset != kv_len - end) {
      out.Add(Defect::kKvOffset, w, "kv_offset",
              absl::StrCat(x.kv_offset, " != kv tokens after the piece, ", kv_len - end));
    }
    bool sees_any = false;
    for (int64_t t = x.qo_start; t < x.qo_end; ++t) {
      const int64_t e = std::min(end, visible(t));
      if (e > begin) {
        sees_any = true;
        cover[t].push_back({begin, e, w});
      }
      if (tile_start_of[t] == -1) {
        tile_start_of[t] = x.qo_start;
        tile_end_of[t] = x.qo_end;
      } else if (tile_start_of[t] != x.qo_start || tile_end_of[t] != x.qo_end) {
        out.Add(Defect::kTileOverlap, w, "qo_start/qo_end",
                absl::StrCat("[", x.qo_start, ", ", x.qo_end, ") overlaps another item's qo tile [",
                             tile_start_of[t], ", ", tile_end_of[t], ")"));
        break;
      }
    }
    if (!sees_any) {
      out.Add(Defect::kCausal, w, "kv_start",
              absl::StrCat("no q token in [", x.qo_start, ", ", x.qo_end, ") may see kv tokens [",
                           begin, ", ", end, ") under the causal rule"));
    }
    TileUse& tile = tiles[{x.qo_start, x.qo_end}];
    if (x.partial_qo_loc == kNoPartial) {
      ++tile.finals;
      continue;
    }
    const int64_t rows = x.qo_end - x.qo_start;
    if (x.partial_qo_loc < 0 || (options.partial_rows_capacity >= 0 &&
                                 x.partial_qo_loc + rows > options.partial_rows_capacity)) {
      out.Add(
          Defect::kPartialRow, w, "partial_qo_loc",
          absl::StrCat("rows [", x.partial_qo_loc, ", ", x.partial_qo_loc + rows,
                       ") outside the partial buffer's ", options.partial_rows_capacity, " rows"));
      continue;
    }
    for (int64_t row = x.partial_qo_loc; row < x.partial_qo_loc + rows; ++row) {
      auto [it, inserted] = row_owner.try_emplace(row, w);
      if (!inserted) {
        out.Add(Defect::kPartialRow, w, "partial_qo_loc",
                absl::StrCat("partial row ", row, " is also written by work ", it->second));
        break;
      }
    }
    tile.partial_rows.push_back({x.partial_qo_loc, w});
  }

  // --- coverage: exactly once per (request, q token, kv token) ---------------------------
  for (int64_t t = 0; t < total_fq; ++t) {
    std::vector<Interval>& iv = cover[t];
    std::sort(iv.begin(), iv.end(), [](const Interval& a, const Interval& b) {
      return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
    });
    const int64_t want = visible(t);
    int64_t reached = 0;
    for (const Interval& i : iv) {
      if (i.begin > reached) {
        out.Add(Defect::kUncovered, -1, "kv",
                absl::StrCat("request ", token_v[t], " q token ", t, ": kv tokens [", reached, ", ",
                             i.begin, ") covered by no work item"));
      } else if (i.begin < reached) {
        out.Add(Defect::kCoveredTwice, i.work, "kv_start",
                absl::StrCat("request ", token_v[t], " q token ", t, ": kv tokens [", i.begin, ", ",
                             std::min(reached, i.end), ") covered more than once"));
      }
      reached = std::max(reached, i.end);
    }
    if (reached < want) {
      out.Add(Defect::kUncovered, -1, "kv",
              absl::StrCat("request ", token_v[t], " q token ", t, ": kv tokens [", reached, ", ",
                           want, ") covered by no work item"));
    }
  }

  // --- tiles and reduce maps ---------------------------------------------------------------
  std::map<std::pair<int32_t, int32_t>, int> split_tiles_seen;
  for (const auto& [range, use] : tiles) {
    if (use.finals > 1 || (use.finals == 1 && !use.partial_rows.empty())) {
      out.Add(Defect::kMixedTile, -1, "partial_qo_loc",
              absl::StrCat("qo tile [", range.first, ", ", range.second, ") has ", use.finals,
                           " final writer(s) and ", use.partial_rows.size(),
                           " partial piece(s); a tile is written once finally or only through "
                           "partial rows"));
    }
  }
  const auto& ri = plan.reduce_indptr;
  const auto& rf = plan.reduce_final_map;
  const auto& rp = plan.reduce_partial_map;
  const int num_reduce = ri.empty() ? 0 : static_cast<int>(ri.size()) - 1;
  bool maps_ok = true;
  if (!ri.empty() && ri[0] != 0) {
    out.Add(Defect::kReduceMap, -1, "reduce_indptr[0]", "must be 0");
    maps_ok = false;
  }
  for (int i = 0; i < num_reduce && maps_ok; ++i) {
    if (ri[i + 1] < ri[i] || ri[i + 1] > static_cast<int>(rp.size())) {
      out.Add(Defect::kReduceMap, -1, absl::StrCat("reduce_indptr[", i + 1, "]"),
              absl::StrCat(ri[i + 1], " decreasing or past reduce_partial_map's ", rp.size(),
                           " entries"));
      maps_ok = false;
    }
  }
  if (maps_ok && num_reduce > 0 && ri[num_reduce] != static_cast<int>(rp.size())) {
    out.Add(Defect::kReduceMap, -1, "reduce_indptr",
            absl::StrCat("ends at ", ri[num_reduce], " but reduce_partial_map has ", rp.size(),
                         " entries"));
  }
  if (static_cast<int>(rf.size()) != 2 * num_reduce) {
    out.Add(Defect::kReduceMap, -1, "reduce_final_map",
            absl::StrCat("has ", rf.size(), " entries; expected 2 x ", num_reduce));
    maps_ok = false;
  }
  if (maps_ok) {
    for (int i = 0; i < num_reduce; ++i) {
      const std::pair<int32_t, int32_t> range{rf[2 * i], rf[2 * i + 1]};
      auto it = tiles.find(range);
      if (it == tiles.end() || it->second.partial_rows.empty()) {
        out.Add(Defect::kReduceMap, -1, absl::StrCat("reduce_final_map[", i, "]"),
                absl::StrCat("(", range.first, ", ", range.second,
                             ") is not the qo range of any split work item"));
        continue;
      }
      if (split_tiles_seen[range]++ > 0) {
        out.Add(Defect::kReduceMap, -1, absl::StrCat("reduce_final_map[", i, "]"),
                absl::StrCat("(", range.first, ", ", range.second, ") listed twice"));
        continue;
      }
      std::vector<int32_t> want, got(rp.begin() + ri[i], rp.begin() + ri[i + 1]);
      for (const auto& [loc, w] : it->second.partial_rows) want.push_back(loc);
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      if (want != got) {
        out.Add(Defect::kReduceMap, -1, absl::StrCat("reduce_partial_map[", ri[i], "..]"),
                absl::StrCat("tile (", range.first, ", ", range.second, ") lists ", got.size(),
                             " partial rows that differ from its ", want.size(),
                             " split items' partial_qo_loc"));
      }
    }
    for (const auto& [range, use] : tiles) {
      if (!use.partial_rows.empty() && split_tiles_seen.count(range) == 0) {
        out.Add(Defect::kReduceMap, use.partial_rows.front().second, "reduce_final_map",
                absl::StrCat("split qo tile [", range.first, ", ", range.second,
                             ") has no reduce entry: its partial rows are never merged"));
      }
    }
  }
  return out.Take();
}

std::string FormatViolations(const std::vector<Violation>& violations) {
  std::string s;
  for (const Violation& v : violations) {
    absl::StrAppend(&s, DefectName(v.defect), v.work >= 0 ? absl::StrCat(" work ", v.work) : "",
                    " ", v.field, ": ", v.message, "\n");
  }
  return s;
}

}  // namespace mlaps::sim
