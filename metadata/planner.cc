#include "metadata/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "metadata/capacity.h"
#include "metadata/decode_route.h"

namespace mlaps {
namespace {

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status TooSmall(absl::string_view buffer, size_t have, int64_t need) {
  return absl::ResourceExhaustedError(
      absl::StrCat("plan buffer ", buffer, " holds ", have, " entries but this plan needs ", need));
}

// Blocks one CU is filled to: ceil(total / num_cu) plus one item's overhead, and at least
// enough that an empty CU can take one split quantum (else no split could ever happen and
// every tile would walk on to the last CU).
int64_t Payload(int64_t total, int num_cu, int64_t overhead, int64_t quantum_blocks) {
  return std::max(CeilDiv(total, num_cu) + overhead, overhead + quantum_blocks);
}

// The policy's assignment of `tiles` (request order, BuildTiles) under resolved options:
// greedy payload walks KvLanes lanes (*lanes; 1 for longest first) and reorders `tiles`
// lane-major, the plan order the assignments index.
std::vector<Assignment> AssignTiles(std::vector<QoTile>& tiles, const PlanOptions& o, int page_size,
                                    int* lanes) {
  switch (o.policy) {
    case PlanPolicy::kGreedyPayload:
      *lanes = KvLanes(tiles, o.num_cu, o.kv_lanes);
      tiles = LaneMajorTiles(std::move(tiles), *lanes);
      return AssignGreedyPayload(tiles, o, page_size, *lanes);
    case PlanPolicy::kLongestFirst:
      *lanes = 1;
      return AssignLongestFirst(tiles, o, page_size);
  }
  *lanes = 1;
  return {};
}

}  // namespace

absl::string_view PolicyName(PlanPolicy policy) {
  switch (policy) {
    case PlanPolicy::kGreedyPayload:
      return "greedy_payload";
    case PlanPolicy::kLongestFirst:
      return "longest_first";
  }
  return "unknown";
}

absl::StatusOr<PlanPolicy> ParsePolicy(absl::string_view name) {
  if (name == "greedy_payload" || name.empty()) return PlanPolicy::kGreedyPayload;
  if (name == "longest_first") return PlanPolicy::kLongestFirst;
  return absl::InvalidArgumentError(
      absl::StrCat("policy '", name, "' is not one of: greedy_payload, longest_first"));
}

VariantQuery VariantQueryOf(const Batch& batch, bool lse) {
  VariantQuery query;
  query.arch = batch.arch;
  query.q_dtype = batch.q_dtype;
  query.kv_dtype = batch.kv_dtype;
  query.num_heads = batch.num_heads;
  query.qlen = batch.max_qlen();
  query.cp_round_robin = batch.cp_round_robin;
  query.lse = lse;
  return query;
}

int DefaultFixedOverhead(const ResolvedVariant& variant, Arch arch, int page_size,
                         int kv_granularity, int num_cu) {
  const bool several = num_cu == 0 ? variant.blocks_per_cu > 1 : num_cu > DefaultNumCu(arch);
  const UnitCosts unit = TileUnitCosts(
      variant.cost, variant.heads_per_group * variant.tokens_per_tile, several, kv_granularity);
  if (!(unit.ns_per_block > 0) || !(unit.ns_per_item >= 0)) {
    return std::max<int>(1, CeilDiv(16, page_size));
  }
  const double blocks = std::ceil(unit.ns_per_item / unit.ns_per_block);
  return static_cast<int>(std::clamp(blocks, 1.0, static_cast<double>(1 << 20)));
}

double SplitReduceNs(const proto::ReduceCost& reduce, int rows, int grid) {
  return reduce.ns_per_launch() + 2.0 * rows * reduce.ns_per_partial_row() * grid;
}

absl::StatusOr<PlanOptions> ResolveOptions(const Batch& batch, const PlanOptions& options) {
  PlanOptions o = options;
  if (o.num_cu == 0) o.num_cu = DefaultNumCu(batch.arch);
  if (o.num_cu < 1 || o.num_cu > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_cu = ", o.num_cu, ": must be in [1, 65536] (0: the arch default)"));
  }
  if (o.kv_granularity == 0) o.kv_granularity = std::max(16, batch.page_size);
  if (!IsPowerOfTwo(o.kv_granularity) || o.kv_granularity > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_granularity = ", o.kv_granularity,
                     ": must be a power of two in [1, 65536] (0: max(16, page_size))"));
  }
  // The variant at the batch's largest qlen (one at least); a batch no variant serves takes
  // AITER's default charge here and fails where the variant is needed.
  std::optional<ResolvedVariant> variant;  // resolved for the default charge only
  if (o.fixed_overhead == -1) {
    VariantQuery vq = VariantQueryOf(batch, o.lse);
    vq.qlen = std::max(1, vq.qlen);
    if (absl::StatusOr<ResolvedVariant> v = ResolveVariant(vq); v.ok()) variant = *std::move(v);
    o.fixed_overhead = variant ? DefaultFixedOverhead(*variant, batch.arch, batch.page_size,
                                                      o.kv_granularity, options.num_cu)
                               : std::max<int>(1, CeilDiv(16, batch.page_size));
  }
  if (o.fixed_overhead < 0 || o.fixed_overhead > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("fixed_overhead = ", o.fixed_overhead,
                                                   ": must be in [0, 2^20] (-1: the default)"));
  }
  if (o.max_split_per_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_split_per_batch = ", o.max_split_per_batch,
                                                   ": must be >= 0 (0: no limit)"));
  }
  if (o.kv_lanes == 0) o.kv_lanes = DefaultKvLanes(batch.arch);
  if (o.kv_lanes < 1 || o.kv_lanes > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_lanes = ", o.kv_lanes, ": must be in [1, 64] (0: the arch's default)"));
  }
  if (variant && ValidateBatch(batch).ok()) {
    PlanOptions planned = o;  // on the grid PlanDecodeInto plans
    if (options.num_cu == 0) planned.num_cu *= variant->blocks_per_cu;
    o.fixed_overhead = BatchFixedOverhead(batch, *variant, planned);
  }
  return o;
}

