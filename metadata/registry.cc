#include "metadata/registry.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace mlaps::internal {
// Defined in the generated registry_data.cc (tools/embed_text.sh): the bytes of an embedded
// registry file by basename, "" when unknown.
std::string_view EmbeddedFile(std::string_view basename);
}  // namespace mlaps::internal

namespace mlaps {
namespace {

constexpr std::array<int, 5> kValidHeads = {16, 32, 48, 64, 128};
constexpr int kMaxNearby = 6;

std::string RowLabel(const proto::KernelRow& row, int index) {
  return absl::StrCat("kernel[", index, "] \"", row.name(), "\"");
}

// Text of a std::string_view or (Debian's abseil, not aliased to std) absl::string_view.
template <typename View>
std::string Str(const View& v) {
  return std::string(v.data(), v.size());
}

int Fold(const proto::Serves& s) { return s.head_fold() == 0 ? 1 : s.head_fold(); }

bool Covers(const proto::Serves& s, int nhead, int qlen) {
  return s.nhead() == nhead && qlen >= s.qlen_min() && (s.qlen_max() == 0 || qlen <= s.qlen_max());
}

// Collects text-format parse errors with their positions.
class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

absl::StatusOr<proto::KernelRegistry> ParseEmbedded(Arch arch) {
  const std::string file = absl::StrCat(Str(ArchName(arch)), ".textproto");
  const std::string_view text = internal::EmbeddedFile(file);
  if (text.empty()) {
    return absl::InternalError(absl::StrCat("registry file ", file, " is not embedded"));
  }
  proto::KernelRegistry registry;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &registry)) {
    return absl::InternalError(
        absl::StrCat("registry ", file, " does not parse: ", errors.Joined()));
  }
  if (absl::Status s = ValidateRegistry(registry); !s.ok()) {
    return absl::InternalError(absl::StrCat("registry ", file, " is invalid: ", s.message()));
  }
  absl::StatusOr<Arch> file_arch = ParseArch(registry.arch());
  if (!file_arch.ok() || *file_arch != arch) {
    return absl::InternalError(
        absl::StrCat("registry ", file, " declares arch '", registry.arch(), "'"));
  }
  return registry;
}

// Whether `row` is a candidate for the query's dtypes / cp / lse, ignoring the shape.
// With `check_lse` false the lse column is ignored.
bool RowMatchesKind(const proto::KernelRow& row, const VariantQuery& query, bool check_lse) {
  absl::StatusOr<DType> q = ParseDType(row.q_type());
  absl::StatusOr<DType> kv = ParseDType(row.kv_type());
  if (!q.ok() || !kv.ok()) return false;
  if (*q != query.q_dtype || *kv != query.kv_dtype) return false;
  if (!row.ps()) return false;
  if (row.cprr() != query.cp_round_robin) return false;
  if (check_lse && query.lse && !row.lse()) return false;
  return true;
}

std::string ShapeText(const VariantQuery& query) {
  return absl::StrCat(Str(ArchName(query.arch)), " ", Str(DTypeName(query.q_dtype)), "/",
                      Str(DTypeName(query.kv_dtype)), " H=", query.num_heads, " qlen=", query.qlen,
                      " cp_round_robin=", query.cp_round_robin ? "true" : "false",
                      query.lse ? " lse=true" : "");
}

// Up to kMaxNearby supported (nhead, qlen) shapes closest to the query among rows of the
// same dtypes / cp (and lse, when requested). Distance: 2*|log2(nhead/H)| + |qlen - q|.
std::vector<std::pair<int, int>> NearbyShapes(const proto::KernelRegistry& registry,
                                              const VariantQuery& query) {
  std::set<std::pair<int, int>> shapes;
  const long long q = query.qlen;
  for (const proto::KernelRow& row : registry.kernel()) {
    if (!RowMatchesKind(row, query, /*check_lse=*/true)) continue;
    for (const proto::Serves& s : row.serves()) {
      const long long lo_bound = std::max(1, s.qlen_min());
      const long long hi_bound = s.qlen_max() == 0 ? INT_MAX : s.qlen_max();
      if (hi_bound < lo_bound) continue;
      const long long lo = std::clamp(q - kMaxNearby, lo_bound, hi_bound);
      const long long hi = std::min(hi_bound, std::max(lo_bound, q) + kMaxNearby);
      for (long long ql = lo; ql <= hi; ++ql) shapes.emplace(s.nhead(), static_cast<int>(ql));
    }
  }
  std::vector<std::tuple<double, int, int>> ranked;
  for (const auto& [nh, ql] : shapes) {
    const double head_dist =
        std::fabs(std::log2(static_cast<double>(nh) / static_cast<double>(query.num_heads)));
    const double dist = 2.0 * head_dist + std::fabs(static_cast<double>(ql) - q);
    ranked.emplace_back(dist, nh, ql);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::pair<int, int>> out;
  for (const auto& [dist, nh, ql] : ranked) {
    if (static_cast<int>(out.size()) == kMaxNearby) break;
    out.emplace_back(nh, ql);
  }
  return out;
}

}  // namespace

