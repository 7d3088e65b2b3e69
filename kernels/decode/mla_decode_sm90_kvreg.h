// Hopper (sm_90a) path of the persistent MLA decode for fp8 (e4m3fn) 64-row tiles with both kv
// operands widened in registers: the kv blocks stay e4m3 in shared memory as they landed, and
// each product takes them as wgmma's register A operand, widened to f16 on the way in.
//   S^T = K Q^T    (M = 64 tokens, N = 64 q rows, K = 576 dims): K from registers, Q^T the f16
//                  Q tile in shared memory (K-major);
//   O^T += V^T P^T (M = the consumer's 256 dims in 4 tiles, N = q rows, K = 64 tokens): V^T from
//                  registers, P^T f16 in shared memory (K-major).
// Contract: mla_decode.h; measurements: notes.md.
//
// Why: the f16-tile kernel (mla_decode_sm90.h) widens every block in shared memory (36 KB read,
// 72 KB written a block) and reads Q and K there for S (144 KB a block); its blocks cost
// shared-memory bandwidth the wgmma reads compete for. Here a block moves 36 KB in, K is read
// once (36 KB) and Q once (72 KB) for S, V once (32 KB) and P twice (16 KB) for P V, and a kv
// slot is 36 KB, so three fit beside the Q tile. e4m3 -> f16 is exact, and so are the products
// and P's rounding as in the f16-tile kernel: the same arithmetic, another schedule.
//
// Register operands fix the order of the reduction dims only up to a permutation that both
// operands share, which the kernel picks for cheap, conflict-free loads:
//   S: k step s of chunk c, A column (2 q + e + 8 h) of a thread of quad q is dim
//      64 c + 16 q + 4 s + 2 h + e: one 16-byte load of a token row gives a thread its four
//      k steps of the chunk. The producer stores Q's f16 chunks in that order (QChunkPosition).
//   S^T's M rows are tokens in the order that makes a thread's two rows (r, r + 8) one pair of
//   P^T columns: row 16 w + g (+ 8) of warp w is token 16 w + TokenOfRow(g) (+ 2).
//   P V: k slot (2 q + e + 8 h') of k step kk is token 16 kk + 2 e + (q & 1) + 4 (q >> 1) + 8 h'
//   (TokenOfSlot), which puts the pairs above next to each other; the M row 16 w + g + 8 h of
//   dims tile j of consumer c is dim 256 c + 64 w + 8 g + 2 j + h, so that one 8-byte load of
//   a token row gives a thread all four tiles' values of its two rows, and the epilogue stores
//   8 consecutive dims of a q row at once.
//
// Roles (three warpgroups; kv block n of the block's walk sits in slot n % 3 and belongs to
// consumer n % 2):
//   own block    (its consumer) S^T, the mask and the online softmax: column maxima over the
//                four warps through shared memory (kColMax), the running max (kRowM[n % 2]),
//                the block's rescale factors (kPvAlpha[n % 2]) and P^T (kP[n % 2]) published
//                (score_stats[n % 2]);
//   every block  (both consumers) O^T and the row sums rescaled by the block's factors, then
//                O^T += V^T P^T for the consumer's 256 dims; the slot is freed when both
//                retired their P V (empty[slot]). The S of the consumer's next block is issued
//                before it waits for the other's statistics, so it runs during their softmax;
//   producer     (warpgroup 2) copy threads: the raw Q rows (cp.async) and each kv block (TMA
//                when it is one page's 64 tokens, cp.async otherwise); converter threads: Q to
//                f16 in the permuted order, once per item.
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_KVREG_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_KVREG_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/sm90_primitives.h"