namespace {

// The times (ns) the variant's registry costs predict for the plan `o` makes of `tiles`
// (request order): the busiest CU's items (kv blocks x ns_per_block + ns_per_item each, `unit`)
// and the reduce of the split tiles (the registry's reduce entry).
struct PlanPrediction {
  double makespan_ns = 0, reduce_ns = 0;
  int64_t split_tiles = 0;
  double total_ns() const { return makespan_ns + reduce_ns; }
};
PlanPrediction PredictPlan(const std::vector<QoTile>& tiles, const ResolvedVariant& variant,
                           const PlanOptions& o, int page_size, const UnitCosts& unit) {
  std::vector<QoTile> ordered = tiles;
  int lanes = 1;
  const std::vector<Assignment> assignments = AssignTiles(ordered, o, page_size, &lanes);
  std::vector<double> load(o.num_cu, 0.0);
  std::vector<int64_t> pieces(ordered.size(), 0);
  for (const Assignment& a : assignments) {
    load[a.cu] +=
        static_cast<double>(CeilDiv(a.kv_end - a.kv_begin, o.kv_granularity)) * unit.ns_per_block +
        unit.ns_per_item;
    ++pieces[a.tile];
  }
  int64_t rows = 0;
  PlanPrediction p;
  for (size_t t = 0; t < ordered.size(); ++t) {
    if (pieces[t] > 1) {
      rows += pieces[t] * ordered[t].tokens() * variant.heads_per_group;
      ++p.split_tiles;
    }
  }
  p.makespan_ns = *std::max_element(load.begin(), load.end());
  p.reduce_ns = ReduceNs(variant.reduce, rows);
  return p;
}

}  // namespace

namespace {

// The sm90 kernel the launcher runs `batch`'s tiles of `rows` rows on, on a grid of num_cu blocks
// (Sm90DecodeKernelName).
const char* Sm90KernelOf(const Batch& batch, int rows, int num_cu) {
  return Sm90DecodeKernelName(
      batch.kv_dtype == DType::kFp8, rows, num_cu > DefaultNumCu(batch.arch), batch.page_size,
      batch.kv_indptr.empty() ? 0 : batch.kv_indptr.back(), batch.num_requests());
}

}  // namespace