namespace {

bool NonNegativeFinite(double x) { return std::isfinite(x) && x >= 0; }

// Costs are times: finite and >= 0; tile entries name rows in [1, rows_per_tile], each rows
// value at most once for one block a CU and once for several.
absl::Status ValidateCost(const proto::CostModel& cost, int rows_per_tile,
                          const std::string& label) {
  if (!NonNegativeFinite(cost.ns_per_block()) || !NonNegativeFinite(cost.ns_per_item()) ||
      !NonNegativeFinite(cost.ns_per_launch())) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": cost ns_per_block = ", cost.ns_per_block(), ", ns_per_item = ",
        cost.ns_per_item(), ", ns_per_launch = ", cost.ns_per_launch(), " (must be finite, >= 0)"));
  }
  if (cost.kv_granularity() < 0 || (cost.kv_granularity() & (cost.kv_granularity() - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": cost.kv_granularity = ", cost.kv_granularity(), " is not 0 or a power of two"));
  }
  std::set<int> rows;
  for (int k = 0; k < cost.tile_size(); ++k) {
    const proto::TileCost& t = cost.tile(k);
    const std::string where = absl::StrCat(label, ": cost.tile[", k, "]");
    if (t.rows() < 1 || t.rows() > rows_per_tile) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".rows = ", t.rows(), " is outside [1, rows_per_tile = ", rows_per_tile, "]"));
    }
    // At most one entry a rows value for each occupancy: one block a CU, or several.
    if (!rows.insert(2 * t.rows() + (t.blocks_per_cu() > 1 ? 1 : 0)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".rows = ", t.rows(), " repeats an earlier entry of ",
                       t.blocks_per_cu() > 1 ? "several blocks" : "one block", " a CU"));
    }
    if (!NonNegativeFinite(t.ns_per_block()) || !NonNegativeFinite(t.ns_per_item())) {
      return absl::InvalidArgumentError(absl::StrCat(where, " ns_per_block = ", t.ns_per_block(),
                                                     ", ns_per_item = ", t.ns_per_item(),
                                                     " (must be finite, >= 0)"));
    }
    if (t.blocks_per_cu() < 0 || t.blocks_per_cu() > 8) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".blocks_per_cu = ", t.blocks_per_cu(), " is outside [0, 8]"));
    }
  }
  std::set<std::tuple<std::string, int, int>> routed;
  for (int k = 0; k < cost.routed_size(); ++k) {
    const proto::RoutedTileCost& r = cost.routed(k);
    const std::string where = absl::StrCat(label, ": cost.routed[", k, "]");
    if (r.kernel().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".kernel is empty"));
    }
    if (r.rows() < 1 || r.rows() > rows_per_tile) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".rows = ", r.rows(), " is outside [1, rows_per_tile = ", rows_per_tile, "]"));
    }
    if (r.kv_granularity() < 1 || (r.kv_granularity() & (r.kv_granularity() - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".kv_granularity = ", r.kv_granularity(), " is not a power of two"));
    }
    if (!routed.insert({r.kernel(), r.rows(), r.kv_granularity()}).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, " repeats kernel '", r.kernel(),
                                                     "', rows ", r.rows(), ", kv_granularity ",
                                                     r.kv_granularity()));
    }
    if (!NonNegativeFinite(r.ns_per_block()) || !NonNegativeFinite(r.ns_per_item())) {
      return absl::InvalidArgumentError(absl::StrCat(where, " ns_per_block = ", r.ns_per_block(),
                                                     ", ns_per_item = ", r.ns_per_item(),
                                                     " (must be finite, >= 0)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRegistry(const proto::KernelRegistry& registry) {
  if (absl::StatusOr<Arch> arch = ParseArch(registry.arch()); !arch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("registry arch: '", registry.arch(), "' is not gfx942, gfx950 or sm90"));
  }
  std::set<std::string> names;
  for (int i = 0; i < registry.kernel_size(); ++i) {
    const proto::KernelRow& row = registry.kernel(i);
    const std::string label = RowLabel(row, i);
    if (row.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": name is empty"));
    }
    if (!names.insert(row.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": name is not unique (an earlier row has it)"));
    }
    if (absl::StatusOr<DType> d = ParseDType(row.q_type()); !d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": q_type '", row.q_type(), "' is not bf16 or fp8"));
    }
    if (absl::StatusOr<DType> d = ParseDType(row.kv_type()); !d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": kv_type '", row.kv_type(), "' is not bf16 or fp8"));
    }
    if (row.rows_per_tile() != 64 && row.rows_per_tile() != 128) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": rows_per_tile = ", row.rows_per_tile(), " is not 64 or 128"));
    }
    if (row.serves_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": serves is empty"));
    }
    for (int j = 0; j < row.serves_size(); ++j) {
      const proto::Serves& s = row.serves(j);
      const std::string where = absl::StrCat(label, ": serves[", j, "]");
      if (std::find(kValidHeads.begin(), kValidHeads.end(), s.nhead()) == kValidHeads.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".nhead = ", s.nhead(), " is not one of 16, 32, 48, 64, 128"));
      }
      if (s.head_fold() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".head_fold = ", s.head_fold(), " is negative"));
      }
      const int fold = Fold(s);
      if (s.nhead() % fold != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".head_fold = ", fold, " does not divide nhead = ", s.nhead()));
      }
      if (s.nhead() / fold > row.rows_per_tile()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".head_fold: nhead / head_fold = ", s.nhead() / fold,
                         " heads exceed rows_per_tile = ", row.rows_per_tile()));
      }
      if (s.qlen_min() < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".qlen_min = ", s.qlen_min(), " is below 1"));
      }
      if (s.qlen_max() != 0 && s.qlen_max() < s.qlen_min()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".qlen_max = ", s.qlen_max(),
                                                       " is below qlen_min = ", s.qlen_min(),
                                                       " (0 means unbounded)"));
      }
    }
    if (absl::Status s = ValidateCost(row.cost(), row.rows_per_tile(), label); !s.ok()) return s;
  }
  if (!NonNegativeFinite(registry.reduce().ns_per_launch()) ||
      !NonNegativeFinite(registry.reduce().ns_per_partial_row())) {
    return absl::InvalidArgumentError(
        absl::StrCat("registry reduce: ns_per_launch = ", registry.reduce().ns_per_launch(),
                     ", ns_per_partial_row = ", registry.reduce().ns_per_partial_row(),
                     " (must be finite, >= 0)"));
  }
  return absl::OkStatus();
}

