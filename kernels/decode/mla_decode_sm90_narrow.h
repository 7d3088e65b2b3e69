// Hopper (sm_90a) path of the persistent MLA decode for narrow tiles (at most 16 q rows: H = 16
// at qlen 1, or H / head_fold x tokens_per_tile <= 16), one block an SM. Contract: mla_decode.h;
// the shared-memory layout and the producer warpgroup are shared with the f16-tile kernel
// (mla_decode_sm90_producer.h); measurements: notes.md.
//
// Why a kernel of its own: a 64-row wgmma tile holding 16 rows wastes 3/4 of its tensor work.
// Here the products are transposed so that the 64 kv tokens of a block are the wgmma M and the
// q rows its N = 16, with no padding:
//   S^T (64 tokens x 16 rows)  = K (the kv slot, K-major) . Q^T (the Q tile's rows 0-15)
//   O^T (512 dims x 16 rows)  += V^T (the slot read MN-major) . P^T (16 x 64, K-major)
// as wgmma m64n16k16 (S^T of fp8 on m64n16k32 e4m3).
//
// bf16: inputs stay bf16 as they landed (no conversion, full bf16 range), a ring of two slots
// (block n in slot n % 2). Both consumer warpgroups work on every block; each adds P V for its
// 256 O columns (dims chunks 4w .. 4w + 3) and frees its half of the slot when that P V
// retired. Consumer w computes the k steps 2w, 2w + 1 of each 64-dim chunk of
// S^T, the two halves are exchanged through shared memory, both run the same online softmax
// (same inputs, same order: the same bits, so no statistics are handed over), each stores half
// of P^T (bf16 hi + lo: two P V passes), and both wait for all of it.
//
// fp8: e4m3 inputs stay e4m3 as they landed (64-byte swizzled rows, RawUnit; no widening by the
// producer), half a slot's bytes a block, so the ring has four slots (KvRing: the producer
// runs three blocks ahead). The two consumers take turns (blocks i % 2 == w of an item are
// consumer w's), each with all 512 dims of O^T and a softmax of its own, meeting the other at no
// barrier in the block loop; at the item's end the two partial results are merged (notes.md,
// session 18: 1.25x faster than both consumers on every block). A consumer, for its block:
//   S^T on QGMMA (m64n16k32, K and Q from shared memory): exact products, but the H200 sums an
//     e4m3 wgmma's products with fewer than fp32's bits, so each chunk (64 dims) has an
//     accumulator of its own and the nine are added in fp32 (session 8's 64-dim groups met the
//     gates, 128-dim ones did not: notes.md);
//   the online softmax, all of P^T into a buffer of its own (f16 P: 11 bits, one pass meets the
//     elementwise gate);
//   O^T += V^T P^T with V^T as the register A operand (m64n16k16 f16), k step by k step: the
//     consumer widens all 512 dims itself, 8 bytes of a token row a load, the bytes of two tokens
//     paired by prmt and widened exactly by cvt.rn.f16x2.e4m3x2. So that a thread's 8 bytes are one
//     load, the wgmma's M rows are a permutation of the dims (VtDim; K columns are the tokens in
//     order): O^T rows land at their dims in the epilogue.
//
// kv blocks of 64 tokens that start 64-aligned inside one page (page size >= 64), are wholly
// visible and have a valid page id land by TMA (the launch's TmaMap, TmaRowOf); the others by
// cp.async (zeros past the end, bad pages reported).
//
// Shared memory beyond the f16-tile kernel's use of the layout:
//   * bf16: the slot's rope chunk (dead once both halves of S are done) holds P^T: row r (q
//     row) of P hi, tokens along the 128-byte row as a K-major swizzled operand; P lo at row
//     16 + r. fp8: each consumer's P^T lies in the Q region (RawPTile);
//   * SmemSm90::kRowL holds each consumer's block row-max reduction across its four warps;
//   * the Q tile's rows 16-63 (the producer loads rows 0-15 only; fp8: bytes 2048 on of each
//     chunk) hold scratch rows: the partial S^T exchange (bf16), the row sums' reduction and
//     the output staging. The producer
//     writes there too between q_empty and q_full (an e4m3 Q tile lands raw in each chunk's
//     second half first), so the consumers arrive on q_empty only after the item's last use of
//     the scratch rows and use them only after q_full.
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_NARROW_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_NARROW_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/mla_decode_sm90_raw.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/decode/sm90_softmax.h"