UnitCosts BatchUnitCosts(const Batch& batch, const proto::CostModel& cost, int rows, int num_cu,
                         int kv_granularity) {
  const bool several = num_cu > DefaultNumCu(batch.arch);
  if (batch.arch == Arch::kSm90) {
    const char* kernel = Sm90KernelOf(batch, rows, num_cu);
    if (const proto::RoutedTileCost* r = RoutedCost(cost, kernel, rows, kv_granularity)) {
      return UnitCosts{r->ns_per_block(), r->ns_per_item()};
    }
  }
  return TileUnitCosts(cost, rows, several, kv_granularity);
}

namespace {

// BatchFixedOverhead where the item plan's reduce is more than a tenth of its busiest CU (short
// items). There the reduce's registry cost (timed alone) overstates what it adds after the bf16 hi
// + lo kernel (measured on the H200 at 32 x 1024 (64,2): 8 us against 16 predicted; whole tiles ran
// 61.9 -> 66.7 us), so those plans keep the item charge. After the f16 P V kernel it adds more than
// the registry predicts (H200: 20 us against 16; H100: 18.0-19.3, 19.3-19.6 timed alone), and a
// split piece costs more than the tile entry says (32-39 kcycles for 1-5 kv blocks against 63 for a
// whole 16-block tile), so whole tiles are weighed against the item plan, makespan plus reduce: at
// 32 x 1024 fp8 (32,3), (64,2), (128,1) they ran 53.7, 61.1, 60.9 -> 43.6, 44.4, 43.7 us on the
// H100 (kernels/decode/notes.md, session 39). Whole tiles: the least charge with which an empty
// CU's payload (the mean load plus one charge) holds the largest tile. Uniform batches then split
// none; where a partly filled CU still splits a tile (mixed lengths), the item charge stays.
int ShortItemsFixedOverhead(const Batch& batch, const ResolvedVariant& variant,
                            const PlanOptions& options, const std::vector<QoTile>& tiles,
                            const PlanPrediction& item, const UnitCosts& unit) {
  const int rows = variant.heads_per_group * variant.tokens_per_tile;
  if (batch.arch != Arch::kSm90 ||
      std::string_view(Sm90KernelOf(batch, rows, options.num_cu)) != "f16pv") {
    return options.fixed_overhead;
  }
  int64_t n = 0, sum = 0, most = 0;
  for (const QoTile& t : tiles) {
    if (t.kv_tokens <= 0) continue;
    ++n;
    sum += t.blocks;
    most = std::max(most, t.blocks);
  }
  if (n == 0) return options.fixed_overhead;
  // A fresh CU holds the largest tile whole when ceil((sum + n x charge) / num_cu) >= most.
  const int64_t charge =
      std::max<int64_t>(0, (static_cast<int64_t>(options.num_cu) * (most - 1) - sum) / n + 1);
  if (charge <= options.fixed_overhead || charge > (1 << 20)) return options.fixed_overhead;
  PlanOptions whole = options;
  whole.fixed_overhead = static_cast<int>(charge);
  const PlanPrediction w = PredictPlan(tiles, variant, whole, batch.page_size, unit);
  if (w.split_tiles > 0) return options.fixed_overhead;
  return w.total_ns() < item.total_ns() ? whole.fixed_overhead : options.fixed_overhead;
}

}  // namespace

int BatchFixedOverhead(const Batch& batch, const ResolvedVariant& variant,
                       const PlanOptions& options) {
  const int rows = variant.heads_per_group * variant.tokens_per_tile;
  const UnitCosts unit =
      BatchUnitCosts(batch, variant.cost, rows, options.num_cu, options.kv_granularity);
  if (!(unit.ns_per_block > 0) || !(unit.ns_per_item >= 0)) return options.fixed_overhead;
  const double charge = std::ceil(
      (unit.ns_per_item + SplitReduceNs(variant.reduce, rows, options.num_cu)) / unit.ns_per_block);
  PlanOptions split_charged = options;
  split_charged.fixed_overhead =
      static_cast<int>(std::clamp(charge, 1.0, static_cast<double>(1 << 20)));
  if (split_charged.fixed_overhead <= options.fixed_overhead) return options.fixed_overhead;
  // Gathered kv blocks (pages of < 64 tokens, sparse): measured slower with the larger charge
  // on the H200 (fp8 varlen page 1: 4.5-8.6%), where the costs of gathered blocks come from one
  // calibration family. The item charge stays.
  if (batch.page_size < kSm90WholePageTokens) return options.fixed_overhead;
  const std::vector<QoTile> tiles = BuildTiles(batch, variant, options.kv_granularity);
  const PlanPrediction item = PredictPlan(tiles, variant, options, batch.page_size, unit);
  if (10 * item.reduce_ns > item.makespan_ns) {
    return ShortItemsFixedOverhead(batch, variant, options, tiles, item, unit);
  }
  const PlanPrediction split = PredictPlan(tiles, variant, split_charged, batch.page_size, unit);
  return split.total_ns() < item.total_ns() ? split_charged.fixed_overhead : options.fixed_overhead;
}