namespace mlaps {
namespace mla {
namespace sm90_kvreg {

// ---- Shared memory of one block (host-visible: the launch sizes it) ------------------------

struct SmemKvReg {
  static constexpr int kRows = 64;                    // q rows of a tile
  static constexpr int kTokens = 64;                  // kv tokens of a block
  static constexpr int kChunks = 9;                   // 64-dim column chunks of a 576-dim row
  static constexpr int kSlots = 3;                    // kv blocks in flight
  static constexpr int kQChunk = 64 * 128;            // f16 Q chunk, 128-byte swizzled
  static constexpr int kKvChunk = 64 * 64;            // e4m3 kv chunk: 64 token rows of 64 bytes
  static constexpr int kSlot = kChunks * kKvChunk;    // one kv block, 36 KB
  static constexpr int kQ = 0;                        // raw e4m3 Q rows in each chunk's 2nd half
  static constexpr int kKv = kQ + kChunks * kQChunk;  // [kSlots]
  static constexpr int kPTile = 64 * 128;             // P^T: 64 q rows x 64 tokens f16, swizzled
  static constexpr int kP = kKv + kSlots * kSlot;     // [block % 2]
  static constexpr int kColMax = kP + 2 * kPTile;     // [consumer][64 q rows][4 warps] f32
  static constexpr int kRowM = kColMax + 2 * 64 * 4 * 4;     // [block % 2][64] running max
  static constexpr int kPvAlpha = kRowM + 2 * 64 * 4;        // [block % 2][64] rescale factors
  static constexpr int kRowL = kPvAlpha + 2 * 64 * 4;        // [item % 2][64 q rows][8] row sums
  static constexpr int kVend = kRowL + 2 * 64 * 8 * 4;       // [consumer][64] visible ends
  static constexpr int kBars = kVend + 2 * 64 * 4;           // mbarriers, 8 bytes each:
  static constexpr int kLanded = 0;                          //   [kSlots][9 chunks]
  static constexpr int kEmpty = kLanded + kSlots * kChunks;  //   [kSlots]
  static constexpr int kQLanded = kEmpty + kSlots;
  static constexpr int kQFull = kQLanded + 1;
  static constexpr int kQEmpty = kQFull + 1;
  static constexpr int kScoreStats = kQEmpty + 1;    //   [block % 2]
  static constexpr int kRowLFull = kScoreStats + 2;  //   [item % 2]
  static constexpr int kNumBars = kRowLFull + 2;
  static constexpr int kUsed = kBars + kNumBars * 8;
  static constexpr int kAlign = 1024;  // swizzled chunk bases on the 1024-byte grid
  static constexpr int kBytes = kUsed + kAlign;
};
static_assert(SmemKvReg::kBytes <= 227 * 1024, "the kv-register layout fits an H100/H200 block");
static_assert(SmemKvReg::kKv % 1024 == 0 && SmemKvReg::kP % 1024 == 0,
              "swizzled tiles on the 1024-byte grid");

constexpr int kKvRegThreads = kSm90Threads;  // consumers 0, 1; producer 2

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

using L = SmemKvReg;

// ---- Layouts -------------------------------------------------------------------------------

// S^T row g (+ 8) of a warp's 16 is token TokenOfRow(g) (+ 2) of the warp's 16.
__device__ __forceinline__ int TokenOfRow(int g) {
  return (g & 1) + 4 * ((g >> 1) & 1) + 8 * (g >> 2);
}

// P V's k slot 2 q + e + 8 h (of a k step's 16) is this token of the step's 16.
__device__ __forceinline__ int TokenOfSlot(int quad, int e, int h) {
  return 2 * e + (quad & 1) + 4 * (quad >> 1) + 8 * h;
}

// Where dim 16 u + 4 s + 2 h + e of a chunk (raw unit u, word s, byte 2 h + e) sits in the f16 Q
// chunk row: position 16 s + 2 u + e + 8 h (S's k step s, A column 2 u + e + 8 h).
__device__ __forceinline__ uint32_t QChunkPairAt(int row, int u, int s, int h) {
  return ChunkUnit(row, 2 * s + h) + 4 * u;
}

// Fragments of the m64n64 accumulators (thread t: warp w = t / 32, lane l, g = l / 4, quad =
// l % 4): element i sits at M index 16 w + g + 8 ((i >> 1) & 1) and N index QRowOf(i, quad).
// Column k = 2 (i >> 2) + (i & 1) of a thread's 16.
__device__ __forceinline__ int QRowOf(int i, int quad) { return 8 * (i >> 2) + 2 * quad + (i & 1); }
__device__ __forceinline__ int ColOf(int k, int quad) { return 8 * (k >> 1) + 2 * quad + (k & 1); }

struct Bars {
  uint32_t base;
  __device__ uint32_t Landed(int slot, int c) const {
    return base + 8 * (L::kLanded + slot * L::kChunks + c);
  }
  __device__ uint32_t Empty(int slot) const { return base + 8 * (L::kEmpty + slot); }
  __device__ uint32_t QLanded() const { return base + 8 * L::kQLanded; }
  __device__ uint32_t QFull() const { return base + 8 * L::kQFull; }
  __device__ uint32_t QEmpty() const { return base + 8 * L::kQEmpty; }
  __device__ uint32_t ScoreStats(uint32_t n) const { return base + 8 * (L::kScoreStats + (n & 1)); }
  __device__ uint32_t RowLFull(uint32_t item) const {
    return base + 8 * (L::kRowLFull + (item & 1));
  }
};

// Slot and phase parity of kv block n.
__device__ __forceinline__ int SlotOf(uint32_t n) { return static_cast<int>(n % L::kSlots); }
__device__ __forceinline__ uint32_t PhaseOf(uint32_t n) { return (n / L::kSlots) & 1; }

// ---- The producer ----------------------------------------------------------------------------

// Copy thread `ctid`'s part of one item: the raw Q rows (once both consumers released the
// previous item's tile) and each kv block into slot n % 3 once both consumers freed it: one
// TMA load a chunk (L2 evict-first) when the block is one page's 64 tokens (TmaRowOf), else
// cp.async of the rows (zeros past e_lim and for bad pages, reported), landing on landed[slot][c].
__device__ void CopyItem(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu,
                         uint32_t seq, uint32_t item, int nblk, const TmaMap* kv_map) {
  const int ctid = threadIdx.x & (kSm90WgThreads - 1);
  const Bars bars{SmemAddr(smem) + L::kBars};
  const uint8_t* kv_rows = static_cast<const uint8_t*>(p.kv_cache);
  if (item > 0) MbarWait(bars.QEmpty(), (item - 1) & 1);
  if (nblk == 0) {
    MbarArrive(bars.QLanded());  // a phase for every item (the converters' parity)
    return;
  }
  CopyChunks<true>(static_cast<const uint8_t*>(p.q), QRows<true>(p, it, ctid), 0, 0, L::kChunks,
                   ctid, smem + L::kQ);
  CpAsyncArrive(bars.QLanded());
  for (int t = 0; t < nblk; ++t) {
    const uint32_t n = seq + t;
    const int slot = SlotOf(n);
    const int32_t tma_row = WarpUniform(TmaRowOf(p, it, t));
    const RowSources<true> src =
        tma_row < 0 ? KvRows<true>(p, it, t, ctid, cu) : RowSources<true>{};
    if (t + kSm90PrefetchAhead < nblk && WarpUniform(TmaRowOf(p, it, t + kSm90PrefetchAhead)) < 0) {
      PrefetchKvBlock<true>(p, it, t + kSm90PrefetchAhead, ctid);
    }
    if (n >= L::kSlots) MbarWait(bars.Empty(slot), PhaseOf(n) ^ 1);
    uint8_t* tile = smem + L::kKv + slot * L::kSlot;
    if (tma_row < 0) {
#pragma unroll
      for (int c = 0; c < L::kChunks; ++c) {
        CopyChunks<true, 64, L::kKvChunk, 0>(kv_rows, src, 0, c, c + 1, ctid, tile);
        CpAsyncArrive(bars.Landed(slot, c));
      }
      continue;
    }
#pragma unroll
    for (int c = 0; c < L::kChunks; ++c) {
      if (ctid == 0) {
        MbarArriveExpectTx(bars.Landed(slot, c), L::kKvChunk);
        TmaLoad2D</*kEvictFirst=*/true>(SmemAddr(tile) + c * L::kKvChunk, kv_map, 64 * c, tma_row,
                                        bars.Landed(slot, c));
      } else {
        MbarArrive(bars.Landed(slot, c));
      }
    }
  }
}

// Converter thread `vtid`'s part of chunk c of the Q tile: its raw units (row vtid / 4 + 16 k,
// unit vtid % 4) read, the converters meet (the f16 rows cover the raw half), then each e4m3
// pair widened to its place in S's dim order (QChunkPairAt).
__device__ __forceinline__ void ConvertQChunk(int c, int vtid, uint32_t q) {
  const uint32_t chunk = q + c * L::kQChunk;
  const int u = vtid % 4, row0 = vtid / 4;
  uint4 raw[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    raw[k] = LoadShared128(chunk + L::kQChunk / 2 + (row0 + 16 * k) * 64 + 16 * u);
  NamedBarrierSync(4, kSm90ConvertThreads);  // every raw unit read before any is overwritten
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int row = row0 + 16 * k;
    const uint32_t words[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      StoreShared32(chunk + QChunkPairAt(row, u, s, 0), E4m3x2ToF16x2(words[s] & 0xffffu));
      StoreShared32(chunk + QChunkPairAt(row, u, s, 1), E4m3x2ToF16x2(words[s] >> 16));
    }
  }
}

// The converters' part of one item: Q to f16 (after the consumers released the previous
// item's: an item without kv blocks loads none, and q_full must not run two phases ahead),
// published by q_full.
__device__ void ConvertItem(uint8_t* smem, uint32_t item, int nblk) {
  const int vtid = (threadIdx.x & (kSm90WgThreads - 1)) - kSm90CopyThreads;
  const uint32_t base = SmemAddr(smem);
  const Bars bars{base + L::kBars};
  if (item > 0) MbarWait(bars.QEmpty(), (item - 1) & 1);
  MbarWait(bars.QLanded(), item & 1);
  if (nblk > 0) {
#pragma unroll 1
    for (int c = 0; c < L::kChunks; ++c) ConvertQChunk(c, vtid, base + L::kQ);
  }
  FenceProxyAsync();  // the consumers' wgmma reads Q
  MbarArrive(bars.QFull());
}

// ---- Tile math -------------------------------------------------------------------------------

// What a consumer thread knows of its place.
struct Place {
  Bars bars;
  uint32_t base;
  int wtid, warp, lane, g, quad;
};

__device__ __forceinline__ Place PlaceOf(uint8_t* smem) {
  Place at;
  at.base = SmemAddr(smem);
  at.bars = Bars{at.base + L::kBars};
  at.wtid = threadIdx.x & (kSm90WgThreads - 1);
  at.warp = at.wtid >> 5;
  at.lane = at.wtid & 31;
  at.g = at.lane >> 2;
  at.quad = at.lane & 3;
  return at;
}

// Two e4m3 A-fragment registers of S from one raw word of a token row (bytes 2 h + e -> A
// columns 2 q + e + 8 h): the low pair to register `lo`'s place, the high pair to `hi`'s.
__device__ __forceinline__ void WidenWord(uint32_t word, uint32_t& lo, uint32_t& hi) {
  lo = E4m3x2ToF16x2(word & 0xffffu);
  hi = E4m3x2ToF16x2(word >> 16);
}

// S^T = K Q^T of block n (in `slot`), issued as one commit group a half chunk (each chunk
// waited for as it lands): 8 bytes of each of the thread's two token rows widened into the A
// fragments of two k steps, double-buffered (a group's registers are rewritten once the group
// two back retired; halves, not whole chunks, keep 16 registers for them). The last two
// groups may still run when it returns: `a`, the A registers, belongs to the caller, whose
// wait retires them.
__device__ __forceinline__ void IssueScores(const Place& at, uint32_t n, float (&s)[32],
                                            uint32_t (&a)[2][2][4]) {
  const int slot = SlotOf(n);
  const int tok = 16 * at.warp + TokenOfRow(at.g);
  const uint32_t kv = at.base + L::kKv + slot * L::kSlot + tok * 64 + 16 * at.quad;
#pragma unroll
  for (int e = 0; e < 32; ++e) s[e] = 0.0f;
  PinAccumulators(s);
#pragma unroll
  for (int c = 0; c < L::kChunks; ++c) {
    MbarWait(at.bars.Landed(slot, c), PhaseOf(n));
    const uint64_t q = MatrixDesc(at.base + L::kQ + c * L::kQChunk, 16, 1024, kSwizzle128B);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint2 r0 = LoadShared64(kv + c * L::kKvChunk + 8 * half);           // token row r
      const uint2 r1 = LoadShared64(kv + c * L::kKvChunk + 2 * 64 + 8 * half);  // r + 8: + 2
      if (2 * c + half >= 2) WgmmaWait<1>();  // the group two back retired: registers free
      uint32_t(&f)[2][4] = a[half];
      WidenWord(r0.x, f[0][0], f[0][2]);
      WidenWord(r1.x, f[0][1], f[0][3]);
      WidenWord(r0.y, f[1][0], f[1][2]);
      WidenWord(r1.y, f[1][1], f[1][3]);
      WgmmaFence();
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int ks = 2 * half + k;  // k step of the chunk: word ks of the 16-byte unit
        WgmmaM64N64K16F16RegA(s, f[k], q + ((ks * 32) >> 4), c + ks > 0);
      }
      WgmmaCommit();
    }
  }
}

// O^T[the consumer's dims] += V^T P^T for block n: per k step of 16 tokens, four 8-byte loads
// (the thread's 8 dims of its four token rows) give all four dims tiles' A fragments (bytes
// paired across tokens by a byte permute, then widened); committed two tiles at a time (the
// low or high word of each load), the A registers double-buffered (8 a group: the S of the
// consumer's next block is live beside them). Every group has retired when it returns.
__device__ __forceinline__ void PvT(const Place& at, int w, uint32_t n, float (&o)[4][32]) {
  const uint32_t v =
      at.base + L::kKv + SlotOf(n) * L::kSlot + (4 * w + at.warp) * L::kKvChunk + 8 * at.g;
  const uint64_t p0 = MatrixDesc(at.base + L::kP + (n & 1) * L::kPTile, 16, 1024, kSwizzle128B);
  uint32_t a[2][2][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint2 x[2][2];  // [h][e]: token TokenOfSlot(quad, e, h) of the step
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        x[h][e] = LoadShared64(v + (16 * kk + TokenOfSlot(at.quad, e, h)) * 64);
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (2 * kk + half >= 2) WgmmaWait<1>();  // the group two back retired: registers free
      uint32_t(&f)[2][4] = a[half];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        // Dims tile j = 2 half + jj is byte 2 j (row g) and 2 j + 1 (row g + 8) of the
        // thread's 8: byte 2 jj, 2 jj + 1 of the low (half 0) or high word.
        const uint32_t sel = jj ? 0x7362u : 0x5140u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w0 = half ? x[h][0].y : x[h][0].x, w1 = half ? x[h][1].y : x[h][1].x;
          const uint32_t pairs = __byte_perm(w0, w1, sel);
          f[jj][2 * h] = E4m3x2ToF16x2(pairs & 0xffffu);  // row g: slots 2 q + 8 h, + 1
          f[jj][2 * h + 1] = E4m3x2ToF16x2(pairs >> 16);  // row g + 8
        }
      }
      WgmmaFence();
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        WgmmaM64N64K16F16RegA(o[2 * half + jj], f[jj], p0 + ((kk * 32) >> 4), 1);
      }
      WgmmaCommit();
    }
  }
  WgmmaWait<0>();