namespace mlaps {
namespace mla {
namespace sm90_narrow {

constexpr int kRows = 16;  // q rows a tile: the wgmma N of both products

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

using L = SmemSm90;

// ---- Layouts -------------------------------------------------------------------------------

// Row `r` (1 KB: 256 fp32) of the consumers' scratch rows inside the Q tile's rows 16-63: six
// rows in each chunk (the 6 KB past the chunk's first 16 q rows).
__device__ __forceinline__ uint32_t ScratchRow(uint32_t base, int r) {
  return base + L::kQ + (r / 6) * L::kChunk + kRows * 128 + (r % 6) * 1024;
}
// Scratch rows: the output staging of consumer w (rows 16 w + q row: its 256 O columns), the
// partial S^T exchange (rows 32-39: [consumer][element e][thread]) and the row sums' cross-warp
// reduction (row 40: [consumer][warp][16 q rows]).
constexpr int kScratchS = 32;
constexpr int kScratchSum = 40;
constexpr int kScratchStats = 41;  // fp8: both consumers' running max and row sums
// Word of column `d` (0..255) of q row `col` in an output staging row: XOR-ed by (col / 2) % 4
// in units of 8 words, so the four rows a warp's store touches at once fall in distinct banks.
__device__ __forceinline__ uint32_t StagingWord(int col, int d) {
  return 4u * static_cast<uint32_t>(d ^ (((col >> 1) & 3) << 3));
}
// Element e of consumer w's thread wtid in the partial S^T exchange (consecutive threads,
// consecutive words).
__device__ __forceinline__ uint32_t PartialSAt(uint32_t base, int w, int e, int wtid) {
  const int word = (w * 8 + e) * kSm90WgThreads + wtid;
  return ScratchRow(base, kScratchS + word / 256) + 4 * (word % 256);
}

// The mbarriers of the layout this kernel uses for its consumers' handoffs, once a block each
// (count 256: both consumers): both partial S^T written; all of P^T written.
__device__ __forceinline__ uint32_t SExchanged(const Sm90Bars& bars) { return bars.RowLFull(0); }
__device__ __forceinline__ uint32_t PWritten(const Sm90Bars& bars) { return bars.RowLFull(1); }
// fp8 uses the same two barriers once an item, at the merge (phase parity: the item's index):
// both consumers' statistics published; the other's columns handed over. (mbarriers rather
// than a 256-thread named barrier: compute-sanitizer's racecheck orders accesses across the
// two warpgroups by these.)
__device__ __forceinline__ uint32_t StatsPublished(const Sm90Bars& bars) {
  return bars.RowLFull(0);
}
__device__ __forceinline__ uint32_t ColumnsHandedOver(const Sm90Bars& bars) {
  return bars.RowLFull(1);
}

// fp8: the raw e4m3 rows of a kv block (mla_decode_sm90_raw.h) lie in a four-slot ring
// (KvRing<true>), Q rows 0-15 at the start of each Q chunk.
// fp8: the parts S^T is summed from in fp32 (IssueRawScores): a chunk (64 dims) each.
constexpr int kRawSParts = L::kChunks;

// fp8: consumer w's P^T of block n (16 rows of 128 bytes, 128-byte swizzled) in the Q region's
// free bytes 1024-2047 of chunk 4 w + 2 (n % 2) (q rows 0-7) and the next chunk (rows 8-15):
// the rope chunk's first half holds raw rows of slots 2-3.
__device__ __forceinline__ uint32_t RawPTile(uint32_t base, uint32_t n, int w) {
  return base + L::kQ + (4 * w + 2 * (n & 1)) * L::kChunk + 1024;
}

// fp8 P V (register A): the wgmma row (M index) r of dims tile m of consumer w's O^T is dim
// 256 w + VtDim(m, r), and P^T's K columns are the tokens in order (mla_decode_sm90_raw.h).

// ---- What a consumer carries through an item (registers) -------------------------------------

// Fragment of an m64n16 accumulator (thread t of the warpgroup, warp w = t / 32, lane l):
// element i is M index 16 w + l / 4 + 8 ((i >> 1) & 1) and N index 8 (i >> 2) + 2 (l % 4) +
// (i & 1). A thread's four q rows ("columns" k = 2 (i >> 2) + (i & 1)) are the same in S^T
// and every O^T tile.
struct NarrowState {
  float o[4][8];    // O^T of our 256 columns: dims tile 4 w + m x the 16 q rows, unnormalized
  float s[2][8];    // our partial S^T in two parts (IssuePartialScores)
  float m[4];       // running max (base 2) of the thread's four q rows (the same in both)
  float l[4];       // this thread's part of their row sums (its tokens), relative to m
  int32_t vend[4];  // kv tokens each of the four rows sees, from it.begin
};

// fp8 (RunConsumerRaw): the consumers take turns, each with all of O^T and its own softmax.
struct RawState {
  float o[8][8];            // O^T of all 512 dims: tile m is dims 256 (m / 4) + VtDim(m % 4, r)
  float s[kRawSParts][8];   // S^T of the block in parts (IssueRawScores)
  uint32_t vt[2][2][4][4];  // P V's A operands: [k step % 2][dims half][tile][register]
  float m[4];               // running max (base 2) of the thread's four q rows
  float l[4];               // this thread's part of their row sums (its tokens), relative to m
  int32_t vend[4];          // kv tokens each of the four rows sees, from it.begin
};

__device__ __forceinline__ int ColOf(int k, int quad) { return 8 * (k >> 1) + 2 * quad + (k & 1); }
__device__ __forceinline__ int KOf(int i) { return 2 * (i >> 2) + (i & 1); }

// Max / sum over the 8 lanes that hold the same q rows (lanes l, l ^ 4, ..., l ^ 28).
__device__ __forceinline__ float RowGroupMax(float x) {
  x = MaxF(x, __shfl_xor(x, 4));
  x = MaxF(x, __shfl_xor(x, 8));
  return MaxF(x, __shfl_xor(x, 16));
}
__device__ __forceinline__ float RowGroupSum(float x) {
  x += __shfl_xor(x, 4);
  x += __shfl_xor(x, 8);
  return x + __shfl_xor(x, 16);
}

// ---- Tile math -------------------------------------------------------------------------------

// Consumer w's half of S^T of the block in `slot` (sequence number n): k steps 2 w and 2 w
// + 1 of each of the 9 chunks (in the slot's production order, waiting for each), into s[0]
// and s[1], one accumulator a k step (one chain of 36 and four chains of 9 measured the same:
// notes.md, session 11).
__device__ __forceinline__ void IssuePartialScores(int w, const Sm90Bars& bars, uint32_t base,
                                                   int slot, uint32_t n, float (&s)[2][8]) {
  const uint32_t kv = base + L::kKv + slot * L::kTile;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s[h][e] = 0.0f;
    PinAccumulators(s[h]);
  }
  WgmmaFence();
#pragma unroll
  for (int pos = 0; pos < L::kChunks; ++pos) {
    const int c = ChunkAt(slot, pos);
    MbarWait(bars.Full(slot, c), (n >> 1) & 1);
    const uint64_t a0 = MatrixDesc(kv + c * L::kChunk, 16, 1024, kSwizzle128B);
    const uint64_t b0 = MatrixDesc(base + L::kQ + c * L::kChunk, 16, 1024, kSwizzle128B);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kk = 2 * w + h;  // 32 bytes a k step inside the 128-byte rows
      WgmmaM64N16K16<true, false>(s[h], a0 + ((kk * 32) >> 4), b0 + ((kk * 32) >> 4), pos > 0);
    }
  }
  WgmmaCommit();
}

// fp8: all of S^T of a block (by the consumer whose turn it is), chunk by chunk in the slot's
// production order (waiting for each), a chunk's two k steps (32 bytes each) an accumulator:
// s[pos] for the chunk at position pos. QGMMA accumulates with fewer than fp32's bits, so the
// parts are added in fp32 (session 8: 64-dim parts met the gates, 128-dim ones did not).
// Indexed by position, not chunk: a compile-time index keeps s in registers.
__device__ __forceinline__ void IssueRawScores(const Sm90Bars& bars, uint32_t base, uint32_t rows,
                                               int slot, uint32_t parity,
                                               float (&s)[kRawSParts][8]) {
  WgmmaFence();
#pragma unroll
  for (int pos = 0; pos < L::kChunks; ++pos) {
    const int c = ChunkAt(slot, pos);
    MbarWait(bars.Full(slot, c), parity);
    const uint64_t a = MatrixDesc(rows + c * L::kChunk, 16, kRawAtom, kSwizzle64B);
    const uint64_t b =
        MatrixDesc(base + L::kQ + c * L::kChunk + kRawQAt, 16, kRawAtom, kSwizzle64B);
    WgmmaM64N16K32E4m3Fresh(s[pos], a, b);
    WgmmaM64N16K32E4m3(s[pos], a + (32 >> 4), b + (32 >> 4), 1);
  }
  WgmmaCommit();
}

// O^T[our 256 columns] += V^T P^T for the block in the slot at `kv`: dims tile 4 w + m is
// chunk 4 w + m read MN-major (64 dims along the 128-byte rows, 16 tokens a k step = 2 KB);
// P^T from the rope chunk (bf16: hi, then lo at row 16). The four tiles' accumulators take
// turns, so consecutive wgmmas are independent.
__device__ __forceinline__ void IssueHalfPv(int w, uint32_t kv, float (&o)[4][8]) {
  const uint64_t v0 = MatrixDesc(kv + 4 * w * L::kChunk, L::kChunk, 1024, kSwizzle128B);
  const uint64_t p0 = MatrixDesc(kv + 8 * L::kChunk, 16, 1024, kSwizzle128B);
  const uint64_t p_lo = MatrixDesc(kv + 8 * L::kChunk + kRows * 128, 16, 1024, kSwizzle128B);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      WgmmaM64N16K16<true, true>(o[m], v0 + ((m * L::kChunk + kk * 16 * 128) >> 4),
                                 p0 + ((kk * 32) >> 4), 1);
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      WgmmaM64N16K16<true, true>(o[m], v0 + ((m * L::kChunk + kk * 16 * 128) >> 4),
                                 p_lo + ((kk * 32) >> 4), 1);
    }
  }
}

