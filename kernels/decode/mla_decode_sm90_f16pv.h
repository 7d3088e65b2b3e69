// Hopper (sm_90a) path of the persistent MLA decode for 64-row tiles with one f16 P V pass:
// S = Q K^T on the kv rows as they landed (bf16; fp8: raw e4m3 on QGMMA), and P V transposed,
// O^T += V^T P^T, with V^T taken into registers and widened there to f16 (bf16: ldmatrix .trans;
// fp8: the raw rows, WidenVtStep). Contract: mla_decode.h; the shared-memory layout and the
// producer warpgroup (TMA loads of whole-page blocks, cp.async otherwise) are shared with the
// f16-tile and narrow kernels (mla_decode_sm90_producer.h); the tile arithmetic (S and P V of
// one kv block, the fragment layouts) is in mla_decode_sm90_f16pv_tile.h, the consumers' schedule
// here; measurements: notes.md.
//
// Why: one bf16 rounding of P fails the elementwise gate, so bf16 P V needs a hi + lo pair
// (+47% tensor work a block: the bf16 kernel, mla_decode_sm90_bf16.h); f16 P (11 bits) passes
// in one pass but needs f16 V. Widening V in shared memory costs a producer pass over every
// block (the f16-tile kernel is bound by it); here each consumer widens only its own 256 dims
// of V, in registers, on the way into the wgmma (A from registers), and K stays as it landed.
// bf16 V is scaled by 2^-8 on the way (exact: a power of two) and O by 2^8 at the end, so every
// finite bf16 V of magnitude in [2^-6, 2^24) is an exact f16 (smaller ones round to the scaled
// f16 quantum 2^-16, far below the gates; Q and K keep the full bf16 range); a finite V value
// of magnitude >= 2^24 is reported as kMlaF16Range instead of writing a wrong O (an infinity
// or NaN in V makes O non-finite as on every other kernel). Every e4m3 is an f16: fp8 needs no
// scale and no check.
//
// fp8 rows stay e4m3 (64-byte swizzled, RawUnit): half a bf16 slot's bytes, so the ring has four
// slots (KvRing<true>: the producer runs three blocks ahead), and S runs on QGMMA (m64n64k32),
// a chunk (64 dims) an accumulator added in fp32 (the H200 sums an e4m3 wgmma's products with
// fewer than fp32's bits: notes.md, session 8). P^T lies in the Q region's free halves
// (RawPTile), the B operand of the widened V^T, whose M rows are the dims in VtDim
// order (the epilogue stores them back in place).
//
// Roles (three warpgroups; kv block n of the block's walk belongs to consumer n % 2 and sits in
// slot n % 2, fp8 n % 4):
//   own block    (its consumer) S = Q K^T (bf16: 9 chunks x 4 wgmma m64n64k16, one commit group;
//                fp8: 9 chunks x 2 QGMMA, each chunk retired and added), the mask and the online
//                softmax in registers (the reference max after the block before comes from its
//                owner; it moves only past a slack, StepLazyRunningMax, so most blocks rescale
//                nothing), P as f16 (bf16: into the slot's rope chunk, dead once S is done), the
//                reference max (kRowM), the block's rescale factors (kPvAlpha[n % 4]) and
//                whether any moved (kPvMoved[n % 4]) to shared memory (four buffers: a
//                warp's writes for block n + 4 follow the named barrier of block n + 2, which
//                every warp of the owner passes after its reads of block n);
//   every block  (both consumers) O^T[the consumer's 256 dims] rescaled by the block's factors
//                (when one moved) and O^T += V^T P^T: four dims tiles of 64 (chunks 4 w .. 4 w
//                + 3 of the slot) x 4 k steps of 16 tokens, wgmma m64n64k16 with V^T from
//                registers and P^T (K-major) from shared memory; the slot's half is freed when
//                it retired. The S of the consumer's next block (it follows the other's) is done
//                before it waits for the other's statistics, so that S runs during the other's
//                softmax;
//   producer     (warpgroup 2) Q and the kv blocks (mla_decode_sm90_producer.h).
// (A fourth warpgroup that runs every S and softmax while two others run P V compiles to
// serialized wgmmas: 512 threads leave 128 registers a thread at entry, and ptxas reports
// C7512, "insufficient register resources", whatever the setmaxnreg split; notes.md.)
//
// Handoffs beyond the producer's:
//   score_stats[n % 2]  owner of block n -> the other consumer: P(n), the row max after it and
//                       its rescale factors published;
//   q_empty             both consumers, once their last S of the item retired;
//   row_l_full[i % 2]   both consumers' row sums of item i (the epilogue);
//   empty_chunk[s][c]   bf16: consumer c / 4 has V chunk c of slot s in registers (the producer
//                       refills chunks 0-7 on these, chunk 8, P^T, once both halves are free).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_f16pv_tile.h"
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/mla_decode_sm90_raw.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/decode/sm90_softmax.h"