// sm90: lanes measured 4-23% faster on the H200 (kernels/decode/notes.md); the AMD archs keep
// 1 until measured there.
absl::StatusOr<ResolvedPlan> ResolvePlan(const Batch& batch, const PlanOptions& options) {
  absl::StatusOr<PlanOptions> o = ResolveOptions(batch, options);
  if (!o.ok()) return o.status();
  VariantQuery vq = VariantQueryOf(batch, o->lse);
  vq.qlen = std::max(1, vq.qlen);
  absl::StatusOr<ResolvedVariant> v = ResolveVariant(vq);
  if (!v.ok()) return v.status();
  if (options.num_cu == 0) o->num_cu *= v->blocks_per_cu;  // as PlanDecodeInto
  CapacityQuery cq = CapacityQueryOf(batch, o->num_cu, o->lse);
  cq.max_qlen = vq.qlen;
  absl::StatusOr<PlanCapacity> c = ComputePlanCapacity(cq);
  if (!c.ok()) return c.status();
  return ResolvedPlan{*o, *std::move(v), *c};
}

int DefaultKvLanes(Arch arch) { return arch == Arch::kSm90 ? kMaxKvLanes : 1; }

namespace {

// KvLanes' rule for requests of m tiles each: the largest divisor of m that divides num_cu, at
// most max_lanes; else 1.
int LanesOfTileCount(int64_t m, int num_cu, int max_lanes) {
  for (int d = static_cast<int>(std::min<int64_t>(max_lanes, m)); d > 1; --d) {
    if (m % d == 0 && num_cu % d == 0) return d;
  }
  return 1;
}

}  // namespace

int UniformKvLanes(const ResolvedVariant& variant, int qlen, int num_cu, int max_lanes) {
  const int per_tile = std::max(1, variant.tokens_per_tile);
  const int64_t tiles = (static_cast<int64_t>(std::max(1, qlen)) + per_tile - 1) / per_tile;
  const int64_t m = variant.head_fold * tiles;
  return LanesOfTileCount(m, num_cu, max_lanes);
}

int KvLanes(absl::Span<const QoTile> tiles, int num_cu, int max_lanes) {
  // M: the tiles with kv of each request that has any (tiles come request by request).
  int m = 0;
  for (size_t i = 0; i < tiles.size();) {
    size_t j = i;
    int with_kv = 0;
    for (; j < tiles.size() && tiles[j].b == tiles[i].b; ++j) with_kv += tiles[j].kv_tokens > 0;
    if (with_kv > 0) {
      if (m != 0 && with_kv != m) return 1;
      m = with_kv;
    }
    i = j;
  }
  return LanesOfTileCount(m, num_cu, max_lanes);
}

std::vector<QoTile> LaneMajorTiles(std::vector<QoTile> tiles, int lanes) {
  if (lanes <= 1) return tiles;
  int32_t index = 0;  // the tile's index inside its request
  for (size_t i = 0; i < tiles.size(); ++i) {
    index = i > 0 && tiles[i].b == tiles[i - 1].b ? index + 1 : 0;
    // Tiles without kv (requests without pages) get no work: last, in a lane of their own.
    tiles[i].lane = tiles[i].kv_tokens > 0 ? index % lanes : lanes;
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const QoTile& a, const QoTile& b) { return a.lane < b.lane; });
  return tiles;
}

