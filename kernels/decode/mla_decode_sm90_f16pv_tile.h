// The tile arithmetic of the 64-row f16 P V kernel (mla_decode_sm90_f16pv.h, whose file comment
// gives the data flow and the roles): for one 64-token kv block of a 64-row tile, S = Q K^T
// (bf16: wgmma on the operands as they landed; fp8: raw e4m3 on QGMMA, a 64-dim chunk a part)
// and O^T += V^T P^T with V^T widened to f16 in registers (bf16: ldmatrix .trans, scaled by 2^-8;
// fp8: the raw rows), plus the accumulator fragment layouts they share with the consumers.
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_TILE_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_TILE_H_

#include <cstdint>

#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/mla_decode_sm90_raw.h"
#include "kernels/decode/sm90_primitives.h"

namespace mlaps {
namespace mla {
namespace sm90_f16pv {

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

using L = SmemSm90;

// ---- Layouts -------------------------------------------------------------------------------

// Fragments of the m64n64 accumulators (thread t of the warpgroup: warp w = t / 32, lane l,
// quad = l % 4): element i sits at M index 16 w + l / 4 + 8 ((i >> 1) & 1) and N index
// 8 (i >> 2) + 2 quad + (i & 1).
//   S (M = q rows, N = tokens): a thread holds rows r0 = 16 w + l / 4 and r0 + 8.
//   O^T tile m (M = dims 64 (4 w + m) .., N = q rows): a thread holds the 16 q rows
//   QRowOf(i, quad), the same in every tile.
__device__ __forceinline__ int QRowOf(int i, int quad) { return 8 * (i >> 2) + 2 * quad + (i & 1); }

// fp8: the ring of raw blocks (block n in slot n % 4, its owner n % 2 as with bf16; RawRows).
using RawRing = KvRing<true>;
// fp8: P^T of block n (64 q rows of 64 f16 tokens, K-major, 128-byte swizzled)
// in the Q region's free halves (the raw Q tile holds each chunk's first 4 KB): q rows 8 g ..
// 8 g + 7 at byte 4096 + 1024 (n % 2) of chunk g (RawPAt).
static_assert(kRawQAt + L::kRows * 64 <= L::kChunk / 2, "the raw Q tile leaves each chunk's half");
__device__ __forceinline__ uint32_t RawPTile(uint32_t base, uint32_t n) {
  return base + L::kQ + L::kChunk / 2 + 1024 * (n & 1);
}

// ---- Tile math -------------------------------------------------------------------------------

// bf16: S = Q K^T for the block in `slot` (sequence number n), issued as one commit group: 9
// chunks in the production order (ChunkAt), waiting for each, x 4 k16 steps of 32 bytes inside
// the swizzled 128-byte rows, on the bf16 operands as they landed.
__device__ __forceinline__ void IssueBf16Scores(const Sm90Bars& bars, uint32_t base, int slot,
                                                uint32_t n, float (&s)[32]) {
  const uint32_t kv = base + L::kKv + slot * L::kTile;
#pragma unroll
  for (int e = 0; e < 32; ++e) s[e] = 0.0f;
  PinAccumulators(s);
  bool landed = true;  // all nine chunks (as in RawScores): then no wait between the wgmmas
#pragma unroll
  for (int c = 0; c < L::kChunks; ++c) {
    landed = MbarTest(bars.Full(slot, c), (n >> 1) & 1) && landed;
  }
  landed = WarpUniform(landed);
  WgmmaFence();
#pragma unroll 1
  for (int pos = 0; pos < L::kChunks; ++pos) {
    const int c = ChunkAt(slot, pos);
    if (!landed) MbarWait(bars.Full(slot, c), (n >> 1) & 1);
    const uint64_t a0 = MatrixDesc(base + L::kQ + c * L::kChunk, 16, 1024, kSwizzle128B);
    const uint64_t b0 = MatrixDesc(kv + c * L::kChunk, 16, 1024, kSwizzle128B);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t step = (kk * 32) >> 4;
      MLAPS_SM90_S_MMA(WgmmaM64N64K16<true>(s, a0 + step, b0 + step, pos + kk > 0));
    }
  }
  WgmmaCommit();
}

// fp8: the operands of one chunk's 64-dim part of S: Q's rows and K's rows (raw, 64-byte
// swizzled), as QGMMA descriptors.
struct RawChunkDescs {
  uint64_t q, k;
};
__device__ __forceinline__ RawChunkDescs RawChunkAt(uint32_t q_rows, uint32_t k_rows) {
  return {MatrixDesc(q_rows, 16, kRawAtom, kSwizzle64B),
          MatrixDesc(k_rows, 16, kRawAtom, kSwizzle64B)};
}

// fp8: acc = one chunk's 64-dim part of S: two QGMMA k steps (m64n64k32), issued as one commit
// group (the caller retires it).
__device__ __forceinline__ void IssueRawChunkScores(float (&acc)[32], const RawChunkDescs& d) {
  WgmmaFence();
  MLAPS_SM90_S_MMA(WgmmaM64N64K32E4m3Fresh(acc, d.q, d.k));
  MLAPS_SM90_S_MMA(WgmmaM64N64K32E4m3(acc, d.q + (32 >> 4), d.k + (32 >> 4), 1));
  WgmmaCommit();
}

// fp8: S = Q K^T of the raw block at `rows` (ring slot `slot`, phase parity `parity`), complete
// on return: chunk by chunk in the slot's production order, each chunk's 64-dim part summed by
// the tensor cores on its own (the first straight into s) and the others added to s in fp32 (the
// H200 sums an e4m3 wgmma's products with fewer than fp32's bits; 64-dim parts meet the gates:
// notes.md, session 8). The nine chunks' barriers are tested at once (the producer runs blocks
// ahead: they have usually landed), not waited for one round trip after another; a chunk is
// waited for only when they had not. The next chunk's descriptors are made while a chunk's
// QGMMAs run: after the wait, their uniform arithmetic sat on the chain of round trips (3% of
// decode at (64,2): notes.md, session 21). One chunk a trip, not unrolled: unrolled, the
// descriptors of all nine stayed live and spilled. (Tried and dropped: two token halves in
// flight, one added while the other runs, 20-22% slower, session 20; a third accumulator, 1.2 KB
// of spills and serialized wgmmas, and P V steps behind the next block's chunks, 3.5% slower,
// session 21.)
__device__ __forceinline__ void RawScores(const Sm90Bars& bars, uint32_t base, uint32_t rows,
                                          int slot, uint32_t parity, float (&s)[32]) {
  bool landed = true;
#pragma unroll
  for (int c = 0; c < L::kChunks; ++c) landed = MbarTest(bars.Full(slot, c), parity) && landed;
  landed = WarpUniform(landed);
  const uint32_t q_rows = base + L::kQ + kRawQAt;
  auto descs_at = [&](int pos) {
    const uint32_t at = ChunkAt(slot, pos) * L::kChunk;
    return RawChunkAt(q_rows + at, rows + at);
  };
  // Chunk pos's part into acc, retired on return; d: its descriptors, then the next chunk's.
  RawChunkDescs d = descs_at(0);
  auto chunk_scores = [&](int pos, float(&acc)[32]) {
    if (!landed) MbarWait(bars.Full(slot, ChunkAt(slot, pos)), parity);
    IssueRawChunkScores(acc, d);
    if (pos + 1 < L::kChunks) d = descs_at(pos + 1);
    WgmmaWait<0>();
    PinAccumulators(acc);
  };
  chunk_scores(0, s);
  float part[32];
#pragma unroll 1
  for (int pos = 1; pos < L::kChunks; ++pos) {
    chunk_scores(pos, part);
#pragma unroll
    for (int e = 0; e < 32; ++e) s[e] += part[e];
  }
}

// bf16 V's scale on its way to f16 (2^-8 in both bf16 halves; the range it buys: the file
// comment) and O's at the end.
constexpr uint32_t kBf16VScale = 0x3b803b80u;
constexpr float kBf16OUnscale = 256.0f;
// A finite bf16 V magnitude (bits without the sign) from which the scaled f16 overflows: 2^24.
constexpr uint32_t kBf16VBeyondF16 = 0x4b80u;

// bf16: the V^T fragments of dims tile m of consumer w (chunk 4 w + m of the slot at `kv`) as
// they lie in shared memory: 16 dims a warp x 16 tokens a k step, by ldmatrix .trans from the
// chunk's token rows (lane: matrix j = lane / 8 holds dims + 8 (j & 1) and tokens + 8 (j >> 1);
// its row lane % 8 is a token).
__device__ __forceinline__ void LoadBf16VtTile(uint32_t kv, int w, int m, int wtid,
                                               uint32_t (&raw)[4][4]) {
  const int warp = wtid >> 5, lane = wtid & 31;
  const int tok = 8 * (lane >> 4) + (lane & 7);
  const int unit = 2 * warp + ((lane >> 3) & 1);
  const uint32_t chunk = kv + (4 * w + m) * L::kChunk;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int t = 16 * kk + tok;
    LdMatrixX4TransShared(raw[kk], chunk + t * 128 + ((unit ^ (t & 7)) << 4));
  }
}

// bf16: O^T[dims 256 w ..] += V^T P^T for the block in the slot at `kv`. Tile m (dims chunk
// 4 w + m) takes the four A fragments of LoadBf16VtTile, scaled by 2^-8 and widened from bf16 to
// f16 (one mul.bf16x2 more a register: the range); P^T is the rope chunk, K-major. The tiles
// are committed one by one, their A registers double-buffered (the tile before last retires
// before its registers take the next tile's fragments), and the next tile's fragments are
// loaded before a tile's wgmmas issue, their shared-memory latency behind them (tile 0's,
// `raw`, by the caller, beside the rescale's loads). A V chunk is freed
// (empty_chunk[slot][4 w + m]) once its fragments are in registers, so the producer refills it
// during the rest of the P V rather than after it: the S of the owner's next block in this slot
// follows at once (notes.md, session 23). Every tile has retired when it returns.
__device__ __forceinline__ void Bf16PvT(const Sm90Bars& bars, uint32_t kv, int slot, int w,
                                        int wtid, float (&o)[4][32], uint32_t (&raw)[4][4]) {
  const uint64_t p0 = MatrixDesc(kv + 8 * L::kChunk, 16, 1024, kSwizzle128B);
  uint32_t a[2][4][4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    if (m >= 2) WgmmaWait<1>();  // tile m - 2 retired: its A registers are free
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#if defined(MLAPS_SM90_PROBE_SKIP_WIDEN)  // probe variants only: bf16 bits read as f16
        // One op for the four of the widening (a plain copy lets ptxas alias the fragments with
        // the next tile's loads and serialize every wgmma, C7512).
        a[m & 1][kk][r] = raw[kk][r] & 0xbfffbfffu;
#else
        a[m & 1][kk][r] = Bf16x2ToF16x2(MulBf16x2(raw[kk][r], kBf16VScale));
#endif
      }
    }
    MbarArrive(bars.EmptyChunk(slot, 4 * w + m));  // its fragments are in registers
#if !defined(MLAPS_SM90_PROBE_SKIP_VT_LOAD)        // probe variants only: tile 0's fragments reused
    if (m < 3) LoadBf16VtTile(kv, w, m + 1, wtid, raw);
#endif
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      MLAPS_SM90_PV_MMA(WgmmaM64N64K16F16RegA(o[m], a[m & 1][kk], p0 + ((kk * 32) >> 4), 1));
    }
    WgmmaCommit();
  }
  WgmmaWait<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) PinAccumulators(o[m]);
}