namespace mlaps {
namespace mla {
namespace sm90_f16pv {

// Warpgroups of a block: 0 and 1 consumers, 2 the producer, run by the shared block routine
// (RunSm90Block, mla_decode_sm90_producer.h) with its registers and mbarrier counts.
constexpr int kF16PvThreads = kSm90Threads;

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

// ---- The consumers ---------------------------------------------------------------------------

__device__ __forceinline__ bool IsFinite(float x) {
  return (FloatToBits(x) & 0x7f800000u) != 0x7f800000u;
}

// Where one item's kv rows are, for ReportF16Range (plain values: the slow path is a call).
struct ItemRows {
  const uint16_t* kv_cache;
  const int32_t* kv_indices;
  MlaStatus* status;
  int64_t kv_base, begin, e_lim;
  int32_t num_pages, page_size, log2_page;
  int32_t cu;  // the plan CU (PlanCu), for the status word
};

// The item's V (dims 0-511 of its kv rows) read again by one warp (lane `lane`): the largest
// finite bf16 magnitude that the scaled f16 cannot hold (>= 2^24; an infinity or NaN does not
// count: it is an input O carries), reported as kMlaF16Range with its bits. The slow path of a
// non-finite O.
__device__ __noinline__ void ReportF16Range(const ItemRows r, int lane) {
  uint32_t worst = 0;
  for (int64_t j = r.begin + lane; j < r.e_lim; j += 32) {
    const int32_t page = r.kv_indices[r.kv_base + (j >> r.log2_page)];
    if (page < 0 || page >= r.num_pages) continue;  // read as zeros (reported by the producer)
    const uint16_t* v =
        r.kv_cache + (static_cast<int64_t>(page) * r.page_size + (j & (r.page_size - 1))) * kDimQk;
    for (int d = 0; d < kDimV; ++d) {
      const uint32_t mag = v[d] & 0x7fffu;
      if (mag < 0x7f80u && mag > worst) worst = mag;
    }
  }
#pragma unroll
  for (int k = 16; k >= 1; k >>= 1) {
    const uint32_t other = __shfl_xor(worst, k);
    worst = other > worst ? other : worst;
  }
  if (lane == 0 && worst >= kBf16VBeyondF16) {
    Report(r.status, kMlaF16Range, r.cu, -1, worst);
  }
}

// What a math warpgroup knows of its place (warp-uniform values and the thread's coordinates).
struct F16PvPlace {
  Sm90Bars bars;
  uint32_t base;
  int wtid, warp, lane, quad, r0;
};

__device__ __forceinline__ F16PvPlace PlaceOf(uint8_t* smem) {
  F16PvPlace at;
  at.base = SmemAddr(smem);
  at.bars = Sm90Bars{at.base + L::kBars};
  at.wtid = threadIdx.x & (kSm90WgThreads - 1);
  at.warp = at.wtid >> 5;
  at.lane = at.wtid & 31;
  at.quad = at.lane & 3;
  at.r0 = 16 * at.warp + (at.lane >> 2);  // S rows r0 and r0 + 8
  return at;
}

// The owner's softmax of block i (sequence number n, S retired in s): the mask, the online
// softmax (running max m, row sums l of rows r0, r0 + 8), P as f16 into `p_tile` (bf16: the
// slot's rope chunk, dead once S retired; kRaw: RawPTile; tokens in order), the
// row max into kRowM and the block's rescale factors into kPvAlpha[n % 4], then published
// (score_stats[n % 2]).
template <bool kRaw, class BeforePublish>
__device__ __forceinline__ void Softmax(const F16PvPlace& at, float (&s)[32], float (&m)[2],
                                        float (&l)[2], const int32_t (&vend)[2], int i, uint32_t n,
                                        float scale_log2, uint32_t p_tile,
                                        BeforePublish&& before_publish) {
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int d = vend[h] - i * L::kTokens;
    lim[h] = d < 0 ? 0 : d > L::kTokens ? L::kTokens : d;
  }
  float mx[2], m_use[2], alpha[2];
  MaskRowMax(s, lim, at.quad, scale_log2, mx);
  StepLazyRunningMax(mx, m, l, m_use, alpha);
  // Whether any of the warp's rows moved its reference (RescaleO reads the four warps' words).
  const bool moved = __ballot64(alpha[0] != 1.0f || alpha[1] != 1.0f) != 0;
  if (at.lane == 0) StoreShared32(at.base + L::kPvMoved + 4 * ((n & 3) * 4 + at.warp), moved);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float p0 = BlockP(s[4 * j + 2 * h], scale_log2, m_use[h]);
      const float p1 = BlockP(s[4 * j + 2 * h + 1], scale_log2, m_use[h]);
      l[h] += p0 + p1;
      const int row = at.r0 + 8 * h, t = 8 * j + 2 * at.quad;
      if (kRaw) {
        StoreShared32(RawPAt(p_tile, row, t), PackF16x2(p0, p1));
      } else {
        StoreShared32(PAt(p_tile, row, t), PackF16x2(p0, p1));
      }
    }
  }
  if (at.quad == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      StoreSharedF32(at.base + L::kRowM + 4 * (at.r0 + 8 * h), m[h]);
      StoreSharedF32(at.base + L::kPvAlpha + 4 * ((n & 3) * L::kRows + at.r0 + 8 * h), alpha[h]);
    }
  }
  before_publish();
  FenceProxyAsync();  // P is read by wgmma (ours and the other's)
  MbarArrive(at.bars.ScoreStats(n));
}