std::vector<QoTile> BuildTiles(const Batch& batch, const ResolvedVariant& variant,
                               int kv_granularity) {
  const int r = variant.head_fold;
  const int per_tile = variant.tokens_per_tile;
  const bool causal_trim = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;
  std::vector<QoTile> tiles;
  size_t count = 0;
  for (int b = 0; b < batch.num_requests(); ++b) count += r * CeilDiv(batch.qlen(b), per_tile);
  tiles.reserve(count);
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int q = batch.qlen(b);
    const int64_t kv_len = batch.kv_len(b);
    for (int g = 0; g < r; ++g) {
      const int32_t v = b * r + g;
      const int32_t v_start = batch.qo_indptr[b] * r + g * q;  // folded qo_indptr[v]
      for (int t0 = 0; t0 < q; t0 += per_tile) {
        const int t1 = std::min(q, t0 + per_tile);
        QoTile tile;
        tile.v = v;
        tile.b = b;
        tile.qo_start = v_start + t0;
        tile.qo_end = v_start + t1;
        tile.first_token = t0;
        tile.kv_len = kv_len;
        // The tile's last token (t1 - 1) sees kv positions < L - q + t1.
        tile.kv_tokens = causal_trim ? kv_len - q + t1 : kv_len;
        tile.blocks = CeilDiv(tile.kv_tokens, kv_granularity);
        tiles.push_back(tile);
      }
    }
  }
  return tiles;
}

namespace {

// What one greedy walk needs: block size, per-item overhead, split quantum, payload.
struct Walk {
  const PlanOptions& options;
  int64_t g, overhead, quantum, payload;
  int cu = 0;
  int64_t remaining = 0;

  Walk(const PlanOptions& o, int page_size, int64_t total)
      : options(o),
        g(o.kv_granularity),
        overhead(o.fixed_overhead),
        quantum(std::max<int64_t>(o.kv_granularity, page_size)),
        payload(Payload(total, o.num_cu, o.fixed_overhead,
                        CeilDiv(std::max<int64_t>(o.kv_granularity, page_size), o.kv_granularity))),
        remaining(payload) {}

  int64_t Cost(int64_t kv_tokens) const { return CeilDiv(kv_tokens, g) + overhead; }

  // Greedy payload for one tile: fill the current CU, split on a quantum boundary when it
  // runs out, go on with the next CU.
  void Place(const QoTile& tile, int32_t i, std::vector<Assignment>& out) {
    int64_t begin = 0;
    int pieces = 0;
    while (true) {
      const int64_t rest = tile.kv_tokens - begin;
      const int64_t rest_cost = Cost(rest);
      const bool fresh = remaining == payload;
      if (rest_cost <= remaining || cu == options.num_cu - 1) {
        out.push_back({i, cu, begin, tile.kv_tokens});
        remaining -= rest_cost;
        return;
      }
      // Take what fits this CU, leaving a tail of at least the tile's token count so every
      // q token sees a kv token in the last piece.
      const bool may_split =
          options.max_split_per_batch == 0 || pieces + 1 < options.max_split_per_batch;
      const int64_t take = may_split ? std::min((remaining - overhead) * g / quantum * quantum,
                                                (rest - tile.tokens()) / quantum * quantum)
                                     : 0;
      if (take > 0) {
        out.push_back({i, cu, begin, begin + take});
        begin += take;
        ++pieces;
      } else if (fresh) {
        // The rest cannot be split (split limit or tail rule) and no later CU has more
        // room than this empty one: it takes the rest whole.
        out.push_back({i, cu, begin, tile.kv_tokens});
        remaining -= rest_cost;
        return;
      }
      ++cu;
      remaining = payload;
    }
  }
};

int64_t TotalCost(absl::Span<const QoTile> tiles, int64_t overhead) {
  int64_t total = 0;
  for (const QoTile& t : tiles) {
    if (t.kv_tokens > 0) total += t.blocks + overhead;
  }
  return total;
}

}  // namespace

