// The decode kernel that the sm90 launcher's automatic routing runs a plan on
// (kernels/decode/mla_decode.hip, MlaDecodeKernelName), as a pure function of the batch and the
// plan, so that the cost model (sim::TimeCostParams) costs the kernel that runs. Header-only
// and without dependencies: the launcher includes it too.
#ifndef MLAPS_METADATA_DECODE_ROUTE_H_
#define MLAPS_METADATA_DECODE_ROUTE_H_

#include <cstdint>

namespace mlaps {

// kv blocks of pages of at least this many tokens are whole pages that TMA loads (the sm90
// kernels' 64-token blocks); smaller pages and sparse gathers are copied row by row.
inline constexpr int kSm90WholePageTokens = 64;

// bf16 tiles of more than 16 rows run the f16 P V kernel on whole pages when requests average at
// least this many cached tokens by kv indices (num_kv_indices * page_size / num_requests), the
// bf16 hi + lo kernel otherwise (kernels/decode/notes.md, session 23: hi + lo is faster on
// short requests, small pages and sparse batches).
inline constexpr int64_t kSm90Bf16F16PvMinTokens = 4096;

constexpr bool Sm90Bf16RunsF16Pv(int64_t page_size, int64_t num_kv_indices, int64_t num_requests) {
  return page_size >= kSm90WholePageTokens && num_requests > 0 &&
         num_kv_indices * page_size >= kSm90Bf16F16PvMinTokens * num_requests;
}

// The name MlaDecodeKernelName reports for an automatic sm90 launch of tiles of `rows` q rows in
// use ((H / head_fold) * tokens_per_tile) on a grid of more than one block a CU or not: "mma"
// (the compact mma.sync layout) or "narrow" for rows <= 16; else "f16pv" for fp8, and for bf16
// where Sm90Bf16RunsF16Pv, else "bf16" (hi + lo).
constexpr const char* Sm90DecodeKernelName(bool fp8, int rows, bool several_blocks_per_cu,
                                           int64_t page_size, int64_t num_kv_indices,
                                           int64_t num_requests) {
  if (rows <= 16) return several_blocks_per_cu ? "mma" : "narrow";
  return fp8 || Sm90Bf16RunsF16Pv(page_size, num_kv_indices, num_requests) ? "f16pv" : "bf16";
}

}  // namespace mlaps

#endif  // MLAPS_METADATA_DECODE_ROUTE_H_
