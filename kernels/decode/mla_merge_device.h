// The decode's own merge of split tiles (MlaDecodeParams::merge, contract: mla_decode.h): the
// block that completes the last piece of a split tile merges the tile's pieces into final O and
// LSE with the reduce kernel's arithmetic (MergeRow: the same bits), so the tile needs no reduce
// launch. Why: a separate reduce costs a launch and a pass over every partial after the decode
// has drained (9-17 us after a 30-60 us decode at b = 32 ctx 1024, notes.md); merged here, a
// tile's merge runs while other blocks still decode.
#ifndef MLAPS_KERNELS_DECODE_MLA_MERGE_DEVICE_H_
#define MLAPS_KERNELS_DECODE_MLA_MERGE_DEVICE_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_merge_rows_device.h"

namespace mlaps {
namespace mla {

// Threads a row while a decode block merges: 16 hold 8 float4 of a 512-wide row each, so a
// piece's row is 8 loads a thread, all in flight at once.
constexpr int kMergeLanes = 16;

// What the checking thread learns of a piece's split tile k (found by the block's scan):
// its pieces' entries [p0, p0 + n) of reduce_partial_map, or why the plan has no tile for it
// (code != kMlaOk; index, value: the status word's).
struct MergeTile {
  int64_t p0 = 0;
  int n = 0;
  int code = kMlaOk;
  int index = -1;
  int64_t value = 0;
};

// Split tile k (-1: none had the piece's q tokens) as the tile of the piece at partial rows
// `partial` (`tokens` q tokens), every entry read checked as the reduce kernel checks it: its
// pieces must include the piece's partial rows.
__device__ inline MergeTile CheckMergeTile(const MlaDecodeParams& p, int partial, int tokens,
                                           int k) {
  const MlaSplitMerge& m = p.merge;
  MergeTile t;
  t.code = kMlaBadMergePiece;
  t.value = partial;
  if (k < 0) return t;
  t.index = k;
  const int64_t p0 = m.reduce_indptr[k], p1 = m.reduce_indptr[k + 1];
  if (p0 < 0 || p1 <= p0 || p1 > m.reduce_partial_map_capacity) {
    t.code = kMlaBadReduceIndptr;
    t.value = p1;
    return t;
  }
  // Every entry loaded before any is judged (no early exit: the loads overlap).
  bool mine = false;
  int64_t bad = -1;
  for (int64_t j = p0; j < p1; ++j) {
    const int32_t loc = m.reduce_partial_map[j];
    if (bad < 0 && (loc < 0 || int64_t{loc} + tokens > p.partial_rows_capacity)) bad = j;
    mine = mine || loc == partial;
  }
  if (bad >= 0) {
    t.code = kMlaBadReducePartial;
    t.index = static_cast<int>(bad);
    t.value = m.reduce_partial_map[bad];
    return t;
  }
  if (!mine) return t;
  t.p0 = p0;
  t.n = static_cast<int>(p1 - p0);
  t.code = kMlaOk;
  return t;
}

// ---- A block's pieces: looked up before its walk, counted at once after it ------------------
//
// Counting and merging piece by piece after the walk (the tile's scan, its piece list, the count,
// then the merge, for every piece) was a chain of memory round trips at each block's end: 5-30
// us over the decode on the H200 at b = 32 ctx 1024 (notes.md, session 25). The book moves the
// lookups before the walk (the consumers wait for the first Q tile there anyway) and counts every
// piece of the block at once after it: one fence, one barrier, one round of atomics, one
// barrier, then the merges. A block whose pieces the book cannot hold goes through the same
// steps one piece at a time after its walk.

constexpr int kMergeMaxPieces = 8;  // pieces of a block the book holds (more: one at a time)
constexpr int kMergeBookLocs = 8;   // a tile's piece list kept in the book (more: read from memory)
// Pieces a merging thread loads at once (MergeRow's kAtOnce): one block merges a whole tile, so
// more bytes in flight than the reduce kernel's two (its blocks share a tile eight ways).
constexpr int kMergeAtOnce = 4;

// One piece of the block: its split tile, what the merge reads and where it writes.
struct MergePiece {
  int32_t k;                     // the split tile (-1: none has the piece's q tokens)
  int32_t code;                  // kMlaOk, or why the plan cannot merge it (with index and value)
  int32_t index;                 //
  int32_t p0, n;                 // the tile's entries of reduce_partial_map
  int32_t rows;                  // the tile's rows (q tokens x H / r)
  int32_t qs, qe;                // its folded q tokens
  int32_t partial;               // the piece's first partial row
  int32_t merge;                 // 1: this block completes the tile
  int32_t locs[kMergeBookLocs];  // the tile's pieces' partial rows (n <= kMergeBookLocs)
  int64_t out_row0;              // O / LSE row of the tile's first row
  int64_t value;                 //
};
struct MergeBook {
  int32_t pieces;  // the entries in use; -1: the block's pieces one at a time after its walk
  int32_t pad[3];
  MergePiece piece[kMergeMaxPieces];
};

// Entry `e` for the work item of `info` (its first four words), a piece: where its tile's rows
// are, as DecodeItem finds them (a bad item: code set, reported, never counted).
__device__ inline void BookPiece(const MlaDecodeParams& p, const int32_t (&info)[4],
                                 MergePiece& e) {
  e.k = -1;
  e.code = kMlaOk;
  e.index = -1;
  e.partial = info[1];
  e.qs = info[2];
  e.qe = info[3];
  e.merge = 0;
  e.value = info[1];
  const int r = p.head_fold, v = info[0], hpg = p.num_heads / p.head_fold;
  bool ok = v >= 0 && v < p.num_requests * r;
  if (ok) {
    const int b = v / r, g = v % r;
    const int64_t qo0 = p.qo_indptr[b], qo1 = p.qo_indptr[b + 1];
    const int64_t fqo = qo0 * r + int64_t{g} * (qo1 - qo0);
    ok = qo0 >= 0 && qo1 >= qo0 && qo1 <= p.num_q_tokens && e.qs >= fqo && e.qe > e.qs &&
         e.qe <= fqo + (qo1 - qo0) && int64_t{e.qe - e.qs} * hpg <= kTileRows;
    e.rows = (e.qe - e.qs) * hpg;
    e.out_row0 = (qo0 + (e.qs - fqo)) * p.num_heads + int64_t{g} * hpg;
  }
  if (!ok) e.code = kMlaBadMergePiece;
}

// The split tile of each of the book's entries (filled before a barrier): a scan of
// reduce_final_map by all threads (kv lanes order it lane-major: no order is assumed), then the
// tile's piece list checked (and kept) by the entry's thread, whose entry it stays until the
// next barrier.
template <int kThreads, class Sync>
__device__ __forceinline__ void FindMergeTiles(const MlaDecodeParams& p, int tid, MergeBook* book,
                                               Sync&& sync) {
  const MlaSplitMerge& m = p.merge;
  const int pieces = book->pieces;
  if (pieces <= 0) return;
  int tiles =
      m.num_reduce_tiles_device != nullptr ? *m.num_reduce_tiles_device : m.num_reduce_tiles;
  tiles = tiles < 0 ? 0 : tiles > m.reduce_tiles_capacity ? m.reduce_tiles_capacity : tiles;
  for (int k = tid; k < tiles; k += kThreads) {
    const int32_t qs = m.reduce_final_map[2 * k], qe = m.reduce_final_map[2 * k + 1];
    for (int j = 0; j < pieces; ++j) {
      // A bad plan's duplicates: the last tile, the same in every run.
      if (book->piece[j].qs == qs && book->piece[j].qe == qe) atomicMax(&book->piece[j].k, k);
    }
  }
  sync();
  if (tid < pieces) {
    MergePiece& e = book->piece[tid];
    if (e.code == kMlaOk) {
      const MergeTile t = CheckMergeTile(p, e.partial, e.qe - e.qs, e.k);
      e.code = t.code;
      e.index = t.index;
      e.value = t.value;
      e.p0 = static_cast<int32_t>(t.p0);
      e.n = t.n;
      for (int j = 0; j < t.n && j < kMergeBookLocs; ++j)
        e.locs[j] = m.reduce_partial_map[t.p0 + j];
    }
  }
}

// The book's pieces (their partial rows written by these threads) counted on their tiles'
// counters at once, a thread a piece; then the block merges each tile whose count it completed
// and sets its counter back to 0. Release / acquire: every thread fences its own partial writes
// before the first barrier; a counting thread fences once its tile is complete, before the
// barrier past which the block reads the other blocks' pieces.
template <int kThreads, class Sync>
__device__ __forceinline__ void CountAndMerge(const MlaDecodeParams& p, int cu, int tid,
                                              MergeBook* book, Sync&& sync) {
  const int pieces = book->pieces;
  __threadfence();
  sync();
  if (tid < pieces) {
    MergePiece& e = book->piece[tid];
    int merge = 0;
    if (e.code != kMlaOk) {
      Report(p.status, e.code, cu, e.index, e.value);
    } else {
      const int before = atomicAdd(p.merge.counters + e.k, 1);
      merge = before == e.n - 1;
      if (before >= e.n) Report(p.status, kMlaBadMergePiece, cu, e.k, before);
      if (merge) atomicExch(p.merge.counters + e.k, 0);
      __threadfence();
    }
    e.merge = merge;
  }
  sync();
  const int hg = p.num_heads / p.head_fold;
  for (int j = 0; j < pieces; ++j) {
    const MergePiece& e = book->piece[j];
    if (e.merge == 0) continue;
    const int32_t* locs = e.n <= kMergeBookLocs ? e.locs : p.merge.reduce_partial_map + e.p0;
    MergeRows<kMergeLanes, kThreads, kMergeAtOnce>(p, locs, e.n, e.rows, hg, e.out_row0, tid, 0, 1);
  }
}

// Before the walk, by the kThreads threads of the merge (`sync`: their barrier; `cu`: the
// block's plan CU, PlanCu): the block's items read by the lanes of the first warp, its pieces
// booked and their tiles found. A block of more items than a warp has lanes, or of more than
// kMergeMaxPieces pieces, books nothing (pieces = -1).
template <int kThreads, class Sync>
__device__ __forceinline__ void OpenMergeBook(const MlaDecodeParams& p, int cu, int tid,
                                              MergeBook* book, Sync&& sync) {
  if (tid < warpSize) {
    const int64_t w0 = p.work_indptr[cu], w1 = p.work_indptr[cu + 1];
    const bool walkable = w0 >= 0 && w1 >= w0 && w1 <= p.work_info_capacity;
    int32_t info[4] = {-1, -1, 0, 0};
    if (walkable && tid < w1 - w0) {
#pragma unroll
      for (int k = 0; k < 4; ++k) info[k] = p.work_info[(w0 + tid) * 8 + k];
    }
    const bool piece = info[1] >= 0;
    const unsigned long long pieces = __ballot64(piece);
    const int count = __popcll(pieces);
    const bool booked = walkable && w1 - w0 <= warpSize && count <= kMergeMaxPieces;
    if (tid == 0) book->pieces = booked ? count : -1;
    if (booked && piece) BookPiece(p, info, book->piece[__popcll(pieces & ((1ull << tid) - 1))]);
  }
  sync();
  FindMergeTiles<kThreads>(p, tid, book, sync);
}

// After the walk, by the same threads: the booked pieces counted and merged (CountAndMerge);
// a block that booked nothing takes its pieces one at a time through the same steps.
template <int kThreads, class Sync>
__device__ __forceinline__ void CloseMergeBook(const MlaDecodeParams& p, int cu, int tid,
                                               MergeBook* book, Sync&& sync) {
  if (book->pieces >= 0) {
    CountAndMerge<kThreads>(p, cu, tid, book, sync);
    return;
  }
  const int64_t w0 = p.work_indptr[cu], w1 = p.work_indptr[cu + 1];
  if (w0 < 0 || w1 < w0 || w1 > p.work_info_capacity) return;  // the walk reported it
  for (int64_t w = w0; w < w1; ++w) {
    if (p.work_info[w * 8 + 1] < 0) continue;  // not a piece (the same in every thread)
    sync();                                    // every thread done with the previous piece's entry
    if (tid == 0) {
      int32_t info[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) info[k] = p.work_info[w * 8 + k];
      BookPiece(p, info, book->piece[0]);
      book->pieces = 1;
    }
    sync();
    FindMergeTiles<kThreads>(p, tid, book, sync);
    CountAndMerge<kThreads>(p, cu, tid, book, sync);
  }
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_MERGE_DEVICE_H_