#pragma unroll
  for (int j = 0; j < 4; ++j) PinAccumulators(o[j]);
}

// Per column of a thread's 16 (k): the reduction over the warp's 8 lanes of the quad, halving
// the values each step (lane bits 4, 3, 2); lane g ends with columns 2 g, 2 g + 1 (k), i.e. q
// rows ColOf(2 g + x, quad). Max or sum.
template <bool kSum>
__device__ __forceinline__ void ReduceOverRows(const float (&v)[16], int lane, float (&out)[2]) {
  auto op = [](float a, float b) { return kSum ? a + b : MaxF(a, b); };
  const bool b4 = (lane >> 4) & 1, b3 = (lane >> 3) & 1, b2 = (lane >> 2) & 1;
  float u[8], w[4];
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const float keep = b4 ? v[8 + t] : v[t], give = b4 ? v[t] : v[8 + t];
    u[t] = op(keep, __shfl_xor(give, 16));
  }
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const float keep = b3 ? u[4 + t] : u[t], give = b3 ? u[t] : u[4 + t];
    w[t] = op(keep, __shfl_xor(give, 8));
  }
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const float keep = b2 ? w[2 + t] : w[t], give = b2 ? w[t] : w[2 + t];
    out[t] = op(keep, __shfl_xor(give, 4));
  }
}

