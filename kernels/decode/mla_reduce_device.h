// Device code of the reduce kernel that merges split tiles (contract: mla_decode.h;
// execution model: sim/executor.h). A header for the same reason as mla_decode_device.h
// (the CPU emulation compiles it too); it shares that header's number helpers and status word.
#ifndef MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_
#define MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_

#include "kernels/decode/mla_decode_device.h"

namespace mlaps {
namespace mla {

// ---- The reduce kernel -----------------------------------------------------------------------

// Loads this lane's columns of one partial O row (kChunks float4 chunks, 4 * kLanes floats
// apart), all loads issued together.
template <int kChunks, int kLanes>
__device__ __forceinline__ void LoadPieceColumns(const float* row, int lane, float4 (&v)[kChunks]) {
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    v[k] = *reinterpret_cast<const float4*>(row + 4 * lane + 4 * kLanes * k);
  }
}

// acc += wgt * v, chunk by chunk.
template <int kChunks>
__device__ __forceinline__ void AddWeighted(float wgt, const float4 (&v)[kChunks],
                                            float4 (&acc)[kChunks]) {
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    acc[k].x += wgt * v[k].x;
    acc[k].y += wgt * v[k].y;
    acc[k].z += wgt * v[k].z;
    acc[k].w += wgt * v[k].w;
  }
}

// Merges the pieces (n >= 0) of one (token, head) row into final O / LSE: g = max of the live
// LSEs (finite ones; NaN / +-inf count as -inf), lse = g + ln(sum exp(lse_p - g)),
// O = sum exp(lse_p - lse) O_p over the live pieces. kLanes threads share the row (lane: this
// thread's), each holding kDimV / kLanes columns as float4 chunks. kFew > 0: at most kFew
// pieces, whose LSE loads issue together; 0: any number, three passes over the LSEs. The
// partial O rows are loaded two pieces at a time, the first two together with the LSEs (they
// do not depend on them), so that a row of two pieces (the common split) costs one round
// trip to memory instead of three. A dead piece's O is loaded but never read, so garbage in
// it cannot reach O. Params: MlaReduceParams, or MlaDecodeParams for the decode's own merge
// (the same partial and output fields).
template <int kFew, int kLanes, class Params>
__device__ __forceinline__ void MergeRow(const Params& p, const int32_t* locs, int n, int64_t tok,
                                         int hh, int hg, int64_t out_row, int lane) {
  constexpr int kChunks = kDimV / (4 * kLanes);
  static_assert(kChunks * 4 * kLanes == kDimV, "the row's columns split evenly over the lanes");
  auto piece_row = [&](int j) { return (static_cast<int64_t>(locs[j]) + tok) * hg + hh; };
  // Pieces j and j + 1 (the last piece again past n: a load in bounds, never added). Zeroed
  // for n = 0, which loads nothing.
  float4 v0[kChunks] = {}, v1[kChunks] = {};
  auto load_pair = [&](int j) {
    LoadPieceColumns<kChunks, kLanes>(p.partial_o + piece_row(j) * kDimV, lane, v0);
    LoadPieceColumns<kChunks, kLanes>(p.partial_o + piece_row(j + 1 < n ? j + 1 : j) * kDimV, lane,
                                      v1);
  };
  if (n > 0) load_pair(0);
  float gmax = NegInf();
  float lse_p[kFew > 0 ? kFew : 1];
  if (kFew > 0) {
#pragma unroll
    for (int j = 0; j < (kFew > 0 ? kFew : 1); ++j) {
      lse_p[j] = j < n ? p.partial_lse[piece_row(j)] : NegInf();
      if (IsFiniteF(lse_p[j])) gmax = MaxF(gmax, lse_p[j]);
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const float x = p.partial_lse[piece_row(j)];
      if (IsFiniteF(x)) gmax = MaxF(gmax, x);
    }
  }
  // Exactly one of o / o32 is set: bf16 final O (default) or fp32 final O (CP ranks).
  uint16_t* o = p.o != nullptr ? p.o + out_row * kDimV : nullptr;
  float* o32 = p.o_fp32 != nullptr ? p.o_fp32 + out_row * kDimV : nullptr;
  float4 acc[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float lse = NegInf();
  if (gmax != NegInf()) {
    float sum = 0.0f;
    if (kFew > 0) {
#pragma unroll
      for (int j = 0; j < (kFew > 0 ? kFew : 1); ++j) {
        if (IsFiniteF(lse_p[j])) sum += expf(lse_p[j] - gmax);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        const float x = p.partial_lse[piece_row(j)];
        if (IsFiniteF(x)) sum += expf(x - gmax);
      }
    }
    lse = gmax + logf(sum);
    // Adds the loaded pair with the pieces' LSEs (-inf past n: not added).
    auto add_pair = [&](float a, float b) {
      if (IsFiniteF(a)) AddWeighted<kChunks>(expf(a - lse), v0, acc);
      if (IsFiniteF(b)) AddWeighted<kChunks>(expf(b - lse), v1, acc);
    };
    if (kFew > 0) {
#pragma unroll
      for (int j = 0; j < (kFew > 0 ? kFew : 1); j += 2) {
        if (j >= n) break;
        if (j > 0) load_pair(j);
        add_pair(lse_p[j], j + 1 < kFew ? lse_p[j + 1] : NegInf());
      }
    } else {
      for (int j = 0; j < n; j += 2) {
        if (j > 0) load_pair(j);
        add_pair(p.partial_lse[piece_row(j)],
                 j + 1 < n ? p.partial_lse[piece_row(j + 1)] : NegInf());
      }
    }
  }
  // No live piece: O = 0 (acc) and LSE = -inf.
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = 4 * lane + 4 * kLanes * k;
    if (o32 != nullptr) {
      *reinterpret_cast<float4*>(o32 + c) = acc[k];
      continue;
    }
    const uint32_t lo = static_cast<uint32_t>(FloatToBf16(acc[k].x)) |
                        (static_cast<uint32_t>(FloatToBf16(acc[k].y)) << 16);
    const uint32_t hi = static_cast<uint32_t>(FloatToBf16(acc[k].z)) |
                        (static_cast<uint32_t>(FloatToBf16(acc[k].w)) << 16);
    *reinterpret_cast<uint2*>(o + c) = make_uint2(lo, hi);
  }
  if (lane == 0) p.lse[out_row] = lse;
}

// The rows of a tile (tokens x heads of a group) merged by kThreads threads (`tid`: this
// thread's index among them), kThreads / kLanes rows at a time: rows (pass * kThreads /
// kLanes + group) for pass = first_pass, first_pass + pass_stride, ... A tile's rows, hence
// kLanes, are the same in every thread.
template <int kLanes, int kThreads, class Params>
__device__ __forceinline__ void MergeRows(const Params& p, const int32_t* locs, int n, int rows,
                                          int hg, int64_t out_row0, int tid, int first_pass,
                                          int pass_stride) {
  constexpr int kRowsAtOnce = kThreads / kLanes;
  const int group = tid / kLanes, lane = tid - group * kLanes;
  for (int row = first_pass * kRowsAtOnce + group; row < rows; row += pass_stride * kRowsAtOnce) {
    const int tok = row / hg, hh = row - tok * hg;
    const int64_t out_row = out_row0 + static_cast<int64_t>(tok) * p.num_heads + hh;
    if (n <= kReduceFewPieces) {
      MergeRow<kReduceFewPieces, kLanes>(p, locs, n, tok, hh, hg, out_row, lane);
    } else {
      MergeRow<0, kLanes>(p, locs, n, tok, hh, hg, out_row, lane);
    }
  }
}

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