// ---- The consumers ---------------------------------------------------------------------------

// The online softmax step of a block on the thread's 8 scores `sc` (S^T of tokens t0, t0 + 8 of
// the block x its four q rows, unscaled): masked to each row's visible tokens (vend, block i),
// the block's max (base 2) of each q row over the warpgroup (the row group's lanes,
// then the four warps through `red` and named barrier 2 + w), the running max m (a lazy
// reference, as StepLazyRunningMax) and the row sums l moved on, alpha the factor of what came
// before; sc becomes P.
__device__ __forceinline__ void SoftmaxStep(float (&sc)[8], float (&m)[4], float (&l)[4],
                                            const int32_t (&vend)[4], int i, int w, uint32_t red,
                                            int wtid, float scale_log2, float (&alpha)[4]) {
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  int lim[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int d = vend[k] - i * L::kTokens;
    lim[k] = d < 0 ? 0 : d > L::kTokens ? L::kTokens : d;
  }
  const int t0 = 16 * warp + (lane >> 2);  // tokens t0 and t0 + 8 of the block
  float mx[4] = {NegInf(), NegInf(), NegInf(), NegInf()};
  const bool whole = __ballot64(lim[0] < L::kTokens || lim[1] < L::kTokens || lim[2] < L::kTokens ||
                                lim[3] < L::kTokens) == 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int k = KOf(e), t = t0 + 8 * ((e >> 1) & 1);
    if (!whole && t >= lim[k]) sc[e] = NegInf();  // unscaled: BlockP scales
    mx[k] = ScoreMax(mx[k], sc[e]);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    mx[k] = RowGroupMax(mx[k]) * scale_log2;  // base 2 (scale_log2 > 0 commutes with the max)
    if (lane < 4) StoreSharedF32(red + 4 * (warp * kRows + ColOf(k, quad)), mx[k]);
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);
  float m_use[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float bmax = mx[k];
#pragma unroll
    for (int wp = 0; wp < 4; ++wp) {
      bmax = ScoreMax(bmax, LoadSharedF32(red + 4 * (wp * kRows + ColOf(k, quad))));
    }
    LazyRowStep(bmax, m[k], l[k], m_use[k], alpha[k]);  // P <= 2^8
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int k = KOf(e);
    sc[e] = BlockP(sc[e], scale_log2, m_use[k]);
    l[k] += sc[e];
  }
}