namespace {

// The embedded registries, parsed and validated once per process (immutable afterwards).
const absl::StatusOr<proto::KernelRegistry>& CachedRegistry(Arch arch) {
  static const auto* const kCache = new std::array<absl::StatusOr<proto::KernelRegistry>, 3>{
      ParseEmbedded(Arch::kGfx942), ParseEmbedded(Arch::kGfx950), ParseEmbedded(Arch::kSm90)};
  switch (arch) {
    case Arch::kGfx942:
      return (*kCache)[0];
    case Arch::kGfx950:
      return (*kCache)[1];
    case Arch::kSm90:
      break;
  }
  return (*kCache)[2];
}

}  // namespace

absl::StatusOr<proto::KernelRegistry> LoadRegistry(Arch arch) { return CachedRegistry(arch); }

absl::StatusOr<ResolvedVariant> ResolveVariant(const proto::KernelRegistry& registry,
                                               const VariantQuery& query) {
  if (query.num_heads <= 0 || query.qlen <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed variant query: H=", query.num_heads,
                                                   " qlen=", query.qlen,
                                                   " (both must be positive)"));
  }
  absl::StatusOr<Arch> registry_arch = ParseArch(registry.arch());
  if (!registry_arch.ok() || *registry_arch != query.arch) {
    return absl::NotFoundError(absl::StrCat("unsupported: ", ShapeText(query),
                                            ": the registry is for arch '", registry.arch(),
                                            "', not ", Str(ArchName(query.arch))));
  }
  for (const proto::KernelRow& row : registry.kernel()) {
    if (!RowMatchesKind(row, query, /*check_lse=*/true)) continue;
    for (const proto::Serves& s : row.serves()) {
      if (!Covers(s, query.num_heads, query.qlen)) continue;
      const int fold = Fold(s);
      if (fold <= 0 || query.num_heads % fold != 0 || row.rows_per_tile() <= 0) continue;
      ResolvedVariant v;
      v.name = row.name();
      v.rows_per_tile = row.rows_per_tile();
      v.q_seq_len = row.q_seq_len();
      v.head_fold = fold;
      v.heads_per_group = query.num_heads / fold;
      if (v.heads_per_group > v.rows_per_tile) continue;  // unvalidated registry
      v.tokens_per_tile = std::min(query.qlen, v.rows_per_tile / v.heads_per_group);
      v.cost = row.cost();
      v.reduce = registry.reduce();
      // The first entry for the rows in use sets the default occupancy.
      for (const proto::TileCost& t : row.cost().tile()) {
        if (t.rows() == v.heads_per_group * v.tokens_per_tile) {
          v.blocks_per_cu = std::max(1, t.blocks_per_cu());
          break;
        }
      }
      return v;
    }
  }

  std::string message = absl::StrCat("unsupported: no kernel for ", ShapeText(query));
  if (query.lse) {
    for (const proto::KernelRow& row : registry.kernel()) {
      if (!RowMatchesKind(row, query, /*check_lse=*/false)) continue;
      for (const proto::Serves& s : row.serves()) {
        if (Covers(s, query.num_heads, query.qlen)) {
          absl::StrAppend(&message, " (", row.name(), " serves the shape but cannot write LSE)");
          break;
        }
      }
    }
  }
  const std::vector<std::pair<int, int>> nearby = NearbyShapes(registry, query);
  if (nearby.empty()) {
    absl::StrAppend(&message, "; no shape is supported for these dtypes and cp flag");
  } else {
    absl::StrAppend(&message, "; supported nearby:");
    for (const auto& [nh, ql] : nearby) absl::StrAppend(&message, " (", nh, ",", ql, ")");
  }
  return absl::NotFoundError(message);
}

