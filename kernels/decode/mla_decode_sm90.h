// Hopper (sm_90a) path of the persistent MLA decode: f16 tiles in shared memory, warpgroup
// MMAs (wgmma), a producer warpgroup and two consumer warpgroups, no block-wide barrier inside
// a work item. Contract: mla_decode.h; execution model: sim/executor.h; layout and producer:
// mla_decode_sm90_producer.h; primitives: sm90_primitives.h; measurements: notes.md.
//
// One block of three warpgroups per SM runs 64-row tiles of bf16 or fp8 e4m3fn inputs (the
// registry's sm90 tiles; rows past the tile's are zero and never stored). The producer
// (warpgroup 2, mla_decode_sm90_producer.h) widens every tile to f16. Warpgroups 0 and 1
// (consumers) share each block: block n belongs to warpgroup n % 2 (so warpgroup w always
// computes on slot w), whose "own step" is S = Q K^T (9 chunks x 4 wgmma m64n64k16), the mask
// and the online softmax in registers, P as f16 both into the slot's rope chunk (dead once S
// is done) for the other warpgroup and in registers for its own P V; the row statistics go to
// shared memory. Each consumer keeps half of O (columns 256 w .. 256 w + 255) and adds every
// block's P V of its half: its own blocks with P from registers, the other's ("remote step")
// with P from the slot. V is the first 512 dims of the kv rows, read MN-major by the same
// wgmma.
// Why f16: f16 P carries 11 bits, so one P V pass meets the elementwise gate (bf16 P needed a
// hi + lo pair, +47% tensor work); every e4m3 value and every bf16 of magnitude in
// [2^-14, 65504] is an f16, so the products stay exact; smaller bf16 magnitudes round to the
// f16 quantum 2^-24, and a bf16 Q or kv value of magnitude >= 65520 (or an infinity) is
// reported (kMlaF16Range) because f16 cannot hold it.
//
// This kernel's handoffs beyond the producer's (mla_decode_sm90_producer.h):
//   stats        owner of block n -> the other consumer: P(n) and the row max / rescale
//                factor after block n published;
//   q_empty      arrived by both consumers once their last S of the item retired;
//   row_l_full   both consumers' row sums of the item (the epilogue).
// S walks a slot's chunks in the producer's order (ChunkAt).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_probe.h"
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/decode/sm90_softmax.h"

namespace mlaps {
namespace mla {

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
// =============================================================================================
// Device code (NVIDIA device pass, and the CPU emulation of tests/kernels/emu).
// =============================================================================================

// ---- Tile math -------------------------------------------------------------------------------

// S += Q K^T over chunk c (4 k16 steps of 32 bytes inside the swizzled 128-byte rows; 8-row
// groups 1024 bytes apart).
__device__ __forceinline__ void IssueScoresChunk(uint32_t q, uint32_t kv, int c, float (&s)[32]) {
  const uint64_t a0 = MatrixDesc(q + c * SmemSm90::kChunk, 16, 1024, kSwizzle128B);
  const uint64_t b0 = MatrixDesc(kv + c * SmemSm90::kChunk, 16, 1024, kSwizzle128B);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    MLAPS_SM90_S_MMA(WgmmaM64N64K16<false>(s, a0 + ((kk * 32) >> 4), b0 + ((kk * 32) >> 4), 1));
  }
}

// O[:, 256 half ..] += P V[:, 256 half ..] for the block in the slot at `kv`: V read MN-major
// (4 column chunks kChunk apart, 8-token groups 1024 apart; a k16 step is 16 tokens), P from
// the slot's rope chunk (K-major, swizzled like a Q chunk). (P from registers for the own
// block would save 8 KB of shared-memory reads a block but costs 16 registers a thread,
// which the consumers do not have.)
__device__ __forceinline__ void IssuePvSharedP(uint32_t kv, int half, float (&o)[128]) {
  const uint64_t v0 =
      MatrixDesc(kv + 4 * half * SmemSm90::kChunk, SmemSm90::kChunk, 1024, kSwizzle128B);
  const uint64_t p0 = MatrixDesc(kv + 8 * SmemSm90::kChunk, 16, 1024, kSwizzle128B);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    MLAPS_SM90_PV_MMA(
        WgmmaM64N256K16F16TransB(o, p0 + ((kk * 32) >> 4), v0 + ((kk * 16 * 128) >> 4), 1));
  }
}

// ---- The consumers ---------------------------------------------------------------------------

