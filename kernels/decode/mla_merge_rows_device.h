// The merge of one split tile's rows from its pieces' partial rows (logsumexp), shared by the
// reduce kernel (mla_reduce_device.h) and the decode's own merge (mla_merge_device.h). A header
// of device functions only: both kernels' translation units include it.
#ifndef MLAPS_KERNELS_DECODE_MLA_MERGE_ROWS_DEVICE_H_
#define MLAPS_KERNELS_DECODE_MLA_MERGE_ROWS_DEVICE_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"

namespace mlaps {
namespace mla {

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
// O = sum exp(lse_p - lse) O_p over the live pieces, added in piece order. kLanes threads share
// the row (lane: this thread's), each holding kDimV / kLanes columns as float4 chunks. kFew > 0:
// at most kFew pieces, whose LSE loads issue together; 0: any number, three passes over the
// LSEs. The partial O rows are loaded kAtOnce pieces at a time, the first ones together with
// the LSEs (they do not depend on them), so that a row of up to kAtOnce pieces costs one round
// trip to memory (the reduce kernel: 2, a row's two pieces being the common split; the decode's
// own merge: 4, one block merging a whole tile). A dead piece's O is loaded but never read, so
// garbage in it cannot reach O. Params: MlaReduceParams, or MlaDecodeParams for the decode's own
// merge (the same partial and output fields).
template <int kFew, int kLanes, int kAtOnce, class Params>
__device__ __forceinline__ void MergeRow(const Params& p, const int32_t* locs, int n, int64_t tok,
                                         int hh, int hg, int64_t out_row, int lane) {
  constexpr int kChunks = kDimV / (4 * kLanes);
  static_assert(kChunks * 4 * kLanes == kDimV, "the row's columns split evenly over the lanes");
  auto piece_row = [&](int j) { return (static_cast<int64_t>(locs[j]) + tok) * hg + hh; };
  // Pieces j .. j + kAtOnce - 1 (the last piece again past n: a load in bounds, never added).
  // Zeroed for n = 0, which loads nothing.
  float4 v[kAtOnce][kChunks] = {};
  auto load_group = [&](int j) {
#pragma unroll
    for (int a = 0; a < kAtOnce; ++a) {
      LoadPieceColumns<kChunks, kLanes>(p.partial_o + piece_row(j + a < n ? j + a : n - 1) * kDimV,
                                        lane, v[a]);
    }
  };
  if (n > 0) load_group(0);
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
    // Adds loaded piece a of the group with its LSE (-inf past n: not added).
    auto add = [&](int a, float x) {
      if (IsFiniteF(x)) AddWeighted<kChunks>(expf(x - lse), v[a], acc);
    };
    if (kFew > 0) {
#pragma unroll
      for (int j = 0; j < (kFew > 0 ? kFew : 1); j += kAtOnce) {
        if (j >= n) break;
        if (j > 0) load_group(j);
#pragma unroll
        for (int a = 0; a < kAtOnce; ++a) add(a, j + a < kFew ? lse_p[j + a] : NegInf());
      }
    } else {
      for (int j = 0; j < n; j += kAtOnce) {
        if (j > 0) load_group(j);
#pragma unroll
        for (int a = 0; a < kAtOnce; ++a) {
          add(a, j + a < n ? p.partial_lse[piece_row(j + a)] : NegInf());
        }
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
template <int kLanes, int kThreads, int kAtOnce = 2, class Params>
__device__ __forceinline__ void MergeRows(const Params& p, const int32_t* locs, int n, int rows,
                                          int hg, int64_t out_row0, int tid, int first_pass,
                                          int pass_stride) {
  constexpr int kRowsAtOnce = kThreads / kLanes;
  const int group = tid / kLanes, lane = tid - group * kLanes;
  for (int row = first_pass * kRowsAtOnce + group; row < rows; row += pass_stride * kRowsAtOnce) {
    const int tok = row / hg, hh = row - tok * hg;
    const int64_t out_row = out_row0 + static_cast<int64_t>(tok) * p.num_heads + hh;
    if (n <= kReduceFewPieces) {
      MergeRow<kReduceFewPieces, kLanes, kAtOnce>(p, locs, n, tok, hh, hg, out_row, lane);
    } else {
      MergeRow<0, kLanes, kAtOnce>(p, locs, n, tok, hh, hg, out_row, lane);
    }
  }
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_MERGE_ROWS_DEVICE_H_
