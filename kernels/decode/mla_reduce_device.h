// Device code of the reduce kernel that merges split tiles (contract: mla_decode.h;
// execution model: sim/executor.h). A header for the same reason as mla_decode_device.h
// (the CPU emulation compiles it too); it shares that header's number helpers and status word.
#ifndef MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_
#define MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_

#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_merge_rows_device.h"

namespace mlaps {
namespace mla {

// ---- The reduce kernel -----------------------------------------------------------------------

// MergeRows with kReduceThreads / at_once lanes a row (at_once a power of two <= kAtOnce).
template <int kAtOnce>
__device__ __forceinline__ void MergeRowsAtOnce(const MlaReduceParams& p, const int32_t* locs,
                                                int n, int rows, int hg, int64_t out_row0,
                                                int at_once) {
  if constexpr (kAtOnce > 1) {
    if (at_once < kAtOnce) {
      MergeRowsAtOnce<kAtOnce / 2>(p, locs, n, rows, hg, out_row0, at_once);
      return;
    }
  }
  // Block y of the tile's kReduceRowSplit takes passes y, y + gridDim.y, ...
  MergeRows<kReduceThreads / kAtOnce, kReduceThreads>(p, locs, n, rows, hg, out_row0, threadIdx.x,
                                                      blockIdx.y, gridDim.y);
}

// Rows a reduce block merges side by side for a tile of `rows` rows: as few as fill the
// kReduceRowSplit blocks in one pass (more threads a row: fewer dependent loads each), at
// most kReduceRowsAtOnce.
__device__ __forceinline__ int RowsAtOnce(int rows) {
  int at_once = 1;
  while (at_once < kReduceRowsAtOnce && at_once * kReduceRowSplit < rows) at_once *= 2;
  return at_once;
}

// Split tile k (blockIdx.x) merged by kReduceRowSplit blocks (blockIdx.y), rows strided.
// Every thread validates the entry identically (uniform control flow); blocks past the
// tile's rows leave early (block y = 0 always validates, and reports). The entry's loads are
// issued together where they can be (the request search and the piece map by all threads at
// once): a small reduce is a chain of dependent global loads.
__device__ inline void ReduceBlock(const MlaReduceParams& p) {
  const int k = blockIdx.x;
  const bool reporter = threadIdx.x == 0 && blockIdx.y == 0;
  int tiles =
      p.num_reduce_tiles_device != nullptr ? *p.num_reduce_tiles_device : p.num_reduce_tiles;
  if (tiles > p.reduce_tiles_capacity) {
    if (reporter && k == 0) Report(p.status, kMlaBadReduceCount, -1, -1, tiles);
    tiles = p.reduce_tiles_capacity;
  }
  if (k >= tiles) return;
  const int64_t p0 = p.reduce_indptr[k], p1 = p.reduce_indptr[k + 1];
  if ((k == 0 && p0 != 0) || p0 < 0 || p1 < p0 || p1 > p.reduce_partial_map_capacity) {
    if (reporter) Report(p.status, kMlaBadReduceIndptr, k, k + 1, p1);
    return;
  }
  // The request of folded token qs: the last b with qo_indptr[b] * r <= qs.
  const int r = p.head_fold, hg = p.num_heads / r;
  const int64_t qs = p.reduce_final_map[2 * k], qe = p.reduce_final_map[2 * k + 1];
  const int64_t tile_rows = (qe - qs) * hg;
  const int at_once = RowsAtOnce(tile_rows > (1 << 30) ? (1 << 30) : static_cast<int>(tile_rows));
  if (blockIdx.y > 0 && static_cast<int64_t>(blockIdx.y) * at_once >= tile_rows) return;
  const int64_t total = static_cast<int64_t>(p.qo_indptr[p.num_requests]) * r;
  if (qs < 0 || qe <= qs || qe > total || total > static_cast<int64_t>(p.num_q_tokens) * r) {
    if (reporter) Report(p.status, kMlaBadReduceTile, k, 2 * k, qs);
    return;
  }
  // qo_indptr ascends (the plan's contract), so b is the count of requests with qo_indptr[b] *
  // r <= qs, less one; counted kReduceThreads requests at a time. (A qo_indptr that does not
  // ascend gives some b; the checks below keep every write inside O.)
  int count = 0;
  for (int b0 = 0; b0 < p.num_requests; b0 += kReduceThreads) {
    const int bb = b0 + static_cast<int>(threadIdx.x);
    count +=
        __syncthreads_count(bb < p.num_requests && static_cast<int64_t>(p.qo_indptr[bb]) * r <= qs);
    if (count < b0 + kReduceThreads) break;  // the same count in every thread
  }
  const int b = count > 0 ? count - 1 : 0;
  const int64_t qo0 = p.qo_indptr[b], qlen = p.qo_indptr[b + 1] - qo0;
  const int64_t g = qlen > 0 ? (qs - qo0 * r) / qlen : -1;
  const int64_t fqo = qo0 * r + g * qlen;  // folded qo_indptr[v]
  if (qlen <= 0 || g < 0 || g >= r || qe > fqo + qlen || qo0 + qlen > p.num_q_tokens) {
    if (reporter) Report(p.status, kMlaBadReduceTile, k, 2 * k + 1, qe);
    return;
  }
  const int tokens = static_cast<int>(qe - qs);
  constexpr int kMaxLocs = 1024;  // pieces of one split tile (<= num_cu in every plan)
  __shared__ int32_t locs[kMaxLocs];
  const int n = static_cast<int>(p1 - p0);
  // The piece map, read by all threads at once and checked together.
  int bad = n > kMaxLocs;
  if (!bad) {
    int mine = 0;
    for (int j = threadIdx.x; j < n; j += kReduceThreads) {
      const int32_t loc = p.reduce_partial_map[p0 + j];
      mine |= loc < 0 || static_cast<int64_t>(loc) + tokens > p.partial_rows_capacity;
      locs[j] = loc;
    }
    bad = __syncthreads_or(mine);  // also: every loc stored before any is read
  }
  if (bad) {
    if (reporter) Report(p.status, kMlaBadReducePartial, k, static_cast<int>(p0), n);
    return;
  }
  const int rows = tokens * hg;
  const int64_t out_row0 = (qo0 + (qs - fqo)) * p.num_heads + g * hg;
  // Launched after the decode as a programmatic dependent (LaunchMlaReduce): everything
  // above reads the plan only; the partials are the decode's, complete and visible past
  // this wait.
  mlapsGridDependencyWait();
  MergeRowsAtOnce<kReduceRowsAtOnce>(p, locs, n, rows, hg, out_row0, at_once);
}

__global__ void __launch_bounds__(kReduceThreads) MlaReduceKernel(const MlaReduceParams p) {
  ReduceBlock(p);
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_