// Scales the thread's fragments of kTiles m64n16 O^T tiles by alpha of their q rows, unless
// no factor of the warp differs from 1 (the usual case once the running max settled).
template <int kTiles>
__device__ __forceinline__ void RescaleO(float (&o)[kTiles][8], const float (&alpha)[4]) {
  if (__ballot64(alpha[0] != 1.0f || alpha[1] != 1.0f || alpha[2] != 1.0f || alpha[3] != 1.0f) !=
      0) {
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
#pragma unroll
      for (int e = 0; e < 8; ++e) o[m][e] *= alpha[KOf(e)];
    }
  }
}

// The block's row-max exchange of consumer w (SmemSm90::kRowL, two buffers by block parity).
__device__ __forceinline__ uint32_t RowMaxAt(uint32_t base, int w, uint32_t n) {
  return base + L::kRowL + 4 * ((w * 2 + (n & 1)) * 4 * kRows);
}

// bf16: consumer w's part of block i of the item (sequence number n, slot n % 2): its half of
// S^T, the exchange of the halves, the online softmax over the block's tokens (both consumers
// compute the same bits: the same inputs in the same order), its half of P^T stored (q rows
// 8 w .. 8 w + 7), and once all of P^T is in, its O^T columns rescaled and P V added; its half
// of the slot is freed when that P V retired.
__device__ __forceinline__ void RunBlock(int w, NarrowState& st, const Sm90Bars& bars,
                                         uint32_t base, uint32_t n, int i, int wtid,
                                         float scale_log2) {
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  const int slot = static_cast<int>(n & 1);
  const uint32_t kv = base + L::kKv + slot * L::kTile;
  IssuePartialScores(w, bars, base, slot, n, st.s);
  WgmmaWait<0>();
  PinAccumulators(st.s[0]);
  PinAccumulators(st.s[1]);
  float sc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sc[e] = st.s[0][e] + st.s[1][e];
    StoreSharedF32(PartialSAt(base, w, e, wtid), sc[e]);
  }
  MbarArrive(SExchanged(bars));
  MbarWait(SExchanged(bars), n & 1);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = LoadSharedF32(PartialSAt(base, 1 - w, e, wtid));
    sc[e] = w == 0 ? sc[e] + other : other + sc[e];  // consumer 0's half first, in both
  }
  float alpha[4];
  SoftmaxStep(sc, st.m, st.l, st.vend, i, w, RowMaxAt(base, w, n), wtid, scale_log2, alpha);
  // P^T into the rope chunk (dead once both halves of S retired): q rows 8 w .. 8 w + 7 here.
  const uint32_t p_tile = kv + 8 * L::kChunk;
  const int t0 = 16 * warp + (lane >> 2);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if ((e >> 2) != w) continue;  // (a compile-time e keeps sc in registers)
    const int col = ColOf(KOf(e), quad), t = t0 + 8 * ((e >> 1) & 1);
    const uint16_t hi = static_cast<uint16_t>(PackBf16x2(sc[e], 0.0f) & 0xffffu);
    const float lo = sc[e] - Bf16ToFloat(hi);
    StoreShared16(PAt(p_tile, col, t), hi);
    StoreShared16(PAt(p_tile, kRows + col, t),
                  static_cast<uint16_t>(PackBf16x2(lo, 0.0f) & 0xffffu));
  }
  FenceProxyAsync();  // P^T is read by wgmma
  MbarArrive(PWritten(bars));
  RescaleO(st.o, alpha);
