// The producer warpgroup of the sm90 decode kernels (the f16-tile kernel, mla_decode_sm90.h, the
// narrow-tile kernel, mla_decode_sm90_narrow.h, and the f16 P V kernel, mla_decode_sm90_f16pv.h)
// and the block routine that runs the producer and a kernel's consumer warpgroups, on the block
// layout of mla_decode_sm90_block.h. Contract: mla_decode.h; primitives: sm90_primitives.h.
//
// One block of three warpgroups per SM. Warpgroup 2 (producer) loads the Q tile once per item
// and each 64-token kv block by cp.async (or TMA, kernels that pass a tensor map), converts
// them to f16 in shared memory (kWiden; the narrow kernel keeps bf16 as it landed) and leaves
// them 128-byte swizzled (the layout wgmma reads: a tile of R rows x 576 dims is 9 column
// chunks of R x 64, row r of a chunk at 128 r bytes, its 16-byte units XOR-ed by r % 8) in the
// Q region or one of two kv slots, chunk by chunk, each chunk completing on its own mbarrier.
// Without TMA it also starts the L2 fill of the block after next. Tokens past the item's
// visible end and bad pages (reported) are stored as zeros. Warpgroups 0 and 1 are the
// kernel's consumers.
//
// Order and reuse (mbarriers, phases by block sequence number n across items):
//   full[s][c]   producer -> consumers: chunk c of slot s written;
//   empty[s][w]  consumer w -> producer: w's reads of the block in slot s done (w = 0 frees
//                chunks 0-3, w = 1 chunks 4-7, chunk 8 needs both);
//   empty_chunk[s][c]  (kChunkFree kernels, the bf16 f16pv one) chunk c < 8 of slot s read by
//                its consumer, so that the producer refills it before that consumer's half is
//                done; chunk 8 still waits for both empty[s][w];
//   stats, row_l_full  for the consumers' own handoffs;
//   q_full / q_empty  the Q tile written / both consumers done with it; phases by item index:
//                each item completes one phase of each (q_landed too), with or without kv
//                blocks.
// The producer fills slot 0 in chunk order 0-3, 4-7, 8 and slot 1 in 4-7, 0-3, 8, the order in
// which the two consumers free them (ChunkAt).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PRODUCER_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PRODUCER_H_

#include <cstdint>
#include <type_traits>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_block.h"
#include "kernels/decode/mla_decode_sm90_probe.h"
#include "kernels/decode/mla_merge_device.h"
#include "kernels/decode/sm90_primitives.h"