// Column `col`'s step of the online softmax at block i of the item: the block's max over the
// four warps' maxima (kColMax, at `colmax`), the running max before it (kRowM at `m_prev`;
// none for the item's first block), the max after it, the max to exponentiate against (0
// while nothing was seen: masked scores give P = 0, not NaN) and the previous terms' factor.
struct ColumnStep {
  float m_new, m_use, alpha;
};
__device__ __forceinline__ ColumnStep StepColumn(uint32_t colmax, uint32_t m_prev, int col, int i) {
  const uint4 four = LoadShared128(colmax + 16 * col);
  const float mx = MaxF(MaxF(BitsToFloat(four.x), BitsToFloat(four.y)),
                        MaxF(BitsToFloat(four.z), BitsToFloat(four.w)));
  const float m_old = i == 0 ? NegInf() : LoadSharedF32(m_prev + 4 * col);
  ColumnStep c;
  c.m_new = MaxF(m_old, mx);
  c.m_use = c.m_new == NegInf() ? 0.0f : c.m_new;
  c.alpha = exp2f(m_old - c.m_use);
  return c;
}

// The owner's softmax of block i of the item (sequence number n, S^T retired in s): scale and
// mask (a token at or past a q row's visible end, kVend: -inf), the block's column maxima over the
// four warps (kColMax, a warpgroup barrier), the running max after the previous block
// (kRowM[(n - 1) % 2], none for the item's first), P^T as f16 into kP[n % 2] (the thread's two
// token rows are one pair of k slots), the warp's row sums l of q rows ColOf(2 g + x, quad)
// (the block's summed over the warp's rows), and the running max and rescale factors to
// kRowM / kPvAlpha[n % 2]; published by score_stats[n % 2].
__device__ __forceinline__ void Softmax(const MlaDecodeParams& p, const Item& it, const Place& at,
                                        int w, float (&s)[32], float (&l)[2], int i, uint32_t n,
                                        int64_t min_vend, float scale_log2) {
  const int tok = 16 * at.warp + TokenOfRow(at.g);  // rows tok and tok + 2 of the block
  const int64_t t0 = it.begin + static_cast<int64_t>(i) * L::kTokens;
  if (WarpUniform(t0 + L::kTokens <= it.begin + min_vend)) {
#pragma unroll
    for (int e = 0; e < 32; ++e) s[e] *= scale_log2;
  } else {
    const uint32_t vend = at.base + L::kVend + w * 64 * 4;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int lim = static_cast<int>(LoadShared32(vend + 4 * ColOf(k, at.quad))) - i * L::kTokens;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float& x = s[4 * (k >> 1) + 2 * h + (k & 1)];
        x = tok + 2 * h < lim ? x * scale_log2 : NegInf();
      }
    }
  }
  float cmax[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    cmax[k] = MaxF(s[4 * (k >> 1) + (k & 1)], s[4 * (k >> 1) + 2 + (k & 1)]);
  }
  float wmax[2];
  ReduceOverRows<false>(cmax, at.lane, wmax);
  const uint32_t colmax = at.base + L::kColMax + w * 64 * 16;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    StoreSharedF32(colmax + 16 * ColOf(2 * at.g + x, at.quad) + 4 * at.warp, wmax[x]);
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);  // every warp's column maxima written
  const uint32_t m_prev = at.base + L::kRowM + ((n - 1) & 1) * 64 * 4;
  const uint32_t m_next = at.base + L::kRowM + (n & 1) * 64 * 4;
  const uint32_t alpha_at = at.base + L::kPvAlpha + (n & 1) * 64 * 4;
  const uint32_t p_tile = at.base + L::kP + (n & 1) * L::kPTile;
  const bool writer = at.warp == 0 && at.g == 0;
  float sums[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int col = ColOf(k, at.quad);
    const ColumnStep c = StepColumn(colmax, m_prev, col, i);
    const float p0 = exp2f(s[4 * (k >> 1) + (k & 1)] - c.m_use);
    const float p1 = exp2f(s[4 * (k >> 1) + 2 + (k & 1)] - c.m_use);
    sums[k] = p0 + p1;
    StoreShared32(PAt(p_tile, col, 16 * at.warp + 2 * at.g), PackF16x2(p0, p1));
    if (writer) {
      StoreSharedF32(m_next + 4 * col, c.m_new);
      StoreSharedF32(alpha_at + 4 * col, c.alpha);
    }
  }
  // The row sums as two values a lane (not 16: registers), each with its column's factor.
  float block_sum[2];
  ReduceOverRows<true>(sums, at.lane, block_sum);
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const ColumnStep c = StepColumn(colmax, m_prev, ColOf(2 * at.g + x, at.quad), i);
    l[x] = l[x] * c.alpha + block_sum[x];
  }
  FenceProxyAsync();  // P^T is read by wgmma (ours and the other's)
  MbarArrive(at.bars.ScoreStats(n));
}