#pragma unroll
  for (int m = 0; m < 4; ++m) PinAccumulators(st.o[m]);
  MbarWait(PWritten(bars), n & 1);
  WgmmaFence();
  IssueHalfPv(w, kv, st.o);
  WgmmaCommit();
  WgmmaWait<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) PinAccumulators(st.o[m]);
  MbarArrive(bars.Empty(slot, w));  // our V chunks (the f16-tile kernel's halves)
}

// fp8: block i of the item (sequence number n; blocks i % 2 == w are consumer w's) on its own:
// all of S^T (QGMMA), the online softmax, all of P^T into our buffer, O^T rescaled, then per k
// step V^T widened and P V issued for all 512 dims (two A buffers: a k step widens while the
// one before runs); the slot is freed (both halves) when the last P V retired.
__device__ __forceinline__ void RunRawBlock(int w, RawState& st, const Sm90Bars& bars,
                                            uint32_t base, uint32_t n, int i, int wtid,
                                            float scale_log2) {
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  using Ring = KvRing<true>;
  const int slot = Ring::SlotOf(n);
  const uint32_t rows = RawRows(base, slot);
  const uint32_t upper = rows + 4 * L::kChunk;  // dims 256-511
  IssueRawScores(bars, base, rows, slot, Ring::ParityOf(n), st.s);
  WgmmaWait<0>();
#pragma unroll
  for (int c = 0; c < kRawSParts; ++c) PinAccumulators(st.s[c]);
  float sc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sc[e] = st.s[0][e];
#pragma unroll
    for (int c = 1; c < kRawSParts; ++c) sc[e] += st.s[c][e];
  }
  float alpha[4];
  SoftmaxStep(sc, st.m, st.l, st.vend, i, w, RowMaxAt(base, w, n), wtid, scale_log2, alpha);
  const uint32_t p_tile = RawPTile(base, n, w);
  const int t0 = 16 * warp + (lane >> 2);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int col = ColOf(KOf(e), quad), t = t0 + 8 * ((e >> 1) & 1);
    StoreShared16(RawPAt(p_tile, col, t), static_cast<uint16_t>(PackF16x2(sc[e], 0.0f) & 0xffffu));
  }
  FenceProxyAsync();                        // P^T is read by wgmma
  NamedBarrierSync(2 + w, kSm90WgThreads);  // all of our P^T written
  RescaleO(st.o, alpha);
  const uint64_t p0 = MatrixDesc(p_tile, 16, L::kChunk, kSwizzle128B);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk >= 2) WgmmaWait<1>();  // the P V of k step kk - 2 retired: its A buffer is free
    WidenVtStep(rows, kk, wtid, st.vt[kk & 1][0]);
    WidenVtStep(upper, kk, wtid, st.vt[kk & 1][1]);