namespace mlaps {
namespace mla {

static_assert(sizeof(MergeBook) <= SmemSm90::kBars - SmemSm90::kMergeBook &&
                  SmemSm90::kMergeBook % alignof(MergeBook) == 0,
              "the merge book fits its place");

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
// =============================================================================================
// Device code (NVIDIA device pass, and the CPU emulation of tests/kernels/emu).
// =============================================================================================

// ---- The producer: cp.async copies, then f16 conversion in shared memory --------------------

// The producer warpgroup's two halves: warps 0-1 (threads 0-63) copy raw Q and kv rows into
// shared memory with cp.async (no registers hold data in flight, so a whole slot can be in
// flight); warps 2-3 convert each landed chunk to f16 there and publish it.
//   bf16: the raw rows go straight to their swizzled f16 place (same 2 bytes an element);
//     each converter thread rewrites its own 16-byte units in place.
//   e4m3: the raw rows (64 bytes a chunk row) go to the second half of the chunk, unswizzled;
//     a converter reads its units, the converters meet at a named barrier (the f16 output of
//     rows 32-63 covers the raw rows), then write the f16 units.
#if defined(MLAPS_SM90_PROBE_PREFETCH_AHEAD)  // probe variants only
constexpr int kSm90PrefetchAhead = MLAPS_SM90_PROBE_PREFETCH_AHEAD;
#else
constexpr int kSm90PrefetchAhead = 2;  // kv blocks between a block's L2 fill and its copies
#endif
constexpr int kSm90CopyThreads = 64;
constexpr int kSm90ConvertThreads = 64;

template <bool kFp8>
struct ChunkMap {
  static constexpr int kElem = kFp8 ? 1 : 2;                        // input bytes an element
  static constexpr int kRowBytes = kDimQk * kElem;                  // a q or kv row
  static constexpr int kUnitsPerRow = kFp8 ? 4 : 8;                 // 16-byte input units a chunk
  static constexpr int kRowStep = kSm90CopyThreads / kUnitsPerRow;  // 8 (bf16) or 16 (e4m3)
  static constexpr int kRowsPerThread = 64 / kRowStep;              // 8 or 4 rows a chunk
  static constexpr int kStaging = kFp8 ? SmemSm90::kChunk / 2 : 0;  // raw rows in a chunk
};

// The ring of kv slots of a kernel on this layout: two slots of a whole tile each (block n in
// slot n % 2), or, where e4m3 blocks stay raw (kRaw: half a tile's bytes), four: slot s in tile
// s % 2, its rows at each chunk's staging half (s < 2) or first half (s >= 2), so the producer
// runs up to three blocks ahead instead of one.
template <bool kRaw>
struct KvRing {
  static constexpr int kSlots = kRaw ? SmemSm90::kRingSlots : 2;
  __device__ static int SlotOf(uint32_t n) { return static_cast<int>(n % kSlots); }
  // The phase parity of block n's full / landed barriers (its empty ones: the block kSlots
  // back's).
  __device__ static uint32_t ParityOf(uint32_t n) { return (n / kSlots) & 1; }
  // The slot's tile, from the kv region, and where its rows lie in each chunk of it.
  __device__ static int TileOf(int slot) { return (slot & 1) * SmemSm90::kTile; }
  template <bool kFp8>
  __device__ static int RowsAt(int slot) {
    return kRaw && slot >= 2 ? 0 : ChunkMap<kFp8>::kStaging;
  }
};

// Where a raw e4m3 Q tile (kRaw: not widened) starts in each chunk of the Q region; kv blocks
// stay at the staging half.
constexpr int kRawQAt = 0;

// Rows a copy thread reads (first + k * kRowStep of the tile), as row indices into Q or the kv
// cache (-1: zeros; both stay below 2^31 rows, MlaDecodeParamsError).
template <bool kFp8>
struct RowSources {
  int32_t row[ChunkMap<kFp8>::kRowsPerThread];
};

// Source rows of kv block `blk` of the item for copy thread `ctid` (tokens begin + 64 blk +
// row), -1 past e_lim or for a bad page (reported; the row reads as zeros). The page ids are
// all loaded first, without a branch (a token past e_lim reads the item's last token's id, and
// drops it), so that the loads are in flight together.
template <bool kFp8>
__device__ __forceinline__ RowSources<kFp8> KvRows(const MlaDecodeParams& p, const Item& it,
                                                   int blk, int ctid, int cu) {
  using M = ChunkMap<kFp8>;
  int64_t token[M::kRowsPerThread];
  int32_t page[M::kRowsPerThread];
#pragma unroll
  for (int k = 0; k < M::kRowsPerThread; ++k) {
    token[k] = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens + ctid / M::kUnitsPerRow +
               k * M::kRowStep;
    const int64_t read = token[k] < it.e_lim ? token[k] : it.e_lim - 1;
    page[k] = p.kv_indices[it.kv_base + (read >> it.log2_page)];
  }
  RowSources<kFp8> src;
#pragma unroll
  for (int k = 0; k < M::kRowsPerThread; ++k) {
    const int64_t j = token[k];
    src.row[k] = -1;
    if (j < it.e_lim) {
      if (page[k] < 0 || page[k] >= p.num_pages) {
        if (ctid % M::kUnitsPerRow == 0) {
          Report(p.status, kMlaBadPageId, cu, static_cast<int>(it.kv_base + (j >> it.log2_page)),
                 page[k]);
        }
      } else {
        src.row[k] = page[k] * p.page_size + static_cast<int32_t>(j & (p.page_size - 1));
      }
    }
  }
  return src;
}

// Source rows of the Q tile (rows token-major, as O; rows past it.rows are zeros).
template <bool kFp8>
__device__ __forceinline__ RowSources<kFp8> QRows(const MlaDecodeParams& p, const Item& it,
                                                  int ctid) {
  using M = ChunkMap<kFp8>;
  RowSources<kFp8> src;
#pragma unroll
  for (int k = 0; k < M::kRowsPerThread; ++k) {
    const int row = ctid / M::kUnitsPerRow + k * M::kRowStep;
    src.row[k] = row < it.rows ? static_cast<int32_t>(FinalRow(p, it, row)) : -1;
  }
  return src;
}

// Starts the L2 fill of kv block `blk` of the item: copy thread `ctid` takes token ctid and
// every 128-byte line of its row (prefetch.global.L2: one instruction a line, any page size).
template <bool kFp8>
__device__ __forceinline__ void PrefetchKvBlock(const MlaDecodeParams& p, const Item& it, int blk,
                                                int ctid) {
  using M = ChunkMap<kFp8>;
  const int64_t j = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens + ctid;
  if (j >= it.e_lim) return;
  const int32_t page = p.kv_indices[it.kv_base + (j >> it.log2_page)];
  if (page < 0 || page >= p.num_pages) return;  // reported when the block is copied
  const int64_t row = static_cast<int64_t>(page) * p.page_size + (j & (p.page_size - 1));
  const uint8_t* at = static_cast<const uint8_t*>(p.kv_cache) + row * M::kRowBytes;
  constexpr int kLines = (M::kRowBytes + 127) / 128;  // 9 (bf16) or 5 (e4m3, rows unaligned)
#pragma unroll
  for (int line = 0; line < kLines; ++line) PrefetchL2Line(at + 128 * line);
}

// Shared-memory offset of unit `unit` (0..7) of row `row` inside a swizzled chunk.
__device__ __forceinline__ uint32_t ChunkUnit(int row, int unit) {
  return row * 128 + ((unit ^ (row & 7)) << 4);
}

// Offset of 16-byte unit `unit` (0..3) of row `row` in a raw e4m3 chunk kept for fp8 wgmma
// operands (kernels that do not widen e4m3): 64-byte rows with the 64-byte swizzle (units XOR-ed
// by (row / 2) % 4), the K-major layout QGMMA reads and a TMA box with
// CU_TENSOR_MAP_SWIZZLE_64B lands.
__device__ __forceinline__ uint32_t RawUnit(int row, int unit) {
  return row * 64 + ((unit ^ ((row >> 1) & 3)) << 4);
}

// Element (row, token) of a P tile stored as 64-token K-major rows in a slot's rope chunk at
// `p_tile` (dead once S is done), 128-byte swizzled like a Q chunk: the B operand P^T of the
// transposed P V (narrow and f16 P V kernels).
__device__ __forceinline__ uint32_t PAt(uint32_t p_tile, int row, int token) {
  return p_tile + row * 128 + (((token >> 3) ^ (row & 7)) << 4) + 2 * (token & 7);
}

// Where copy thread `ctid`'s 16-byte unit of tile row `row` lies in chunk 0 of a tile (chunk c:
// c * SmemSm90::kChunk further): bf16 at its swizzled place, e4m3 in the chunk's staging half,
// or (kRaw) in 64-byte swizzled rows at `raw_at` (RawUnit).
template <bool kFp8, bool kRaw>
__device__ __forceinline__ uint32_t RowUnitAt(int row, int unit, int raw_at) {
  return !kFp8  ? ChunkUnit(row, unit)
         : kRaw ? raw_at + RawUnit(row, unit)
                : ChunkMap<kFp8>::kStaging + row * 64 + unit * 16;
}

// Copy thread `ctid`'s cp.async of the chunks at positions [pos0, pos1) (ChunkAt(slot, .)) of a
// tile at `tile` from `src` rows of `rows`: bf16 units to their swizzled place, e4m3 units to
// the chunk's staging half (kRaw: 64-byte swizzled rows at `raw_at` in the chunk, RawUnit); the
// tile's first kRows rows only. Row by row, so one source address is live at a time.
template <bool kFp8, int kRows = 64, bool kRaw = false>
__device__ __forceinline__ void CopyChunks(const uint8_t* rows, const RowSources<kFp8>& src,
                                           int slot, int pos0, int pos1, int ctid, uint8_t* tile,
                                           int raw_at = ChunkMap<kFp8>::kStaging) {
#if defined(MLAPS_SM90_PROBE_SKIP_COPY)
  if (slot >= 0) return;  // (every call: Q too)
#endif
  using M = ChunkMap<kFp8>;
  static_assert(kRows % M::kRowStep == 0 && kRows <= 64, "whole row steps of the tile");
  const int unit = ctid % M::kUnitsPerRow, row0 = ctid / M::kUnitsPerRow;
#pragma unroll
  for (int k = 0; k < kRows / M::kRowStep; ++k) {
    const int row = row0 + k * M::kRowStep;
    const bool valid = src.row[k] >= 0;
    const uint8_t* from =
        valid ? rows + static_cast<int64_t>(src.row[k]) * M::kRowBytes + unit * 16 : rows;
    uint8_t* to = tile + RowUnitAt<kFp8, kRaw>(row, unit, raw_at);
#pragma unroll
    for (int pos = pos0; pos < pos1; ++pos) {
      const int c = ChunkAt(slot, pos);
      CpAsync16(to + c * SmemSm90::kChunk, valid ? from + c * 64 * M::kElem : rows, valid);
    }
  }
}

// Copy thread `ctid`'s cp.async of a whole kv block of gathered rows (no TMA), row by row: a
// row's source and destination are computed once and its nine chunks lie at constant offsets
// from them. A producer on few registers is bound by the instructions of its copies (notes.md):
// chunk by chunk (CopyChunks) they took ~10x as many.
template <bool kFp8, bool kRaw>
__device__ __forceinline__ void CopyBlockRows(const uint8_t* rows, const RowSources<kFp8>& src,
                                              int ctid, uint8_t* tile, int raw_at) {
  using M = ChunkMap<kFp8>;
  const int unit = ctid % M::kUnitsPerRow, row0 = ctid / M::kUnitsPerRow;
#pragma unroll
  for (int k = 0; k < M::kRowsPerThread; ++k) {
    const int row = row0 + k * M::kRowStep;
    const bool valid = src.row[k] >= 0;
    const uint8_t* from =
        rows + (valid ? static_cast<int64_t>(src.row[k]) * M::kRowBytes + unit * 16 : 0);
    uint8_t* to = tile + RowUnitAt<kFp8, kRaw>(row, unit, raw_at);
#pragma unroll
    for (int c = 0; c < SmemSm90::kChunks; ++c) {
      CpAsync16(to + c * SmemSm90::kChunk, from + c * 64 * M::kElem, valid);
    }
  }
}

// Converter thread `vtid`'s part of chunk c of the tile at shared address `tile`, landed raw:
// to f16 in place (bf16; magnitudes folded into `range` for the f16 range check) or from the
// staging half (e4m3, with a barrier among the converters between reading and writing); the
// tile's first kRows rows only.
template <bool kFp8, int kRows = 64>
__device__ __forceinline__ void ConvertChunk(int c, int vtid, uint32_t tile, uint32_t& range) {
#if defined(MLAPS_SM90_PROBE_SKIP_CONVERT)
  return;
#endif
  const uint32_t chunk = tile + c * SmemSm90::kChunk;
  if (kFp8) {
    // Units (row vtid / 4 + 16 k, raw unit vtid % 4) -> f16 units 2 u and 2 u + 1 of the row.
    static_assert(kRows % 16 == 0, "whole row steps of the tile");
    const int unit = vtid % 4, row0 = vtid / 4;
    uint4 raw[4];
#pragma unroll
    for (int k = 0; k < kRows / 16; ++k) {
      raw[k] = LoadShared128(chunk + ChunkMap<true>::kStaging + (row0 + 16 * k) * 64 + unit * 16);
    }
    NamedBarrierSync(4, kSm90ConvertThreads);  // every raw unit read before any is overwritten
#pragma unroll
    for (int k = 0; k < kRows / 16; ++k) {
      const int row = row0 + 16 * k;
      const uint4 v = raw[k];
      uint4 f0, f1;
      E4m3x4ToF16x2x2(v.x, f0.x, f0.y);
      E4m3x4ToF16x2x2(v.y, f0.z, f0.w);
      E4m3x4ToF16x2x2(v.z, f1.x, f1.y);
      E4m3x4ToF16x2x2(v.w, f1.z, f1.w);
      StoreShared128(chunk + ChunkUnit(row, 2 * unit), f0);
      StoreShared128(chunk + ChunkUnit(row, 2 * unit + 1), f1);
    }
    // No barrier after the writes: the next chunk's raw units are in its own chunk, and a
    // chunk's staging half is refilled only after the consumers freed its slot, i.e. after
    // every converter published (read) it.
  } else {
    // Four units loaded before any is converted: the shared-memory latency of one load a
    // unit otherwise bounds the converters (bf16 blocks by TMA waited on them, notes.md).
    const int unit = vtid % 8, row0 = vtid / 8;
    constexpr int kBatch = kRows / 8 < 4 ? kRows / 8 : 4;
    static_assert((kRows / 8) % kBatch == 0, "whole batches of rows");
#pragma unroll 1
    for (int k0 = 0; k0 < kRows / 8; k0 += kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        v[b] = LoadShared128(chunk + ChunkUnit(row0 + 8 * (k0 + b), unit));
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        range = MaxAbsBf16x2(MaxAbsBf16x2(range, v[b].x), v[b].y);
        range = MaxAbsBf16x2(MaxAbsBf16x2(range, v[b].z), v[b].w);
        StoreShared128(chunk + ChunkUnit(row0 + 8 * (k0 + b), unit),
                       make_uint4(Bf16x2ToF16x2(v[b].x), Bf16x2ToF16x2(v[b].y),
                                  Bf16x2ToF16x2(v[b].z), Bf16x2ToF16x2(v[b].w)));
      }
    }
  }
}

// ---- The producer ----------------------------------------------------------------------------

// Whether a block is TMA-shaped: its 64 tokens all visible and inside one page (TmaRowOf without
// the page id, which costs a global load).
__device__ __forceinline__ bool TmaShaped(const MlaDecodeParams& p, const Item& it, int blk) {
  if (p.page_size < SmemSm90::kTokens) return false;
  const int64_t j0 = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens;
  return (j0 & (SmemSm90::kTokens - 1)) == 0 && j0 + SmemSm90::kTokens <= it.e_lim;
}
// The kv cache row of a block's first token when TMA can load the block (TmaShaped, and a valid
// page id), else -1 (cp.async: zeros past e_lim, bad pages reported). The same in every copy
// thread.
__device__ __forceinline__ int32_t TmaRowOf(const MlaDecodeParams& p, const Item& it, int blk) {
  if (!TmaShaped(p, it, blk)) return -1;
  const int64_t j0 = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens;
  const int32_t page = p.kv_indices[it.kv_base + (j0 >> it.log2_page)];
  if (page < 0 || page >= p.num_pages) return -1;
  return page * p.page_size + static_cast<int32_t>(j0 & (p.page_size - 1));
}

// The copy threads' part of one item: the Q tile (once both consumers released the previous
// item's, q_empty) and each kv block into slot n % 2, chunk by chunk as the consumers free the
// slot's halves (slot 0 frees chunks 0-3 with consumer 0's P V and 4-7 with consumer 1's; slot 1
// the other way round, ChunkAt; chunk 8 after both); each chunk's copies land on landed[slot][c],
// by cp.async, or (kTma) by one TMA load a chunk where the block allows it (TmaRowOf), with an
// L2 evict-first hint if kEvictFirst. kRaw (e4m3 not widened): the rows stay e4m3 in 64-byte
// swizzled rows (RawUnit), Q at each chunk's start, kv blocks in each chunk's staging half, and
// a block of gathered rows (no TMA) is copied whole once its slot is free (CopyBlockRows).
// kL2Fill: the L2 fill ahead of the cp.async blocks (PrefetchKvBlock). kChunkFree (a two-slot
// ring whose consumers free each V chunk once they read it, the bf16 f16pv kernel): chunks 0-7
// are refilled as empty_chunk[slot][c] says, chunk 8 once both halves were freed.
template <bool kFp8, int kQRows, bool kTma, bool kEvictFirst, bool kRaw = false,
          bool kL2Fill = true, bool kChunkFree = false, bool kPageIdAhead = false>
__device__ void CopyItemSm90(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu,
                             uint32_t seq, uint32_t item, int nblk, const TmaMap* kv_map) {
  using L = SmemSm90;
  const int ctid = threadIdx.x & (kSm90WgThreads - 1);
  const Sm90Bars bars{SmemAddr(smem) + L::kBars};
  const uint8_t* q_rows = static_cast<const uint8_t*>(p.q);
  const uint8_t* kv_rows = static_cast<const uint8_t*>(p.kv_cache);
  MLAPS_SM90_MARK(7, item);
  if (item > 0) MLAPS_SM90_TIMED(8, MbarWait(bars.QEmpty(), (item - 1) & 1));  // Q released
  if (nblk == 0) {
    // No Q tile for an item without kv blocks, but q_landed completes a phase for every item
    // (the converters' parity is the item's index).
    MbarArrive(bars.QLanded());
    return;
  }
  CopyChunks<kFp8, kQRows, kRaw>(q_rows, QRows<kFp8>(p, it, ctid), 0, 0, L::kChunks, ctid,
                                 smem + L::kQ, kRaw ? kRawQAt : ChunkMap<kFp8>::kStaging);
  CpAsyncArrive(bars.QLanded());
  using Ring = KvRing<kRaw>;
  // kPageIdAhead: the page id of block t + 1 is read at the start of block t, so that its global
  // load's latency passes during block t's waits instead of after its last chunk.
  int32_t next_tma_row = kTma && kPageIdAhead ? TmaRowOf(p, it, 0) : -1;
  for (int t = 0; t < nblk; ++t) {
    const uint32_t n = seq + t;
    const int slot = Ring::SlotOf(n);
    MLAPS_SM90_TRACE_AT(kTraceBlockTop, n);
    int32_t tma_row = -1;
    if constexpr (kTma && kPageIdAhead) {
      tma_row = WarpUniform(next_tma_row);
      if (t + 1 < nblk) next_tma_row = TmaRowOf(p, it, t + 1);
    } else if constexpr (kTma) {
      tma_row = WarpUniform(TmaRowOf(p, it, t));
    }
    const int rows_at = Ring::template RowsAt<kFp8>(slot);
    MLAPS_SM90_MARK(5, n);
    // The rows' page ids are read before the L2 fill below, whose own reads it waits for.
    const RowSources<kFp8> src =
        tma_row < 0 ? KvRows<kFp8>(p, it, t, ctid, cu) : RowSources<kFp8>{};
    uint8_t* tile = smem + L::kKv + Ring::TileOf(slot);
    // The L2 fill, kSm90PrefetchAhead blocks ahead, of blocks that cp.async will copy (not of
    // TMA-shaped blocks: the bf16 narrow kernel read ~45% more from DRAM with it, notes.md; one
    // with a bad page, copied as zeros, goes without it too).
    if (kL2Fill && t + kSm90PrefetchAhead < nblk &&
        (!kTma || !WarpUniform(TmaShaped(p, it, t + kSm90PrefetchAhead)))) {
      PrefetchKvBlock<kFp8>(p, it, t + kSm90PrefetchAhead, ctid);
    }
    // Positions 0-3 once their half was freed, then 4-8 (chunk 8 needs both). (A kernel whose
    // consumer reads a whole block frees both halves: the narrow fp8 one.)
    auto wait_free = [&](int pos) {
      if constexpr (kChunkFree) {
        static_assert(!kRaw && Ring::kSlots == 2, "chunk frees: the two-slot ring");
        const int c = ChunkAt(slot, pos);
        if (n >= Ring::kSlots && c < 8) {
          MLAPS_SM90_TIMED(9, MbarWait(bars.EmptyChunk(slot, c), Ring::ParityOf(n) ^ 1));
        } else if (n >= Ring::kSlots) {
          MLAPS_SM90_TIMED(9, MbarWait(bars.Empty(slot, 0), Ring::ParityOf(n) ^ 1));
          MLAPS_SM90_TIMED(9, MbarWait(bars.Empty(slot, 1), Ring::ParityOf(n) ^ 1));
        }
        return;
      }
      if (n >= Ring::kSlots && (pos == 0 || pos == 4)) {
        const int w = (pos == 0) == ((slot & 1) == 0) ? 0 : 1;
        MLAPS_SM90_MARK(6, n * 16 + pos);
        MLAPS_SM90_TIMED(9, MbarWait(bars.Empty(slot, w), Ring::ParityOf(n) ^ 1));
      }
    };
    if (kRaw && tma_row < 0) {
      // A raw ring runs three blocks ahead: the whole slot is waited for and the block copied
      // row by row (CopyBlockRows), every chunk's arrival after all of its copies. (Chunk by
      // chunk below, the fp8 f16pv producer on 24 registers ran sparse fp8 at 606 us, this
      // way at 322, notes.md.)
      wait_free(0);
      wait_free(4);
      CopyBlockRows<kFp8, kRaw>(kv_rows, src, ctid, tile, rows_at);
#pragma unroll
      for (int pos = 0; pos < L::kChunks; ++pos) {
        CpAsyncArrive(bars.Landed(slot, ChunkAt(slot, pos)));
      }
      continue;
    }
    if (tma_row < 0) {
      // A chunk's arrival (.noinc: once all of this thread's earlier copies landed) follows
      // its copies, so the converters start on chunk 0 while the later ones are in flight. (A
      // loop apart from the TMA one: one loop with the branch inside ran 7-9% slower, notes.md.)
#pragma unroll
      for (int pos = 0; pos < L::kChunks; ++pos) {
        wait_free(pos);
        CopyChunks<kFp8, 64, kRaw>(kv_rows, src, slot, pos, pos + 1, ctid, tile, rows_at);
        CpAsyncArrive(bars.Landed(slot, ChunkAt(slot, pos)));
      }
      continue;
    }
    MLAPS_SM90_TRACE_AT(kTraceCopy, n);
#pragma unroll
    for (int pos = 0; pos < L::kChunks; ++pos) {
      wait_free(pos);
      if (pos == 0) MLAPS_SM90_TRACE_AT(kTraceTma0, n);
      if (pos == 4) MLAPS_SM90_TRACE_AT(kTraceTma4, n);
      if (pos == 8) MLAPS_SM90_TRACE_AT(kTraceTma8, n);
      const int c = ChunkAt(slot, pos);
      if (ctid == 0) {
#if defined(MLAPS_SM90_PROBE_SKIP_COPY)
        MbarArrive(bars.Landed(slot, c));  // probe variants only: no kv data moves
        continue;
#endif
        constexpr uint32_t kBytes = 64 * 64 * ChunkMap<kFp8>::kElem;
        MbarArriveExpectTx(bars.Landed(slot, c), kBytes);
        TmaLoad2D<kEvictFirst>(SmemAddr(tile) + c * L::kChunk + rows_at, kv_map, 64 * c, tma_row,
                               bars.Landed(slot, c));
        if (pos == 8) MLAPS_SM90_TRACE_AT(kTraceTma8Issued, n);
      } else {
        MbarArrive(bars.Landed(slot, c));
      }
    }
  }
}

// The converter threads' part of one item: each landed chunk to f16 (kWiden; else left as it
// landed; Q's first kQRows rows), then published (full), in the copy threads' order.
template <bool kFp8, bool kWiden, int kQRows>
__device__ void ConvertItemSm90(const MlaDecodeParams& p, uint8_t* smem, int cu, uint32_t seq,
                                uint32_t item, int nblk) {
  using L = SmemSm90;
  const int vtid = (threadIdx.x & (kSm90WgThreads - 1)) - kSm90CopyThreads;
  const uint32_t base = SmemAddr(smem);
  const Sm90Bars bars{base + L::kBars};
  uint32_t range = 0;  // bf16: the largest magnitude seen (f16 range check)
  // q_full of this item only after the consumers released the previous item's Q tile: an
  // item without kv blocks loads no Q, and two of them in a row would otherwise complete
  // q_full twice ahead of the consumers, whose parity wait would then miss it (a hang).
  if (item > 0) MbarWait(bars.QEmpty(), (item - 1) & 1);
  // q_landed completes a phase for every item (the copy threads arrive without a Q for an
  // item without kv blocks): waited for every item, so that the wait of the next item's never
  // passes on this one's phase while the copy threads are behind.
  MLAPS_SM90_TIMED(10, MbarWait(bars.QLanded(), item & 1));
  if (nblk > 0) {
#pragma unroll 1
    for (int c = 0; c < L::kChunks && kWiden; ++c) {
      ConvertChunk<kFp8, kQRows>(c, vtid, base + L::kQ, range);
    }
  }
  FenceProxyAsync();  // the consumers' wgmma reads Q
  MbarArrive(bars.QFull());
  using Ring = KvRing<kFp8 && !kWiden>;
  for (int t = 0; t < nblk; ++t) {
    const uint32_t n = seq + t;
    const int slot = Ring::SlotOf(n);
#pragma unroll 1
    for (int pos = 0; pos < L::kChunks; ++pos) {
      const int c = ChunkAt(slot, pos);
      MLAPS_SM90_TIMED(11, MbarWait(bars.Landed(slot, c), Ring::ParityOf(n)));
      if (pos % 4 == 0) {
        MLAPS_SM90_TRACE_ROLE_AT(vtid == 0, kSm90TraceConverterRole,
                                 pos == 0   ? kTraceLanded0
                                 : pos == 4 ? kTraceLanded4
                                            : kTraceLanded8,
                                 n);
      }
      if (kWiden) {
        MLAPS_SM90_TIMED(12,
                         ConvertChunk<kFp8>(c, vtid, base + L::kKv + Ring::TileOf(slot), range));
      }
      MLAPS_SM90_TIMED(15, FenceProxyAsync());  // the consumers' wgmma reads the chunk
      MbarArrive(bars.Full(slot, c));
    }
  }
  if (kWiden && !kFp8 && ((range & 0x7fffu) >= 0x4780u || (range >> 16) >= 0x4780u)) {
    const uint32_t hi = range >> 16, lo = range & 0xffffu;
    Report(p.status, kMlaF16Range, cu, -1, hi > lo ? hi : lo);
  }
}

// The producer's part of one item (copy or convert, by thread). Returns the item's kv blocks.
template <bool kFp8, bool kWiden, int kQRows, bool kTma, bool kEvictFirst, bool kL2Fill,
          bool kChunkFree>
__device__ int RunProducerSm90(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu,
                               uint32_t seq, uint32_t item, const TmaMap* kv_map) {
  const int nblk = BlocksOf(it);
  if ((threadIdx.x & (kSm90WgThreads - 1)) < kSm90CopyThreads) {
    // The page id a block ahead where it was measured faster: the bf16 f16pv kernel (kChunkFree,
    // 1-2%); the narrow bf16 kernel ran 1.5% slower with it, fp8 f16pv (128,2) 1% (notes.md).
    CopyItemSm90<kFp8, kQRows, kTma, kEvictFirst, kFp8 && !kWiden, kL2Fill, kChunkFree,
                 /*kPageIdAhead=*/kChunkFree>(p, it, smem, cu, seq, item, nblk, kv_map);
  } else {
    ConvertItemSm90<kFp8, kWiden, kQRows>(p, smem, cu, seq, item, nblk);
  }
  return nblk;
}

// One block of an sm90 kernel on this layout: the mbarriers, then the item walk of each role
// around the producer (RunProducerSm90: TMA loads from `kv_map` with kTma, compiled out
// without; Q's first kMaxRows rows, the most an item of these tiles has) and the consumer routine
// `run_consumer(std::integral_constant<int, w>, item, smem, seq, items_before)` (returns the
// item's kv blocks), one instance a consumer; with kOneConsumerCode one instance for both,
// `run_consumer(w, ...)` with the warpgroup's index as a warp-uniform int (half the hot code
// for the instruction caches); kEvictFirst: the TMA loads' L2 hint, kL2Fill: the L2 fill of
// cp.async blocks (CopyItemSm90); kConsumerRegs: the consumers' setmaxnreg count; kChunkFree:
// the consumers free each V chunk of a two-slot ring on its own (CopyItemSm90).
template <bool kFp8, bool kWiden, int kMaxRows, bool kTma, bool kOneConsumerCode = false,
          bool kEvictFirst = false, int kConsumerRegs = kSm90ConsumerRegs, bool kL2Fill = true,
          bool kChunkFree = false, class RunConsumer>
__device__ __forceinline__ void RunSm90Block(const MlaDecodeParams& p, const TmaMap* kv_map,
                                             RunConsumer&& run_consumer) {
  constexpr int kProducerRegs = Sm90ProducerRegs(kConsumerRegs);
  static_assert(kConsumerRegs % 8 == 0 && kProducerRegs % 8 == 0 && kProducerRegs >= 24,
                "setmaxnreg counts are multiples of 8, at least 24");
  mlapsTriggerDependents();  // the reduce may launch (it waits for this grid: LaunchMlaReduce)
  uint8_t* smem = DynamicSmem();
  smem += (SmemSm90::kAlign - (SmemAddr(smem) & (SmemSm90::kAlign - 1))) & (SmemSm90::kAlign - 1);
  if (threadIdx.x == 0) {
    const uint32_t bars = SmemAddr(smem) + SmemSm90::kBars;
    // landed, q_landed: the copy threads' cp.async arrivals; full, q_full: the converters;
    // empty, stats, score_stats: one consumer; q_empty, row_l_full: both.
    for (int b = 0; b < SmemSm90::kNumBars; ++b) {
      const bool copy = (b >= SmemSm90::kLanded && b < SmemSm90::kEmpty) || b == SmemSm90::kQLanded;
      const bool convert = b < SmemSm90::kLanded || b == SmemSm90::kQFull;
      MbarInit(bars + 8 * b,
               copy      ? kSm90CopyThreads
               : convert ? kSm90ConvertThreads
               : b == SmemSm90::kQEmpty || (b >= SmemSm90::kRowLFull && b < SmemSm90::kScoreStats)
                   ? 2 * kSm90WgThreads
                   : kSm90WgThreads);
    }
  }
#if defined(MLAPS_SM90_PROBE_SKIP_COPY)
  // Probe variants only: no data moves, so Q and the kv slots read as zeros (finite scores and
  // O) instead of whatever the shared memory held. (With zeros the running max never moves: such
  // a run also leaves out the rescales of O.)
  for (int i = static_cast<int>(threadIdx.x); i < SmemSm90::kRowM / 16;
       i += static_cast<int>(blockDim.x)) {
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  }
  FenceProxyAsync();
#endif
  MLAPS_SM90_TIMES_BEGIN();
  __syncthreads();
  uint32_t seq = 0, item = 0;
  const int wg = WarpUniform(static_cast<int>(threadIdx.x) / kSm90WgThreads);
  if (wg == 2) {
#if !defined(MLAPS_SM90_NO_SETMAXNREG)
    SetMaxRegsDec<kProducerRegs>();
#endif
    MLAPS_SM90_MARK(8, 0);
    WalkItems</*kRecord=*/false>(p, kMaxRows, [&](const Item& it, int cu) {
      seq += RunProducerSm90<kFp8, kWiden, kMaxRows, kTma, kEvictFirst, kL2Fill, kChunkFree>(
          p, it, smem, cu, seq, item, kv_map);
      ++item;
    });
    MLAPS_SM90_MARK(9, item);
    MLAPS_SM90_TIMES_END();
  } else {
#if !defined(MLAPS_SM90_NO_SETMAXNREG)
    SetMaxRegsInc<kConsumerRegs>();
#endif
    MLAPS_SM90_MARK(8, 0);
    const bool merge = p.merge.counters != nullptr;
    MergeBook* book = reinterpret_cast<MergeBook*>(smem + SmemSm90::kMergeBook);
    const int tid = static_cast<int>(threadIdx.x);
    auto merge_sync = [] { NamedBarrierSync(kSm90MergeBarrier, 2 * kSm90WgThreads); };
    if (merge) {
      OpenMergeBook<2 * kSm90WgThreads>(p, PlanCu(p), tid, book, merge_sync);
    }
    if constexpr (kOneConsumerCode) {
      WalkItems(
          p, kMaxRows,
          [&](const Item& it, int) {
            seq += run_consumer(wg, it, smem, seq, item);
            ++item;
          },
          2 * kSm90WgThreads);
    } else if (wg == 0) {
      WalkItems(
          p, kMaxRows,
          [&](const Item& it, int) {
            seq += run_consumer(std::integral_constant<int, 0>{}, it, smem, seq, item);
            ++item;
          },
          2 * kSm90WgThreads);
    } else {
      WalkItems(
          p, kMaxRows,
          [&](const Item& it, int) {
            seq += run_consumer(std::integral_constant<int, 1>{}, it, smem, seq, item);
            ++item;
          },
          2 * kSm90WgThreads);
    }
    // With merge asked for, the block's pieces of split tiles (looked up before the walk) are
    // counted once all its items ran, and both consumers merge each tile whose count they
    // complete. After the walk, not after each piece: inside it the merge's code made ptxas
    // serialize the kernels' wgmmas (C7520); and in a plan split at CU boundaries a tile's last
    // piece ends its block's walk anyway.
    if (merge) {
      CloseMergeBook<2 * kSm90WgThreads>(p, PlanCu(p), tid, book, merge_sync);
    }
    MLAPS_SM90_MARK(9, item);
    MLAPS_SM90_TIMES_END();
  }
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PRODUCER_H_