__device__ __forceinline__ void IssueScores(const Sm90Bars& bars, uint32_t base, int w, uint32_t n,
                                            float (&s)[32]) {
  const uint32_t kv = base + SmemSm90::kKv + w * SmemSm90::kTile;
#pragma unroll
  for (int e = 0; e < 32; ++e) s[e] = 0.0f;
  PinAccumulators(s);
  WgmmaFence();
#pragma unroll
  for (int pos = 0; pos < SmemSm90::kChunks; ++pos) {
    const int c = ChunkAt(w, pos);
    MLAPS_SM90_MARK(3, n * 16 + pos);
    MLAPS_SM90_TIMED(0, MbarWait(bars.Full(w, c), (n >> 1) & 1));
    if (pos == 0) {
      // The first k step starts the accumulation (scale-d 0): the zeroed s is not read.
      const uint64_t a0 =
          MatrixDesc(base + SmemSm90::kQ + c * SmemSm90::kChunk, 16, 1024, kSwizzle128B);
      const uint64_t b0 = MatrixDesc(kv + c * SmemSm90::kChunk, 16, 1024, kSwizzle128B);
      MLAPS_SM90_S_MMA(WgmmaM64N64K16<false>(s, a0, b0, 0));
#pragma unroll
      for (int kk = 1; kk < 4; ++kk) {
        MLAPS_SM90_S_MMA(WgmmaM64N64K16<false>(s, a0 + ((kk * 32) >> 4), b0 + ((kk * 32) >> 4), 1));
      }
    } else {
      IssueScoresChunk(base + SmemSm90::kQ, kv, c, s);
    }
  }
  WgmmaCommit();
}

// What a consumer warpgroup carries through an item (registers).
struct ConsumerState {
  float o[128];     // its half of O: rows r0, r0 + 8 (ScaleRows' layout), fp32, unnormalized
  float s[32];      // S, then P, of its current block
  float m[2];       // running max of rows r0, r0 + 8 (base 2) after the latest block
  float l[2];       // this thread's part of the row sums of its own blocks, relative to m
  int32_t vend[2];  // kv tokens rows r0, r0 + 8 see, from it.begin
};

// Consumer w's steps of an item's blocks (the file comment). An own step starts by retiring
// its S; a remote step retires its own P V and ends with the next own block's S in flight;
// the two alternate statically. So no register a wgmma in flight writes is touched on any
// control-flow path and ptxas keeps the wgmmas pipelined (no C7514 / C7515).
struct ConsumerSteps {
  Sm90Bars bars;
  uint32_t base, seq;  // shared address of the (aligned) layout; blocks before the item
  int w;               // the consumer warpgroup (warp-uniform)
  int nblk, r0, quad;
  float scale_log2;