std::vector<Assignment> AssignGreedyPayload(absl::Span<const QoTile> tiles,
                                            const PlanOptions& options, int page_size, int lanes) {
  std::vector<Assignment> out;
  if (lanes <= 1) {
    Walk walk(options, page_size, TotalCost(tiles, options.fixed_overhead));
    for (int32_t i = 0; i < static_cast<int32_t>(tiles.size()); ++i) {
      if (tiles[i].kv_tokens > 0) walk.Place(tiles[i], i, out);  // else O = 0, LSE = -inf
    }
    return out;
  }
  // Lanes: tile j of lane l is tiles[l * per_lane + j] (lane-major), the same request for every
  // l. One walk over reference tiles (the least kv and the most q tokens of the lanes' j-th
  // tiles) on num_cu / lanes CUs gives every lane the same pieces; a lane's last piece of a
  // tile runs to that tile's own kv end (>= the reference's, so its tail still holds its
  // tokens).
  int32_t per_lane = 0;
  while (per_lane < static_cast<int32_t>(tiles.size()) && tiles[per_lane].lane == 0) ++per_lane;
  std::vector<QoTile> ref(tiles.begin(), tiles.begin() + per_lane);
  for (int32_t j = 0; j < per_lane; ++j) {
    int32_t tokens = ref[j].tokens();
    for (int l = 1; l < lanes; ++l) {
      const QoTile& t = tiles[l * per_lane + j];
      ref[j].kv_tokens = std::min(ref[j].kv_tokens, t.kv_tokens);
      tokens = std::max(tokens, t.tokens());
    }
    ref[j].qo_end = ref[j].qo_start + tokens;
    ref[j].blocks = CeilDiv(ref[j].kv_tokens, options.kv_granularity);
  }
  PlanOptions lane_options = options;
  lane_options.num_cu = options.num_cu / lanes;
  Walk walk(lane_options, page_size, TotalCost(ref, options.fixed_overhead));
  std::vector<Assignment> pieces;
  for (int32_t j = 0; j < per_lane; ++j) walk.Place(ref[j], j, pieces);
  for (int l = 0; l < lanes; ++l) {
    for (const Assignment& a : pieces) {
      const int32_t t = l * per_lane + a.tile;
      const int64_t end = a.kv_end == ref[a.tile].kv_tokens ? tiles[t].kv_tokens : a.kv_end;
      out.push_back({t, a.cu + l * lane_options.num_cu, a.kv_begin, end});
    }
  }
  return out;
}

std::vector<Assignment> AssignLongestFirst(absl::Span<const QoTile> tiles,
                                           const PlanOptions& options, int page_size) {
  Walk walk(options, page_size, TotalCost(tiles, options.fixed_overhead));
  const int64_t g = walk.g, overhead = walk.overhead, quantum = walk.quantum;
  const int64_t payload = walk.payload;
  std::vector<Assignment> out;
  // Phase 1: tiles larger than a CU's payload must be split anyway: wrap them over the CUs
  // in plan order as greedy payload does (the fewest pieces for them).
  std::vector<int32_t> order;
  for (int32_t i = 0; i < static_cast<int32_t>(tiles.size()); ++i) {
    if (tiles[i].kv_tokens <= 0) continue;
    if (walk.Cost(tiles[i].kv_tokens) > payload) {
      walk.Place(tiles[i], i, out);
    } else {
      order.push_back(i);
    }
  }
  std::vector<int64_t> load(options.num_cu, 0);
  for (const Assignment& a : out) load[a.cu] += walk.Cost(a.kv_end - a.kv_begin);
  // Phase 2: the rest longest first, each whole to the least-loaded CU while it fits; ties
  // keep plan order so the result is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return tiles[a].blocks > tiles[b].blocks; });
  auto least_loaded = [&] {
    return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
  };
  for (int32_t i : order) {
    const QoTile& tile = tiles[i];
    int cu = least_loaded();
    if (load[cu] + tile.blocks + overhead <= payload) {
      out.push_back({i, cu, 0, tile.kv_tokens});
      load[cu] += tile.blocks + overhead;
      continue;
    }
    // Split into the largest gaps, each filled up to the payload on quantum boundaries,
    // keeping a tail of at least the tile's tokens.
    int64_t begin = 0;
    int pieces = 0;
    while (true) {
      cu = least_loaded();
      const int64_t rest = tile.kv_tokens - begin;
      const int64_t rest_cost = walk.Cost(rest);
      const bool last_allowed =
          options.max_split_per_batch > 0 && pieces + 1 >= options.max_split_per_batch;
      int64_t take = (payload - load[cu] - overhead) * g / quantum * quantum;
      take = std::min(take, (rest - tile.tokens()) / quantum * quantum);
      if (load[cu] + rest_cost <= payload || last_allowed || take <= 0) {
        out.push_back({i, cu, begin, tile.kv_tokens});
        load[cu] += rest_cost;
        break;
      }
      out.push_back({i, cu, begin, begin + take});
      load[cu] += CeilDiv(take, g) + overhead;
      begin += take;
      ++pieces;
    }
  }
  return out;
}