// O^T *= block n's rescale factors of the thread's 16 q rows, unless no row of the block moved
// its reference max (the owner's four warp words; the usual case past an item's first blocks,
// StepLazyRunningMax).
__device__ __forceinline__ void RescaleO(const F16PvPlace& at, float (&o)[4][32], uint32_t n) {
  const uint4 moved = LoadShared128(at.base + L::kPvMoved + 16 * (n & 3));
  if ((moved.x | moved.y | moved.z | moved.w) == 0) return;
  const uint32_t alpha = at.base + L::kPvAlpha + 4 * (n & 3) * L::kRows;
  float f[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    f[k] = LoadSharedF32(alpha + 4 * QRowOf(4 * (k >> 1) + (k & 1), at.quad));
  }
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int i = 0; i < 32; ++i) o[m][i] *= f[2 * (i >> 2) + (i & 1)];
  }
}

// The non-owner's statistics of block n (in `slot`; `parity`: its full barriers' phase): the
// running max after it, our row sums rescaled by its factors, and our half of its V (the
// owner's S read every chunk, so it has landed: tested at once, waited for only if one had not;
// our own wait orders our reads of it).
__device__ __forceinline__ void TakeStats(const F16PvPlace& at, uint32_t n, int slot,
                                          uint32_t parity, int w, float (&m)[2], float (&l)[2]) {
  MLAPS_SM90_TRACE_AT(kTraceStatsWait, n);
  MbarWait(at.bars.ScoreStats(n), (n >> 1) & 1);
  MLAPS_SM90_TRACE_AT(kTraceStatsIn, n);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = at.r0 + 8 * h;
    m[h] = LoadSharedF32(at.base + L::kRowM + 4 * row);
    l[h] *= LoadSharedF32(at.base + L::kPvAlpha + 4 * ((n & 3) * L::kRows + row));
  }
  bool landed = true;