  // Own block i (sequence number n = seq + i, slot w): softmax of S(i), P published, our
  // P V(i).
  __device__ __forceinline__ void Own(ConsumerState& st, int i) const {
    using L = SmemSm90;
    MLAPS_SM90_MARK(1, seq + i);
    MLAPS_SM90_TIMED(1, WgmmaWait<0>());  // S(i)
    PinAccumulators(st.s);
    PinAccumulators(st.o);
    if (i + 2 >= nblk) MbarArrive(bars.QEmpty());  // the item's last S of this warpgroup
    MLAPS_SM90_TIC(t_softmax);
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = st.vend[h] - i * L::kTokens;
      lim[h] = d < 0 ? 0 : d > L::kTokens ? L::kTokens : d;
    }
    float mx[2], m_use[2], alpha[2];
    MaskRowMax(st.s, lim, quad, scale_log2, mx);
    StepRunningMax(mx, st.m, st.l, m_use, alpha);
    // P (fp32 -> f16) into the slot's rope chunk (dead once S is done), K-major and swizzled
    // like a Q chunk: token 8 j + 2 quad of row r is unit j ^ (r % 8), byte 4 quad.
    const uint32_t p_tile = base + L::kKv + w * L::kTile + 8 * L::kChunk;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float p0 = BlockP(st.s[4 * j + 2 * h], scale_log2, m_use[h]);
        const float p1 = BlockP(st.s[4 * j + 2 * h + 1], scale_log2, m_use[h]);
        st.l[h] += p0 + p1;
        const int row = r0 + 8 * h;
        StoreShared32(p_tile + row * 128 + ((j ^ (row & 7)) << 4) + 4 * quad, PackF16x2(p0, p1));
      }
    }
    if (quad == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        StoreSharedF32(base + L::kRowM + 4 * (r0 + 8 * h), st.m[h]);
        StoreSharedF32(base + L::kRowAlpha + 4 * (r0 + 8 * h), alpha[h]);
      }
    }
    MLAPS_SM90_TOC(13, t_softmax);
    MLAPS_SM90_TIMED(14, FenceProxyAsync());  // P is read by wgmma (ours and the other's)
    MbarArrive(bars.Stats());
    MLAPS_SM90_TIMED(2, NamedBarrierSync(2 + w, kSm90WgThreads));  // all of P written first
    ScaleRowsIfMoved(st.o, alpha[0], alpha[1]);  // no P V in flight: Remote waited for its own
    PinAccumulators(st.o);
    WgmmaFence();
    IssuePvSharedP(base + L::kKv + w * L::kTile, w, st.o);
    WgmmaCommit();
    MLAPS_SM90_TIMED(3, WgmmaWait<0>());
    PinAccumulators(st.o);
    MbarArrive(bars.Empty(w, w));
  }

  // The other's block i: its statistics and P (in its slot), our P V(i), which retires here
  // (a wgmma in flight across the loop's back edge makes ptxas serialize every wgmma, C7511 /
  // C7515; meanwhile the other consumer's work keeps the tensor cores busy).
  __device__ __forceinline__ void Remote(ConsumerState& st, int i) const {
    using L = SmemSm90;
    const uint32_t n = seq + i;
    MLAPS_SM90_MARK(2, n);
    MLAPS_SM90_TIMED(4, MbarWait(bars.Stats(), n & 1));
    WgmmaWait<0>();  // nothing is in flight here (for ptxas's view of the paths)
    PinAccumulators(st.s);
    PinAccumulators(st.o);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.m[h] = LoadSharedF32(base + L::kRowM + 4 * (r0 + 8 * h));
      alpha[h] = LoadSharedF32(base + L::kRowAlpha + 4 * (r0 + 8 * h));
      st.l[h] *= alpha[h];
    }
    // Our half of V landed (the owner waited for it; waiting again costs nothing and keeps
    // the order explicit).
#pragma unroll
    for (int c = 4 * w; c < 4 * w + 4; ++c) MbarWait(bars.Full(n & 1, c), (n >> 1) & 1);
    ScaleRowsIfMoved(st.o, alpha[0], alpha[1]);
    PinAccumulators(st.o);
    WgmmaFence();
    IssuePvSharedP(base + L::kKv + (n & 1) * L::kTile, w, st.o);
    WgmmaCommit();
    MLAPS_SM90_TIMED(5, WgmmaWait<0>());
    PinAccumulators(st.o);
    MbarArrive(bars.Empty(n & 1, w));
  }
};

// Consumer warpgroup w's part of one item (see the file comment). `seq`: kv blocks this
// block has run before the item; `item`: items before it. Returns the item's kv blocks.
template <bool kFp8>
__device__ int RunConsumerSm90(const MlaDecodeParams& p, const Item& it, uint8_t* smem,
                               uint32_t seq, uint32_t item, int w) {
  using L = SmemSm90;
  const int tid = threadIdx.x, wtid = tid & (kSm90WgThreads - 1);
  const int quad = tid & 3;
  const int r0 = ((wtid >> 5) << 4) + ((tid & 31) >> 2);  // rows r0 and r0 + 8
  const uint32_t base = SmemAddr(smem);
  const int nblk = BlocksOf(it);
  const ConsumerSteps steps{Sm90Bars{base + L::kBars},
                            base,
                            seq,
                            w,
                            nblk,
                            r0,
                            quad,
                            p.sm_scale * p.q_scale * p.kv_scale * kLog2e};
  ConsumerState st;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t vend = VisibleEnd(p, it, it.first_token + (r0 + 8 * h) / it.hpg) - it.begin;
    st.vend[h] = static_cast<int32_t>(vend < 0 ? 0 : vend);  // < 2^31: a item's kv fits int32
    st.m[h] = NegInf();
    st.l[h] = 0.0f;
  }