absl::StatusOr<PlanSizes> PlanDecodeInto(const Batch& batch, const PlanOptions& options,
                                         const PlanBuffers& buffers) {
  if (absl::Status s = ValidateBatch(batch); !s.ok()) return s;
  absl::StatusOr<PlanOptions> resolved = ResolveOptions(batch, options);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<ResolvedVariant> variant = ResolveVariant(VariantQueryOf(batch, resolved->lse));
  if (!variant.ok()) return variant.status();
  // The default grid: every CU's share of persistent blocks for these tiles (registry).
  if (options.num_cu == 0) resolved->num_cu *= variant->blocks_per_cu;
  const PlanOptions& o = *resolved;

  std::vector<QoTile> tiles = BuildTiles(batch, *variant, o.kv_granularity);
  int lanes = 1;
  const std::vector<Assignment> assignments = AssignTiles(tiles, o, batch.page_size, &lanes);

  // Count, check every capacity, then write: nothing is written unless all of it fits.
  PlanSizes sizes;
  sizes.variant = *variant;
  sizes.num_cu = o.num_cu;
  sizes.kv_lanes = lanes;
  sizes.num_virtual_requests = batch.num_requests() * variant->head_fold;
  sizes.num_works = static_cast<int>(assignments.size());
  std::vector<int32_t> pieces_of_tile(tiles.size(), 0);
  for (const Assignment& a : assignments) ++pieces_of_tile[a.tile];
  for (size_t t = 0; t < tiles.size(); ++t) {
    if (pieces_of_tile[t] > 1) {
      ++sizes.num_reduce_tiles;
      sizes.num_reduce_pieces += pieces_of_tile[t];
      sizes.num_partial_rows += pieces_of_tile[t] * tiles[t].tokens();
    }
  }
  if (buffers.qo_indptr.size() < static_cast<size_t>(sizes.num_virtual_requests) + 1) {
    return TooSmall("qo_indptr", buffers.qo_indptr.size(), sizes.num_virtual_requests + 1);
  }
  if (buffers.work_indptr.size() < static_cast<size_t>(o.num_cu) + 1) {
    return TooSmall("work_indptr", buffers.work_indptr.size(), o.num_cu + 1);
  }
  if (buffers.work_info.size() < static_cast<size_t>(sizes.num_works)) {
    return TooSmall("work_info", buffers.work_info.size(), sizes.num_works);
  }
  if (buffers.reduce_indptr.size() < static_cast<size_t>(sizes.num_reduce_tiles) + 1) {
    return TooSmall("reduce_indptr", buffers.reduce_indptr.size(), sizes.num_reduce_tiles + 1);
  }
  if (buffers.reduce_final_map.size() < 2 * static_cast<size_t>(sizes.num_reduce_tiles)) {
    return TooSmall("reduce_final_map", buffers.reduce_final_map.size(),
                    2 * sizes.num_reduce_tiles);
  }
  if (buffers.reduce_partial_map.size() < static_cast<size_t>(sizes.num_reduce_pieces)) {
    return TooSmall("reduce_partial_map", buffers.reduce_partial_map.size(),
                    sizes.num_reduce_pieces);
  }

  // Folded qo_indptr: request b's q tokens repeated head_fold times.
  const int r = variant->head_fold;
  buffers.qo_indptr[0] = 0;
  for (int v = 0; v < sizes.num_virtual_requests; ++v) {
    buffers.qo_indptr[v + 1] = buffers.qo_indptr[v] + batch.qlen(v / r);
  }

  // Partial rows and reduce maps, in tile order; each split piece gets the tile's tokens.
  std::vector<int32_t> first_row(tiles.size(), kNoPartial);
  int32_t row = 0, reduce_tile = 0, reduce_piece = 0;
  buffers.reduce_indptr[0] = 0;
  for (size_t t = 0; t < tiles.size(); ++t) {
    if (pieces_of_tile[t] <= 1) continue;
    first_row[t] = row;
    buffers.reduce_final_map[2 * reduce_tile] = tiles[t].qo_start;
    buffers.reduce_final_map[2 * reduce_tile + 1] = tiles[t].qo_end;
    for (int p = 0; p < pieces_of_tile[t]; ++p) {
      buffers.reduce_partial_map[reduce_piece++] = row;
      row += tiles[t].tokens();
    }
    buffers.reduce_indptr[++reduce_tile] = reduce_piece;
  }

  // work_indptr by counting per CU; items keep their policy order within a CU.
  std::fill(buffers.work_indptr.begin(), buffers.work_indptr.begin() + o.num_cu + 1, 0);
  for (const Assignment& a : assignments) ++buffers.work_indptr[a.cu + 1];
  for (int c = 0; c < o.num_cu; ++c) buffers.work_indptr[c + 1] += buffers.work_indptr[c];
  std::vector<int32_t> cursor(buffers.work_indptr.begin(), buffers.work_indptr.begin() + o.num_cu);
  std::vector<int32_t> piece_index(tiles.size(), 0);
  for (const Assignment& a : assignments) {
    const QoTile& tile = tiles[a.tile];
    const int32_t page_base = batch.kv_indptr[tile.b];
    const int64_t end_page = CeilDiv(a.kv_end, batch.page_size);
    WorkInfo w;
    w.batch_idx = tile.v;
    w.partial_qo_loc = first_row[a.tile] == kNoPartial
                           ? kNoPartial
                           : first_row[a.tile] + piece_index[a.tile]++ * tile.tokens();
    w.qo_start = tile.qo_start;
    w.qo_end = tile.qo_end;
    w.kv_start = page_base + static_cast<int32_t>(a.kv_begin / batch.page_size);
    w.kv_end = page_base + static_cast<int32_t>(end_page);
    w.kv_offset = static_cast<int32_t>(tile.kv_len -
                                       std::min<int64_t>(end_page * batch.page_size, tile.kv_len));
    w.pad = 0;
    buffers.work_info[cursor[a.cu]++] = w;
  }
  return sizes;
}