#pragma unroll
  for (int c = 0; c < 4; ++c) landed = MbarTest(at.bars.Full(slot, 4 * w + c), parity) && landed;
  if (!WarpUniform(landed)) {
#pragma unroll
    for (int c = 0; c < 4; ++c) MbarWait(at.bars.Full(slot, 4 * w + c), parity);
  }
}

// A consumer's registers at an item's start: O^T and the row sums zero, the running max -inf,
// and the kv tokens (from it.begin) that the thread's rows r0, r0 + 8 see.
__device__ __forceinline__ void StartItem(const MlaDecodeParams& p, const Item& it,
                                          const F16PvPlace& at, float (&o)[4][32], float (&m)[2],
                                          float (&l)[2], int32_t (&vend)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t v = VisibleEnd(p, it, it.first_token + (at.r0 + 8 * h) / it.hpg) - it.begin;
    vend[h] = static_cast<int32_t>(v < 0 ? 0 : v);  // < 2^31: an item's kv fits int32
    m[h] = NegInf();
    l[h] = 0.0f;
  }
#pragma unroll
  for (int t = 0; t < 4; ++t) {
#pragma unroll
    for (int i = 0; i < 32; ++i) o[t][i] = 0.0f;
  }
}

// Consumer w's end of item `item` once every P V of it retired: (bf16) the V range check, then
// the row sums of both consumers, O^T's 256 dims normalized and stored, and the LSE.
template <bool kFp8>
__device__ __forceinline__ void FinishItem(const MlaDecodeParams& p, const Item& it,
                                           const F16PvPlace& at, float (&o)[4][32],
                                           const float (&m)[2], const float (&l)[2], uint32_t item,
                                           int w) {
  // bf16 V widened to f16 (scaled): a value f16 cannot hold turns every O^T element it meets
  // non-finite (P x inf, or 0 x inf = NaN, in the rows of its dim); only then is the item's V
  // read again to tell that from inf / NaN inputs (ReportF16Range).
  if (!kFp8) {
    bool finite = true;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int i = 0; i < 32; ++i) finite = finite && IsFinite(o[t][i]);
    }
    if (__ballot64(!finite) != 0) {
      const ItemRows rows{static_cast<const uint16_t*>(p.kv_cache),
                          p.kv_indices,
                          p.status,
                          it.kv_base,
                          it.begin,
                          it.e_lim,
                          static_cast<int32_t>(p.num_pages),
                          p.page_size,
                          it.log2_page,
                          PlanCu(p)};
      ReportF16Range(rows, at.lane);
    }
  }

  // Epilogue: the row sums of both consumers (each relative to the final running max) by an
  // mbarrier (use k of buffer item % 2 completes phase k; it also orders the other's reads of
  // item - 2 before these writes), then each stores its 256 dims of O (bf16 or, with o_fp32,
  // fp32 final O; fp32 partial O) and consumer 0 the LSE.
  const uint32_t row_l = at.base + L::kRowL + 4 * (item & 1) * 2 * L::kRows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float lq = QuadSum(l[h]);
    if (at.quad == 0) StoreSharedF32(row_l + 4 * (w * L::kRows + at.r0 + 8 * h), lq);
  }
  MbarArrive(at.bars.RowLFull(item));
  MbarWait(at.bars.RowLFull(item), (item >> 1) & 1);
  auto row_sum = [&](int row) {
    return LoadSharedF32(row_l + 4 * row) + LoadSharedF32(row_l + 4 * (L::kRows + row));
  };
  if (w == 0 && at.quad == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = at.r0 + 8 * h;
      if (row < it.rows) WriteLse(p, it, row, RowLse(m[h], row_sum(row)));
    }
  }
  const float o_scale = kFp8 ? p.kv_scale : p.kv_scale * kBf16OUnscale;
  float inv[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const float lt = row_sum(QRowOf(4 * (k >> 1) + (k & 1), at.quad));
    inv[k] = lt > 0.0f ? o_scale / lt : 0.0f;
  }
  if constexpr (kFp8) {
    // Element i of tile t is dim 256 w + VtDim(t, M row): the thread's 8 elements of a q row
    // (tiles 0-3 x (i >> 1) & 1) are its 8 consecutive dims d0 .. d0 + 7, stored at once.
    const int d0 = 256 * w + 64 * at.warp + 8 * (at.lane >> 2);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int i0 = 4 * (k >> 1) + (k & 1), i1 = i0 + 2;  // the row's two halves
      const int row = QRowOf(i0, at.quad);
      if (row >= it.rows) continue;
      const float scale = inv[k];
      float v[8];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        v[2 * t] = o[t][i0] * scale;
        v[2 * t + 1] = o[t][i1] * scale;
      }
      if (it.partial < 0 && p.o_fp32 == nullptr) {
        *reinterpret_cast<uint4*>(p.o + FinalRow(p, it, row) * kDimV + d0) =
            make_uint4(PackBf16x2(v[0], v[1]), PackBf16x2(v[2], v[3]), PackBf16x2(v[4], v[5]),
                       PackBf16x2(v[6], v[7]));
      } else {
        // fp32 final O (CP ranks) or a partial.
        float* dst = it.partial < 0 ? p.o_fp32 + FinalRow(p, it, row) * kDimV + d0
                                    : p.partial_o + PartialRow(it, row) * kDimV + d0;
        reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
    return;
  }
  // bf16: element i of tile t is dim d0 + 64 t + 8 ((i >> 1) & 1).
  const int d0 = 256 * w + 16 * at.warp + (at.lane >> 2);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int row = QRowOf(i, at.quad);
    if (row >= it.rows) continue;
    const float scale = inv[2 * (i >> 2) + (i & 1)];
    const int d = d0 + 8 * ((i >> 1) & 1);
    if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
      float* dst = p.o_fp32 + FinalRow(p, it, row) * kDimV + d;