// O^T and (unless the thread's consumer owns block n, whose softmax did it) the row sums times
// block n's rescale factors; O^T only if some factor of the warp is not 1.
__device__ __forceinline__ void Rescale(const Place& at, float (&o)[4][32], float (&l)[2],
                                        uint32_t n, bool own) {
  const uint32_t alpha = at.base + L::kPvAlpha + (n & 1) * 64 * 4;
  float f[16];
  bool moved = false;
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    f[k] = LoadSharedF32(alpha + 4 * ColOf(k, at.quad));
    moved = moved || f[k] != 1.0f;
  }
  if (!own) {
#pragma unroll
    for (int x = 0; x < 2; ++x) l[x] *= LoadSharedF32(alpha + 4 * ColOf(2 * at.g + x, at.quad));
  }
  if (__ballot64(moved) == 0) return;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 32; ++e) o[j][e] *= f[2 * (e >> 2) + (e & 1)];
  }
}

// Consumer w's part of one item (see the file comment). `seq`: kv blocks this block ran before
// the item; `item`: items before it. Returns the item's kv blocks.
__device__ int RunConsumer(const MlaDecodeParams& p, const Item& it, uint8_t* smem, uint32_t seq,
                           uint32_t item, int w) {
  const Place at = PlaceOf(smem);
  const int nblk = BlocksOf(it);
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
  // What the item's first q token sees (the least of its rows): blocks below it need no mask.
  // The others' visible ends (relative to the item's first kv token, < 2^31: an item's kv fits
  // int32) go to kVend once an item for the masked blocks, not to registers; the previous
  // item's reads of it ended before its row_l_full wait.
  const int64_t min_vend = VisibleEnd(p, it, it.first_token) - it.begin;
  if (at.wtid < L::kRows) {
    const int64_t v = VisibleEnd(p, it, it.first_token + at.wtid / it.hpg) - it.begin;
    StoreShared32(at.base + L::kVend + w * 64 * 4 + 4 * at.wtid,
                  static_cast<uint32_t>(v < 0 ? 0 : v));
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);
  float o[4][32], s[32], l[2];  // l: the warp's row sums of q rows ColOf(2 g + x, quad)
  uint32_t s_regs[2][2][4];     // S's A registers (IssueScores), live until its groups retire
#pragma unroll
  for (int x = 0; x < 2; ++x) l[x] = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 32; ++e) o[j][e] = 0.0f;
  }

  // Block i is ours when (seq + i) % 2 is w. Our last S of the item releases the Q tile
  // (q_empty; at once when we have no block).
  const int first_own = static_cast<int>((seq & 1) != static_cast<uint32_t>(w));
  MbarWait(at.bars.QFull(), item & 1);
  if (first_own >= nblk) MbarArrive(at.bars.QEmpty());
  if (first_own == 0 && nblk > 0) {
    IssueScores(at, seq, s, s_regs);
    WgmmaWait<0>();
    PinAccumulators(s);
    if (nblk <= 2) MbarArrive(at.bars.QEmpty());
  }
