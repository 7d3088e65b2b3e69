// The kernel registry: which kernel variant runs a (arch, dtypes, H, qlen, cp, lse) shape,
// how its qo tiles are packed, and whether heads are folded.
//
// The registry is data: one text-format protobuf file per architecture under
// metadata/registry/ (gfx942.textproto, gfx950.textproto, sm90.textproto), with the columns
// of AITER's mla_asm.csv plus the (nhead, qlen) shapes each kernel serves. The files are
// compiled into the library, so no file is read at run time.
#ifndef MLAPS_METADATA_REGISTRY_H_
#define MLAPS_METADATA_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metadata/proto/mlaps.pb.h"
#include "metadata/types.h"

namespace mlaps {

struct VariantQuery {
  Arch arch = Arch::kSm90;
  DType q_dtype = DType::kBf16;
  DType kv_dtype = DType::kBf16;
  int num_heads = 16;  // H
  int qlen = 1;        // q tokens per request (the batch's maximum for varlen batches)
  bool cp_round_robin = false;
  bool lse = false;  // the caller needs LSE out
};

// What the planner and the kernels need to know about the chosen variant.
struct ResolvedVariant {
  std::string name;          // registry kernel name
  int rows_per_tile = 64;    // qo rows (heads x tokens) per tile: 64 or 128
  int q_seq_len = 1;         // the kernel's packed qSeqLen column
  int head_fold = 1;         // r: each request runs as r virtual requests of H / r heads
  int heads_per_group = 16;  // H / r
  int tokens_per_tile = 1;   // min(qlen, rows_per_tile / heads_per_group)
  int blocks_per_cu = 1;     // persistent blocks a CU runs at once for these tiles (registry
                             // TileCost for heads_per_group * tokens_per_tile rows; else 1)
  proto::CostModel cost;     // per-block and per-item cost of this variant
  proto::ReduceCost reduce;  // the arch's reduce kernel (the registry's reduce entry)
};

// The registry of one architecture, parsed from its embedded text proto.
// Errors: Internal if the embedded file does not parse or breaks a registry invariant
// (rows_per_tile not 64/128, a Serves whose H / head_fold exceeds rows_per_tile, ...).
absl::StatusOr<proto::KernelRegistry> LoadRegistry(Arch arch);

// Checks a registry (embedded or user-given) for the invariants above.
absl::Status ValidateRegistry(const proto::KernelRegistry& registry);

// Picks the variant for `query` from `registry`. A row matches when its arch, dtypes,
// ps = true, cprr = query.cp_round_robin, lse (when requested) match and one of its Serves
// covers (num_heads, qlen). The first matching row in file order wins.
// Errors: InvalidArgument for a malformed query (H or qlen <= 0); NotFound ("unsupported")
// naming the shape and listing the nearest supported (nhead, qlen) shapes for the same arch,
// dtypes and cp flag.
absl::StatusOr<ResolvedVariant> ResolveVariant(const proto::KernelRegistry& registry,
                                               const VariantQuery& query);

// Calibrated unit costs of a variant's tiles: ns a cost block (of the caller's kv_granularity
// tokens) and ns a work item. Zero ns_per_block: not calibrated.
struct UnitCosts {
  double ns_per_block = 0;
  double ns_per_item = 0;
};

// The costs of `rows`-row tiles at one occupancy (several_blocks_per_cu: a grid of more than
// one block a CU, which runs the several-blocks entry where the registry has one): the tile
// entry of that occupancy, else (several blocks a CU only) the rows' one-block entry, else
// the model's kernel-wide costs. Block costs were fitted for cost.kv_granularity tokens and are
// scaled to blocks of `kv_granularity` tokens (cost.kv_granularity 0: not scaled).
UnitCosts TileUnitCosts(const proto::CostModel& cost, int rows, bool several_blocks_per_cu,
                        int kv_granularity);

// The reduce time (ns) of `partial_rows` rows under `reduce` (a registry's reduce entry):
// ns_per_launch + ns_per_partial_row x partial_rows; 0 for no rows (no reduce launch).
double ReduceNs(const proto::ReduceCost& reduce, int64_t partial_rows);

// The routed entry (CostModel.routed) for plans of `kernel` on `rows`-row tiles at
// `kv_granularity`, or nullptr.
const proto::RoutedTileCost* RoutedCost(const proto::CostModel& cost, absl::string_view kernel,
                                        int rows, int kv_granularity);

// The cost model of kernel `name` in the embedded registry of `arch` (what ResolveVariant puts
// in ResolvedVariant::cost). Errors: NotFound when no row of that registry has the name.
absl::StatusOr<proto::CostModel> VariantCost(Arch arch, const std::string& name);

// Convenience: LoadRegistry(query.arch) then ResolveVariant.
absl::StatusOr<ResolvedVariant> ResolveVariant(const VariantQuery& query);

}  // namespace mlaps

#endif  // MLAPS_METADATA_REGISTRY_H_