#pragma unroll
      for (int t = 0; t < 4; ++t) dst[64 * t] = o[t][i] * scale;
    } else if (it.partial < 0) {
      uint16_t* dst = p.o + FinalRow(p, it, row) * kDimV + d;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        dst[64 * t] = static_cast<uint16_t>(PackBf16x2(o[t][i] * scale, 0.0f) & 0xffffu);
      }
    } else {
      float* dst = p.partial_o + PartialRow(it, row) * kDimV + d;
#pragma unroll
      for (int t = 0; t < 4; ++t) dst[64 * t] = o[t][i] * scale;
    }
  }
}

// Consumer w's part of one item (see the file comment): one pass over the kv blocks, each one
// either ours (softmax) or the other's (its statistics), then our P V of it; the S of our next
// block (it follows the other's) before we wait for the other's statistics. `seq`: kv blocks
// this block ran before the item; `item`: items before it. Returns the item's kv blocks.
template <bool kFp8>
__device__ int RunConsumer(const MlaDecodeParams& p, const Item& it, uint8_t* smem, uint32_t seq,
                           uint32_t item, int w) {
  const F16PvPlace at = PlaceOf(smem);
  const int nblk = BlocksOf(it);
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
  float o[4][32], s[32], m[2], l[2];
  // fp8: RawPvT's A registers (here: its last k step still reads them after it returns).
  uint32_t pv_a[2][4][4];
  int32_t vend[2];
  StartItem(p, it, at, o, m, l, vend);

  // Block n (sequence number) is consumer n % 2's, in slot n % 2 (bf16) or n % 4 (fp8: the
  // raw ring). Our last S of the item releases the Q tile (q_empty; at once when we have no
  // block).
  auto slot_of = [](uint32_t n) { return kFp8 ? RawRing::SlotOf(n) : static_cast<int>(n & 1); };
  auto parity_of = [](uint32_t n) { return kFp8 ? RawRing::ParityOf(n) : (n >> 1) & 1; };
  // S of block n into s, retired on return (bf16: issued as one group, then waited for).
  auto scores = [&](uint32_t n) {
    const int slot = slot_of(n);
    MLAPS_SM90_TRACE_AT(kTraceSStart, n);
    if constexpr (kFp8) {
      RawScores(at.bars, at.base, RawRows(at.base, slot), slot, parity_of(n), s);
    } else {
      IssueBf16Scores(at.bars, at.base, slot, n, s);
      MLAPS_SM90_TRACE_AT(kTraceSIssued, n);
      WgmmaWait<0>();
      PinAccumulators(s);
    }
    MLAPS_SM90_TRACE_AT(kTraceSRetired, n);
  };
  // fp8: our P V of block n - 1 retires, and frees its slot half, only when we next need O or
  // P's buffers: before our softmax of n publishes (its last k step runs on the tensor cores
  // while we compute P), or before our S of n + 1 (whose accumulators need the P V's A
  // registers), or once we have the other's statistics of n. (The wait runs even when nothing
  // is in flight, i == 0: ptxas cannot tell, and serializes every wgmma when a path reads O
  // without one, C7514.)
  constexpr bool kPvLate = kFp8;
  auto retire_pv = [&](int i) {
    if (!kPvLate) return;
    WgmmaWait<0>();
#pragma unroll
    for (int t = 0; t < 4; ++t) PinAccumulators(o[t]);
    if (i > 0) MbarArrive(at.bars.Empty(slot_of(seq + i - 1), w));
  };
  const int first_own = static_cast<int>((seq & 1) != static_cast<uint32_t>(w));
  MbarWait(at.bars.QFull(), item & 1);
  if (first_own >= nblk) MbarArrive(at.bars.QEmpty());
  if (first_own == 0 && nblk > 0) {
    scores(seq);
    if (nblk <= 2) MbarArrive(at.bars.QEmpty());
  }
#pragma unroll 1
  for (int i = 0; i < nblk; ++i) {
    const uint32_t n = seq + i;
    const int slot = slot_of(n);
    const bool own = WarpUniform(static_cast<int>(n & 1) == w);
    const bool next_s = WarpUniform(!own && i + 1 < nblk);  // our block follows the other's
    const uint32_t p_tile =
        kFp8 ? RawPTile(at.base, n) : at.base + L::kKv + slot * L::kTile + 8 * L::kChunk;
    if (own) {
      MLAPS_SM90_TRACE_AT(kTraceSoftmax, n);
      Softmax<kFp8>(at, s, m, l, vend, i, n, scale_log2, p_tile, [&] { retire_pv(i); });
      MLAPS_SM90_TRACE_AT(kTraceSoftmaxEnd, n);
      NamedBarrierSync(2 + w, kSm90WgThreads);  // all of P and the factors written
    } else {
      // The other's statistics of n, and our half of V (the owner waited for it; our own wait
      // orders our reads of it).
      auto take_stats = [&] { TakeStats(at, n, slot, parity_of(n), w, m, l); };
      if (next_s) {
        // Our S of block n + 1 runs on the tensor cores during the other's softmax of n (bf16:
        // issued before the wait and retired in the same branch, before O is rescaled: a wgmma
        // in flight while O is rewritten makes ptxas serialize every wgmma, C7515).
        if constexpr (kFp8) {
          retire_pv(i);
          scores(n + 1);
          take_stats();
        } else {
          MLAPS_SM90_TRACE_AT(kTraceSStart, n + 1);
          IssueBf16Scores(at.bars, at.base, slot_of(n + 1), n + 1, s);
          MLAPS_SM90_TRACE_AT(kTraceSIssued, n + 1);
          take_stats();
          WgmmaWait<0>();
          PinAccumulators(s);
          MLAPS_SM90_TRACE_AT(kTraceSRetired, n + 1);
        }
        if (i + 3 >= nblk) MbarArrive(at.bars.QEmpty());  // our last S of the item
      } else {
        take_stats();
        retire_pv(i);
      }
    }
    // The P V's first V bytes (fp8: its first k step's; bf16: its first tile's) are loaded
    // before the rescale reads its flags (both loads' latencies at once).
    MLAPS_SM90_TRACE_AT(kTracePv, n);
    uint2 v_first[4];
    uint32_t vt_first[4][4];
    if constexpr (kFp8) {
      LoadVtStep(RawRows(at.base, slot) + 4 * w * L::kChunk, 0, at.wtid, v_first);
    } else {
      LoadBf16VtTile(at.base + L::kKv + slot * L::kTile, w, 0, at.wtid, vt_first);
    }
    RescaleO(at, o, n);
    if constexpr (kFp8) {
      RawPvT<!kPvLate>(RawRows(at.base, slot), p_tile, w, at.wtid, o, pv_a, v_first);
    } else {
      Bf16PvT(at.bars, at.base + L::kKv + slot * L::kTile, slot, w, at.wtid, o, vt_first);
    }
    if (!kPvLate) MbarArrive(at.bars.Empty(slot, w));
    MLAPS_SM90_TRACE_AT(kTracePvEnd, n);
  }
  retire_pv(nblk);
  FinishItem<kFp8>(p, it, at, o, m, l, item, w);
  return nblk;
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

// The 64-row sm90 decode kernel with f16 P V from registers (bf16, or fp8 e4m3fn widened to f16
// by the producer); kv_map: the kv cache's TMA map (TmaMap; the launch encodes it). Its body
// exists in the NVIDIA device pass and the CPU emulation only.
template <bool kFp8>
__global__ void __launch_bounds__(kF16PvThreads, 1)
    MlaDecodeSm90F16PvKernel(const MlaDecodeParams p, const MLAPS_GRID_CONSTANT TmaMap kv_map) {
#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
  // Both consumers run one instance of their code (half the hot code for the instruction
  // caches: two instances missed them, notes.md). fp8 consumers keep a P V k step in flight
  // through the softmax (RunConsumer's retire_pv): at 224 or 232 registers ptxas serializes every
  // wgmma for it (C7512), at 240 not; the producer (TMA) runs on the 24 left, spilling.
  // Its gathered (non-TMA) blocks go without the L2 fill ahead of their copies: the ring runs
  // three blocks ahead, and the fill's loads cost the 24-register producer more (sparse fp8
  // 322 -> 308-310 us, notes.md). bf16 consumers free each V chunk once it is in registers
  // (kChunkFree, Bf16PvT). Its TMA loads carry no L2 hint: evict-first cost the kv lanes of a
  // request that drift apart their L2 reuse ((32,3) 8-10% slower) and a lone tile's stream
  // ((16,4) 4%), for 1.5-2.5% at the pairs that stay in step ((64,2), (128,1)); notes.md,
  // session 34.
  constexpr int kConsumerRegs = kFp8 ? 240 : kSm90ConsumerRegs;
  RunSm90Block<kFp8, /*kWiden=*/false, SmemSm90::kRows, /*kTma=*/true, /*kOneConsumerCode=*/true,
               /*kEvictFirst=*/false, kConsumerRegs, /*kL2Fill=*/!kFp8, /*kChunkFree=*/!kFp8>(
      p, &kv_map, [&](int w, const Item& it, uint8_t* smem, uint32_t seq, uint32_t item) {
        return RunConsumer<kFp8>(p, it, smem, seq, item, w);
      });
#endif
}

}  // namespace sm90_f16pv
}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_H_