UnitCosts TileUnitCosts(const proto::CostModel& cost, int rows, bool several_blocks_per_cu,
                        int kv_granularity) {
  const proto::TileCost* entry = nullptr;
  for (const proto::TileCost& t : cost.tile()) {
    if (t.rows() != rows) continue;
    if ((t.blocks_per_cu() > 1) == several_blocks_per_cu) {
      entry = &t;
      break;
    }
    if (several_blocks_per_cu && entry == nullptr) entry = &t;
  }
  UnitCosts u = entry != nullptr ? UnitCosts{entry->ns_per_block(), entry->ns_per_item()}
                                 : UnitCosts{cost.ns_per_block(), cost.ns_per_item()};
  if (cost.kv_granularity() > 0) {
    u.ns_per_block *= static_cast<double>(kv_granularity) / cost.kv_granularity();
  }
  return u;
}

double ReduceNs(const proto::ReduceCost& reduce, int64_t partial_rows) {
  if (partial_rows <= 0) return 0;
  return reduce.ns_per_launch() + reduce.ns_per_partial_row() * static_cast<double>(partial_rows);
}

const proto::RoutedTileCost* RoutedCost(const proto::CostModel& cost, absl::string_view kernel,
                                        int rows, int kv_granularity) {
  for (const proto::RoutedTileCost& r : cost.routed()) {
    if (r.kernel() == kernel && r.rows() == rows && r.kv_granularity() == kv_granularity) return &r;
  }
  return nullptr;
}

absl::StatusOr<ResolvedVariant> ResolveVariant(const VariantQuery& query) {
  const absl::StatusOr<proto::KernelRegistry>& registry = CachedRegistry(query.arch);
  if (!registry.ok()) return registry.status();
  return ResolveVariant(*registry, query);  // no copy: this runs once per plan
}

absl::StatusOr<proto::CostModel> VariantCost(Arch arch, const std::string& name) {
  const absl::StatusOr<proto::KernelRegistry>& registry = CachedRegistry(arch);
  if (!registry.ok()) return registry.status();
  for (const proto::KernelRow& row : registry->kernel()) {
    if (row.name() == name) return row.cost();
  }
  return absl::NotFoundError(
      absl::StrCat("no kernel named '", name, "' in the ", Str(ArchName(arch)), " registry"));
}

}  // namespace mlaps