#pragma unroll
    for (int m = 0; m < 8; ++m) PinAccumulators(st.o[m]);
    WgmmaFence();
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      WgmmaM64N16K16F16RegA(st.o[m], st.vt[kk & 1][m >> 2][m & 3], p0 + ((kk * 32) >> 4), 1);
    }
    WgmmaCommit();
  }
  WgmmaWait<0>();
#pragma unroll
  for (int m = 0; m < 8; ++m) PinAccumulators(st.o[m]);
  MbarArrive(bars.Empty(slot, 0));  // the whole block: both halves of the slot
  MbarArrive(bars.Empty(slot, 1));
}

// Consumer w's 256 O columns, normalized in its staging rows, stored row by row (final O as
// bf16 or fp32, or a partial), and the LSE of each q row (consumer 0).
__device__ __forceinline__ void StoreStagedColumns(const MlaDecodeParams& p, const Item& it,
                                                   uint32_t base, int w, int wtid,
                                                   const float (&lse)[4]) {
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  // 16 rows x 256 columns: a thread stores 4 consecutive columns of row wtid / 64 + 2 pass.
#pragma unroll 2
  for (int pass = 0; pass < kRows / 2; ++pass) {
    const int row = 2 * pass + (wtid >> 6), d = 4 * (wtid & 63);
    if (row >= it.rows) continue;
    const uint32_t at = ScratchRow(base, 16 * w + row) + StagingWord(row, d);
    const float v0 = LoadSharedF32(at), v1 = LoadSharedF32(at + 4), v2 = LoadSharedF32(at + 8),
                v3 = LoadSharedF32(at + 12);
    const int col0 = 256 * w + d;
    if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
      *reinterpret_cast<float4*>(p.o_fp32 + FinalRow(p, it, row) * kDimV + col0) =
          make_float4(v0, v1, v2, v3);
    } else if (it.partial < 0) {
      *reinterpret_cast<uint2*>(p.o + FinalRow(p, it, row) * kDimV + col0) =
          make_uint2(PackBf16x2(v0, v1), PackBf16x2(v2, v3));
    } else {
      *reinterpret_cast<float4*>(p.partial_o + PartialRow(it, row) * kDimV + col0) =
          make_float4(v0, v1, v2, v3);
    }
  }
  if (w == 0 && warp == 0 && lane < 4) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int col = ColOf(k, quad);
      if (col < it.rows) WriteLse(p, it, col, lse[k]);
    }
  }
}