#pragma unroll
  for (int e = 0; e < 128; ++e) st.o[e] = 0.0f;

  // The first own block is 0 or 1; S of it, then the blocks in (own, remote) pairs.
  const int first_own = static_cast<int>((seq & 1) != w);
  MLAPS_SM90_MARK(10, item);
  MLAPS_SM90_TIMED(6, MbarWait(steps.bars.QFull(), item & 1));
  MLAPS_SM90_MARK(11, item);
  // Blocks as (remote, own) pairs. The S of an own block is issued right after our P V of
  // the block before it retired, so that slot is freed first and both slots refill at once;
  // the S and its own step share one branch (ptxas checks every path, feasible or not).
  if (first_own >= nblk) MbarArrive(steps.bars.QEmpty());  // no S of ours reads this Q tile
  int k = first_own == 0 ? 1 : 0;
  if (first_own == 0 && nblk > 0) {
    IssueScores(steps.bars, base, w, seq, st.s);
    steps.Own(st, 0);
  }
  for (; k < nblk; k += 2) {
    steps.Remote(st, k);
    if (k + 1 < nblk) {
      IssueScores(steps.bars, base, w, seq + k + 1, st.s);
      steps.Own(st, k + 1);
    }
  }
  WgmmaWait<0>();
  PinAccumulators(st.o);

  // Epilogue: l of both consumers (each relative to the final running max), then each stores
  // its 256 columns (bf16 or, with o_fp32, fp32 final O; fp32 partial O); consumer 0 the LSE.
  MLAPS_SM90_MARK(4, item);
  float* row_l = reinterpret_cast<float*>(smem + L::kRowL) + (item & 1) * 128;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float lq = QuadSum(st.l[h]);
    if (quad == 0) row_l[w * 64 + r0 + 8 * h] = lq;
  }
  // Both consumers' sums, by an mbarrier (use k of buffer item % 2 completes phase k): it
  // orders the other's reads of item - 2 before these writes too (each consumer arrives for
  // item - 1 after reading item - 2), and compute-sanitizer racecheck follows it, which it
  // does not for a named barrier reached from two template instances.
  MbarArrive(steps.bars.RowLFull(item));
  MLAPS_SM90_TIMED(7, MbarWait(steps.bars.RowLFull(item), (item >> 1) & 1));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + 8 * h;
    if (row >= it.rows) continue;
    const float lt = row_l[row] + row_l[64 + row];
    const float inv = lt > 0.0f ? p.kv_scale / lt : 0.0f;
    const int col0 = 256 * w + 2 * quad;
    if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
      float* dst = p.o_fp32 + FinalRow(p, it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<float2*>(dst + 8 * jj) =
            make_float2(st.o[4 * jj + 2 * h] * inv, st.o[4 * jj + 2 * h + 1] * inv);
      }
    } else if (it.partial < 0) {
      uint16_t* dst = p.o + FinalRow(p, it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<uint32_t*>(dst + 8 * jj) =
            PackBf16x2(st.o[4 * jj + 2 * h] * inv, st.o[4 * jj + 2 * h + 1] * inv);
      }
    } else {
      float* dst = p.partial_o + PartialRow(it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<float2*>(dst + 8 * jj) =
            make_float2(st.o[4 * jj + 2 * h] * inv, st.o[4 * jj + 2 * h + 1] * inv);
      }
    }
    if (w == 0 && quad == 0) WriteLse(p, it, row, RowLse(st.m[h], lt));
  }
  return nblk;
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

// The sm90 decode kernel of 64-row tiles: the item walk of every path around the producer and
// consumer routines (bf16 or fp8 e4m3fn, widened to f16). kTma: whole-page blocks land by TMA
// from `kv_map` (the kv cache's TmaMap, mla_decode.h's launch encodes it; with L2 evict-first),
// the others by cp.async; without it every block by cp.async and `kv_map` is not read (the
// probe binary). Its body exists in the NVIDIA device pass and the CPU emulation only.
template <bool kFp8, bool kTma>
__global__ void __launch_bounds__(kSm90Threads, 1)
    MLAPS_SM90_KERNEL(const MlaDecodeParams p, const MLAPS_GRID_CONSTANT TmaMap kv_map) {
#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
  // Both consumers run one instance of their code (half the hot code for the instruction
  // caches, as in the f16pv kernel).
  RunSm90Block<kFp8, /*kWiden=*/true, SmemSm90::kRows, kTma, /*kOneConsumerCode=*/true,
               /*kEvictFirst=*/kTma>(
      p, &kv_map, [&](int w, const Item& it, uint8_t* smem, uint32_t seq, uint32_t item) {
        return RunConsumerSm90<kFp8>(p, it, smem, seq, item, w);
      });
#endif
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_