absl::StatusOr<WorkPlan> PlanDecode(const Batch& batch, const PlanOptions& options) {
  // Size from this batch's own maxima, then trim to what was used.
  if (absl::Status s = ValidateBatch(batch); !s.ok()) return s;
  absl::StatusOr<PlanOptions> o = ResolveOptions(batch, options);
  if (!o.ok()) return o.status();
  // options.num_cu, not o->num_cu: 0 lets the capacity (and PlanDecodeInto) apply the
  // variant's blocks_per_cu to the default grid.
  absl::StatusOr<PlanCapacity> capacity =
      ComputePlanCapacity(CapacityQueryOf(batch, options.num_cu, o->lse));
  if (!capacity.ok()) return capacity.status();
  WorkPlan plan;
  plan.qo_indptr.resize(capacity->qo_indptr);
  plan.work_indptr.resize(capacity->work_indptr);
  plan.work_info.resize(capacity->work_info);
  plan.reduce_indptr.resize(capacity->reduce_indptr);
  plan.reduce_final_map.resize(capacity->reduce_final_map);
  plan.reduce_partial_map.resize(capacity->reduce_partial_map);
  absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(
      batch, options,
      PlanBuffers{absl::MakeSpan(plan.qo_indptr), absl::MakeSpan(plan.work_indptr),
                  absl::MakeSpan(plan.work_info), absl::MakeSpan(plan.reduce_indptr),
                  absl::MakeSpan(plan.reduce_final_map), absl::MakeSpan(plan.reduce_partial_map)});
  if (!sizes.ok()) return sizes.status();
  plan.variant = sizes->variant.name;
  plan.rows_per_tile = sizes->variant.rows_per_tile;
  plan.tokens_per_tile = sizes->variant.tokens_per_tile;
  plan.head_fold = sizes->variant.head_fold;
  plan.num_cu = sizes->num_cu;
  plan.kv_lanes = sizes->kv_lanes;
  plan.qo_indptr.resize(sizes->num_virtual_requests + 1);
  plan.work_indptr.resize(sizes->num_cu + 1);  // the capacity may cover a larger default grid
  plan.work_info.resize(sizes->num_works);
  plan.reduce_indptr.resize(sizes->num_reduce_tiles + 1);
  plan.reduce_final_map.resize(2 * sizes->num_reduce_tiles);
  plan.reduce_partial_map.resize(sizes->num_reduce_pieces);
  plan.num_partial_rows = sizes->num_partial_rows;
  return plan;
}

}  // namespace mlaps