// Consumer w's row sums of its four q rows over the warpgroup (the row group's lanes, then the
// four warps through the scratch rows).
__device__ __forceinline__ void SumRows(uint32_t base, int w, int wtid, const float (&l)[4],
                                        float (&lt)[4]) {
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float lw = RowGroupSum(l[k]);
    if (lane < 4) {
      StoreSharedF32(ScratchRow(base, kScratchSum) + 4 * ((w * 4 + warp) * kRows + ColOf(k, quad)),
                     lw);
    }
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lt[k] = 0.0f;
#pragma unroll
    for (int wp = 0; wp < 4; ++wp) {
      lt[k] += LoadSharedF32(ScratchRow(base, kScratchSum) +
                             4 * ((w * 4 + wp) * kRows + ColOf(k, quad)));
    }
  }
}

// A consumer's state (NarrowState, RawState) at an item's start: the kv ends (from it.begin)
// of the thread's four q rows, no max yet, zero row sums and O^T.
template <class State>
__device__ __forceinline__ void StartItem(const MlaDecodeParams& p, const Item& it, int quad,
                                          State& st) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int col = ColOf(k, quad);
    const int64_t v =
        col < it.rows ? VisibleEnd(p, it, it.first_token + col / it.hpg) - it.begin : 0;
    st.vend[k] = static_cast<int32_t>(v < 0 ? 0 : v);  // < 2^31: an item's kv fits int32
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    st.m[k] = NegInf();
    st.l[k] = 0.0f;
  }
  constexpr int kTiles = sizeof(st.o) / sizeof(st.o[0]);
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
#pragma unroll
    for (int e = 0; e < 8; ++e) st.o[m][e] = 0.0f;
  }
}

// bf16: consumer w's part of one item: every kv block with the other consumer, then its 256 O
// columns normalized and stored (and the LSE, consumer 0). Returns the item's kv blocks.
__device__ int RunConsumerNarrow(const MlaDecodeParams& p, const Item& it, uint8_t* smem,
                                 uint32_t seq, uint32_t item, int w) {
  const int wtid = threadIdx.x & (kSm90WgThreads - 1);
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  const uint32_t base = SmemAddr(smem);
  const Sm90Bars bars{base + L::kBars};
  const int nblk = BlocksOf(it);
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
  NarrowState st;
  StartItem(p, it, quad, st);
  MbarWait(bars.QFull(), item & 1);
  for (int i = 0; i < nblk; ++i) RunBlock(w, st, bars, base, seq + i, i, wtid, scale_log2);

  // Row sums (the same in both consumers), then our columns, normalized, into our staging rows.
  float lt[4], inv[4], lse[4];
  SumRows(base, w, wtid, st.l, lt);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    inv[k] = lt[k] > 0.0f ? p.kv_scale / lt[k] : 0.0f;
    lse[k] = RowLse(st.m[k], lt[k]);
  }
  const int d0 = 16 * warp + (lane >> 2);  // dims d0 and d0 + 8 of each 64-dim tile
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int k = KOf(e), col = ColOf(k, quad), d = 64 * m + d0 + 8 * ((e >> 1) & 1);
      StoreSharedF32(ScratchRow(base, 16 * w + col) + StagingWord(col, d), st.o[m][e] * inv[k]);
    }
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);
  StoreStagedColumns(p, it, base, w, wtid, lse);
  MbarArrive(bars.QEmpty());  // the scratch rows are read: the producer may load the next Q
  return nblk;
}

