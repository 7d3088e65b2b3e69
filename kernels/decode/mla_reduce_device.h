// Device code of the reduce kernel that merges split tiles (contract: mla_decode.h;
// execution model: sim/executor.h). A header for the same reason as mla_decode_device.h
// (the CPU emulation compiles it too); it shares that header's number helpers and status word.
#ifndef MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_
#define MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_

#include "kernels/decode/mla_decode_device.h"

namespace mlaps {
namespace mla {

// ---- The reduce kernel -----------------------------------------------------------------------

// Merges the pieces of one (token, head) row into final O / LSE: g = max of the live LSEs
// (finite ones; NaN / +-inf count as -inf), lse = g + ln(sum exp(lse_p - g)),
// O = sum exp(lse_p - lse) O_p. kLanes threads share the row (lane: this thread's), each
// holding kDimV / kLanes columns as float4 chunks whose loads issue together. kFew > 0: at
// most kFew pieces, all loads issued together; 0: any number, two passes over the LSEs and
// then one piece at a time.
template <int kFew, int kLanes>
__device__ __forceinline__ void MergeRow(const MlaReduceParams& p, const int32_t* locs, int n,
                                         int64_t tok, int hh, int hg, int64_t out_row, int lane) {
  constexpr int kChunks = kDimV / (4 * kLanes);
  static_assert(kChunks * 4 * kLanes == kDimV, "the row's columns split evenly over the lanes");
  float gmax = NegInf();
  float lse_p[kFew > 0 ? kFew : 1];
  if (kFew > 0) {
#pragma unroll
    for (int j = 0; j < (kFew > 0 ? kFew : 1); ++j) {
      lse_p[j] = j < n ? p.partial_lse[(locs[j] + tok) * hg + hh] : NegInf();
      if (IsFiniteF(lse_p[j])) gmax = MaxF(gmax, lse_p[j]);
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const float x = p.partial_lse[(locs[j] + tok) * hg + hh];
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
        const float x = p.partial_lse[(locs[j] + tok) * hg + hh];
        if (IsFiniteF(x)) sum += expf(x - gmax);
      }
    }
    lse = gmax + logf(sum);
    // acc += exp(lse_j - lse) O_j over the live pieces, all chunks of a piece at once.
    auto add_piece = [&](int j, float lse_j) {
      const float wgt = expf(lse_j - lse);
      const float* src = p.partial_o + ((locs[j] + tok) * hg + hh) * kDimV + 4 * lane;
      float4 v[kChunks];
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        v[k] = *reinterpret_cast<const float4*>(src + 4 * kLanes * k);
      }
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        acc[k].x += wgt * v[k].x;
        acc[k].y += wgt * v[k].y;
        acc[k].z += wgt * v[k].z;
        acc[k].w += wgt * v[k].w;
      }
    };
    if (kFew > 0) {
#pragma unroll
      for (int j = 0; j < (kFew > 0 ? kFew : 1); ++j) {
        if (IsFiniteF(lse_p[j])) add_piece(j, lse_p[j]);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        const float x = p.partial_lse[(locs[j] + tok) * hg + hh];
        if (IsFiniteF(x)) add_piece(j, x);
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

// Split tile k (blockIdx.x) merged by kReduceRowSplit blocks (blockIdx.y), rows strided.
// Every thread validates the entry identically (uniform control flow); blocks past the
// tile's rows leave early (block y = 0 always validates, and reports). kReduceRowsAtOnce rows
// at a time per block.
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
  if (blockIdx.y > 0 && static_cast<int64_t>(blockIdx.y) * kReduceRowsAtOnce >= (qe - qs) * hg) {
    return;
  }
  const int64_t total = static_cast<int64_t>(p.qo_indptr[p.num_requests]) * r;
  if (qs < 0 || qe <= qs || qe > total || total > static_cast<int64_t>(p.num_q_tokens) * r) {
    if (reporter) Report(p.status, kMlaBadReduceTile, k, 2 * k, qs);
    return;
  }
  int lo = 0, hi = p.num_requests - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (static_cast<int64_t>(p.qo_indptr[mid]) * r <= qs) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int b = lo;
  const int64_t qo0 = p.qo_indptr[b], qlen = p.qo_indptr[b + 1] - qo0;
  const int64_t g = qlen > 0 ? (qs - qo0 * r) / qlen : -1;
  const int64_t fqo = qo0 * r + g * qlen;  // folded qo_indptr[v]
  if (qlen <= 0 || g < 0 || g >= r || qe > fqo + qlen) {
    if (reporter) Report(p.status, kMlaBadReduceTile, k, 2 * k + 1, qe);
    return;
  }
  const int tokens = static_cast<int>(qe - qs);
  constexpr int kMaxLocs = 1024;  // pieces of one split tile (<= num_cu in every plan)
  __shared__ int32_t locs[kMaxLocs];
  const int n = static_cast<int>(p1 - p0);
  bool bad = n > kMaxLocs;
  for (int j = 0; j < n && !bad; ++j) {
    const int32_t loc = p.reduce_partial_map[p0 + j];
    bad = loc < 0 || static_cast<int64_t>(loc) + tokens > p.partial_rows_capacity;
  }
  if (bad) {
    if (reporter) Report(p.status, kMlaBadReducePartial, k, static_cast<int>(p0), n);
    return;
  }
  for (int j = threadIdx.x; j < n; j += blockDim.x) locs[j] = p.reduce_partial_map[p0 + j];
  __syncthreads();
  // Row groups of the block: group i merges rows y * kReduceRowsAtOnce + i, strided.
  constexpr int kLanes = kReduceThreads / kReduceRowsAtOnce;
  const int group = threadIdx.x / kLanes, lane = threadIdx.x - group * kLanes;
  for (int row = blockIdx.y * kReduceRowsAtOnce + group; row < tokens * hg;
       row += gridDim.y * kReduceRowsAtOnce) {
    const int tok = row / hg, hh = row - tok * hg;
    const int64_t out_row = (qo0 + (qs - fqo) + tok) * p.num_heads + g * hg + hh;
    if (n <= 3) {
      MergeRow<3, kLanes>(p, locs, n, tok, hh, hg, out_row, lane);
    } else {
      MergeRow<0, kLanes>(p, locs, n, tok, hh, hg, out_row, lane);
    }
  }
}

__global__ void __launch_bounds__(kReduceThreads) MlaReduceKernel(const MlaReduceParams p) {
  ReduceBlock(p);
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_MLA_REDUCE_DEVICE_H_