// fp8: O^T[dims 256 w ..] += V^T P^T for the raw block at `rows`, k step by k step: the A
// fragments of the four dims tiles (M rows in VtDim order) widened from the raw rows of chunks
// 4 w .. 4 w + 3 (two buffers, so a step widens while the one before runs; the next step's
// bytes are loaded before this step's wgmmas issue, their latency behind them: 4% faster at fp8
// (64,2) though ptxas then spills 76 bytes, notes.md, session 20; the first step's, `first`, by the
// caller), P^T from `p_tile`. kRetire:
// every P V has retired when it returns; otherwise the last k step is still in flight on `a`
// (the caller retires it: RunConsumer's retire_pv).
template <bool kRetire>
__device__ __forceinline__ void RawPvT(uint32_t rows, uint32_t p_tile, int w, int wtid,
                                       float (&o)[4][32], uint32_t (&a)[2][4][4],
                                       const uint2 (&first)[4]) {
  const uint64_t p0 = MatrixDesc(p_tile, 16, L::kChunk, kSwizzle128B);
  const uint32_t half_rows = rows + 4 * w * L::kChunk;
  uint2 raw[4] = {first[0], first[1], first[2], first[3]};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk >= 2) WgmmaWait<1>();  // the P V of k step kk - 2 retired: its A buffer is free
    WidenVtRows(raw, a[kk & 1]);
    if (kk < 3) LoadVtStep(half_rows, kk + 1, wtid, raw);
#pragma unroll
    for (int m = 0; m < 4; ++m) PinAccumulators(o[m]);
    WgmmaFence();
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      MLAPS_SM90_PV_MMA(WgmmaM64N64K16F16RegA(o[m], a[kk & 1][m], p0 + ((kk * 32) >> 4), 1));
    }
    WgmmaCommit();
  }
  if (!kRetire) {
    WgmmaWait<1>();  // k step 3 left in flight (its caller's A registers a[1] stay locked)
    return;
  }
  WgmmaWait<0>();
#pragma unroll
  for (int m = 0; m < 4; ++m) PinAccumulators(o[m]);
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

}  // namespace sm90_f16pv
}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_F16PV_TILE_H_