// fp8: consumer w's part of one item: its blocks (i % 2 == w) with all of O^T and a softmax of
// its own (the consumers take turns, so both work at once on consecutive blocks and meet at no
// barrier in the block loop), then the two partial results merged: each publishes its running
// max and row sums, each scales its O^T by exp2(its max - the rows' max), hands the other's 256
// columns over through that consumer's staging rows, adds the other's part of its own columns,
// normalizes and stores them (and the LSE, consumer 0). Returns the item's kv blocks.
__device__ int RunConsumerRaw(const MlaDecodeParams& p, const Item& it, uint8_t* smem, uint32_t seq,
                              uint32_t item, int w) {
  const int wtid = threadIdx.x & (kSm90WgThreads - 1);
  const int warp = wtid >> 5, lane = wtid & 31, quad = lane & 3;
  const uint32_t base = SmemAddr(smem);
  const Sm90Bars bars{base + L::kBars};
  const int nblk = BlocksOf(it);
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
  RawState st;
  StartItem(p, it, quad, st);
  MbarWait(bars.QFull(), item & 1);
  for (int i = w; i < nblk; i += 2) RunRawBlock(w, st, bars, base, seq + i, i, wtid, scale_log2);

  // Our row sums, then both consumers' (max, sum) of each q row through the stats row.
  float lt[4];
  SumRows(base, w, wtid, st.l, lt);
  const uint32_t stats = ScratchRow(base, kScratchStats);  // [max 0, max 1, sum 0, sum 1][row]
  if (warp == 0 && lane < 4) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      StoreSharedF32(stats + 4 * (w * kRows + ColOf(k, quad)), st.m[k]);
      StoreSharedF32(stats + 4 * ((2 + w) * kRows + ColOf(k, quad)), lt[k]);
    }
  }
  MbarArrive(StatsPublished(bars));
  MbarWait(StatsPublished(bars), item & 1);
  float mine[4], inv[4], lse[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float m_other = LoadSharedF32(stats + 4 * ((1 - w) * kRows + ColOf(k, quad)));
    const float l_other = LoadSharedF32(stats + 4 * ((3 - w) * kRows + ColOf(k, quad)));
    const float m_all = MaxF(st.m[k], m_other);
    const float m_use = m_all == NegInf() ? 0.0f : m_all;
    mine[k] = exp2f(st.m[k] - m_use);
    const float other = exp2f(m_other - m_use);
    // Consumer 0's part first in both, so both have the same bits.
    const float l_all =
        w == 0 ? lt[k] * mine[k] + l_other * other : l_other * other + lt[k] * mine[k];
    inv[k] = l_all > 0.0f ? p.kv_scale / l_all : 0.0f;
    lse[k] = RowLse(m_all, l_all);
  }
  // The other consumer's columns (our tiles 4 (1 - w) ..), scaled, into its staging rows; the
  // thread of the same index there reads them back (the same fragment positions).
  const int d0 = 16 * warp + (lane >> 2);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int k = KOf(e), col = ColOf(k, quad), d = VtDim(m, d0 + 8 * ((e >> 1) & 1));
      StoreSharedF32(ScratchRow(base, 16 * (1 - w) + col) + StagingWord(col, d),
                     (w == 0 ? st.o[4 + m][e] : st.o[m][e]) * mine[k]);
    }
  }
  MbarArrive(ColumnsHandedOver(bars));
  MbarWait(ColumnsHandedOver(bars), item & 1);
  // Our columns: the other's part (consumer 0's first), ours, normalized, in place.
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int k = KOf(e), col = ColOf(k, quad), d = VtDim(m, d0 + 8 * ((e >> 1) & 1));
      const uint32_t at = ScratchRow(base, 16 * w + col) + StagingWord(col, d);
      const float ours = (w == 0 ? st.o[m][e] : st.o[4 + m][e]) * mine[k];
      const float other = LoadSharedF32(at);
      StoreSharedF32(at, (w == 0 ? ours + other : other + ours) * inv[k]);
    }
  }
  NamedBarrierSync(2 + w, kSm90WgThreads);
  StoreStagedColumns(p, it, base, w, wtid, lse);
  MbarArrive(bars.QEmpty());  // the scratch rows are read: the producer may load the next Q
  return nblk;
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

// The narrow-tile sm90 decode kernel (bf16 or fp8 e4m3fn); kv_map: the kv cache's TMA map
// (TmaMap; the launch encodes it). Its body exists in the NVIDIA device pass and the CPU
// emulation only.
template <bool kFp8>
__global__ void __launch_bounds__(kSm90Threads, 1)
    MlaDecodeSm90NarrowKernel(const MlaDecodeParams p, const MLAPS_GRID_CONSTANT TmaMap kv_map) {
#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
  // Both consumers run one instance of their code (half the hot code for the instruction
  // caches).
  RunSm90Block<kFp8, /*kWiden=*/false, kRows, /*kTma=*/true, /*kOneConsumerCode=*/true>(
      p, &kv_map, [&](int w, const Item& it, uint8_t* smem, uint32_t seq, uint32_t item) {
        if constexpr (kFp8) {
          return RunConsumerRaw(p, it, smem, seq, item, w);
        } else {
          return RunConsumerNarrow(p, it, smem, seq, item, w);
        }
      });
#endif
}

}  // namespace sm90_narrow
}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_NARROW_H_