#pragma unroll 1
  for (int i = 0; i < nblk; ++i) {
    const uint32_t n = seq + i;
    const bool own = WarpUniform((n & 1) == static_cast<uint32_t>(w));
    if (own) {
      Softmax(p, it, at, w, s, l, i, n, min_vend, scale_log2);
      NamedBarrierSync(2 + w, kSm90WgThreads);  // all of P^T written
    } else {
      const bool next_s = WarpUniform(i + 1 < nblk);  // our block follows the other's
      // The other's statistics of n, and our half of V (the owner waited for it to land; our
      // own wait orders our reads).
      auto take_stats = [&] {
        MbarWait(at.bars.ScoreStats(n), (n >> 1) & 1);
#pragma unroll
        for (int c = 0; c < 4; ++c) MbarWait(at.bars.Landed(SlotOf(n), 4 * w + c), PhaseOf(n));
      };
      if (next_s) {
        // Issued before the wait, our S runs on the tensor cores during the other's softmax;
        // retired in the same branch, before O is rescaled (a wgmma that ptxas cannot prove
        // retired while O or S is rewritten makes it serialize every wgmma, C7515).
        IssueScores(at, n + 1, s, s_regs);
        take_stats();
        WgmmaWait<0>();
        PinAccumulators(s);
        if (i + 3 >= nblk) MbarArrive(at.bars.QEmpty());  // our last S of the item
      } else {
        take_stats();
      }
    }
    Rescale(at, o, l, n, own);
    PvT(at, w, n, o);
    MbarArrive(at.bars.Empty(SlotOf(n)));
  }

  // Epilogue: the row sums of both consumers' four warps (each relative to the final running
  // max) through kRowL[item % 2] and row_l_full (use k of a buffer completes its phase k, which
  // also orders the other's reads of item - 2 before these writes); consumer 0's LSE from the
  // final running max, kRowM[(last block) % 2] (rewritten only by the owner of the block after
  // next, whose softmax waits for the next block's statistics, which consumer 0 publishes after
  // this epilogue unless it owns that block itself); each consumer stores its 256 dims of O.
  const bool lse_writer = w == 0 && at.warp == 0 && at.g == 0;
  const uint32_t m_final = at.base + L::kRowM + ((seq + nblk - 1) & 1) * 64 * 4;
  const uint32_t row_l = at.base + L::kRowL + (item & 1) * 64 * 8 * 4;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    StoreSharedF32(row_l + 32 * ColOf(2 * at.g + x, at.quad) + 4 * (4 * w + at.warp), l[x]);
  }
  MbarArrive(at.bars.RowLFull(item));
  MbarWait(at.bars.RowLFull(item), (item >> 1) & 1);
  float inv[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int col = ColOf(k, at.quad);
    const uint4 a = LoadShared128(row_l + 32 * col), b = LoadShared128(row_l + 32 * col + 16);
    const float lt =
        (BitsToFloat(a.x) + BitsToFloat(a.y)) + (BitsToFloat(a.z) + BitsToFloat(a.w)) +
        ((BitsToFloat(b.x) + BitsToFloat(b.y)) + (BitsToFloat(b.z) + BitsToFloat(b.w)));
    inv[k] = lt > 0.0f ? p.kv_scale / lt : 0.0f;
    if (lse_writer && col < it.rows) {
      WriteLse(p, it, col, RowLse(nblk > 0 ? LoadSharedF32(m_final + 4 * col) : NegInf(), lt));
    }
  }
  // Dims 256 w + 64 warp + 8 g + 2 j + h: element 4 (k >> 1) + 2 h + (k & 1) of tile j.
  const int d0 = 256 * w + 64 * at.warp + 8 * at.g;
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int row = ColOf(k, at.quad);
    if (row >= it.rows) continue;
    const float sc = inv[k];
    float v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = o[j][4 * (k >> 1) + (k & 1)] * sc;
      v[2 * j + 1] = o[j][4 * (k >> 1) + 2 + (k & 1)] * sc;
    }
    if (it.partial < 0 && p.o_fp32 == nullptr) {
      uint4* dst = reinterpret_cast<uint4*>(p.o + FinalRow(p, it, row) * kDimV + d0);
      *dst = make_uint4(PackBf16x2(v[0], v[1]), PackBf16x2(v[2], v[3]), PackBf16x2(v[4], v[5]),
                        PackBf16x2(v[6], v[7]));
    } else {
      float* dst = it.partial < 0 ? p.o_fp32 + FinalRow(p, it, row) * kDimV + d0  // CP ranks
                                  : p.partial_o + PartialRow(it, row) * kDimV + d0;
      reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
  return nblk;
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

// The fp8 64-row sm90 decode kernel with the kv operands widened in registers; kv_map: the kv
// cache's TMA map (TmaMap, e4m3 plain 64 x 64 boxes; the launch encodes it). Its body exists in
// the NVIDIA device pass and the CPU emulation only.
__global__ void __launch_bounds__(kKvRegThreads, 1)
    MlaDecodeSm90KvRegKernel(const MlaDecodeParams p, const MLAPS_GRID_CONSTANT TmaMap kv_map) {
#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
  mlapsTriggerDependents();  // the reduce may launch (it waits for this grid: LaunchMlaReduce)
  uint8_t* smem = DynamicSmem();
  smem += (L::kAlign - (SmemAddr(smem) & (L::kAlign - 1))) & (L::kAlign - 1);
  if (threadIdx.x == 0) {
    // landed, q_landed: the copy threads; q_full: the converters; score_stats: the owner;
    // empty, q_empty, row_l_full: both consumers.
    const uint32_t bars = SmemAddr(smem) + L::kBars;
    for (int b = 0; b < L::kNumBars; ++b) {
      const int count = b < L::kEmpty || b == L::kQLanded         ? kSm90CopyThreads
                        : b == L::kQFull                          ? kSm90ConvertThreads
                        : b >= L::kScoreStats && b < L::kRowLFull ? kSm90WgThreads
                                                                  : 2 * kSm90WgThreads;
      MbarInit(bars + 8 * b, count);
    }
  }
  __syncthreads();
  uint32_t seq = 0, item = 0;
  const int wg = WarpUniform(static_cast<int>(threadIdx.x) / kSm90WgThreads);
  if (wg == 2) {
#if !defined(MLAPS_SM90_NO_SETMAXNREG)
    SetMaxRegsDec<kSm90ProducerRegs>();
#endif
    const bool copier = (threadIdx.x & (kSm90WgThreads - 1)) < kSm90CopyThreads;
    WalkItems</*kRecord=*/false>(p, L::kRows, [&](const Item& it, int cu) {
      const int nblk = BlocksOf(it);
      if (copier) {
        CopyItem(p, it, smem, cu, seq, item, nblk, &kv_map);
      } else {
        ConvertItem(smem, item, nblk);
      }
      seq += nblk;
      ++item;
    });
  } else {
#if !defined(MLAPS_SM90_NO_SETMAXNREG)
    SetMaxRegsInc<kSm90ConsumerRegs>();
#endif
    WalkItems(
        p, L::kRows,
        [&](const Item& it, int) {
          seq += RunConsumer(p, it, smem, seq, item, wg);
          ++item;
        },
        2 * kSm90WgThreads);
  }
#endif
}

}  // namespace sm90_kvreg
}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_KVREG_H_
