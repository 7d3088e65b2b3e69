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
#include "kernels/decode/mla_reduce_device.h"

namespace mlaps {
namespace mla {

// Threads a row while a decode block merges: 16 hold 8 float4 of a 512-wide row each, so a
// piece's row is 8 loads a thread, all in flight at once.
constexpr int kMergeLanes = 16;

// What the counting thread learns of item `it`'s split tile k (found by the block's scan):
// its pieces' entries [p0, p0 + n) of reduce_partial_map, or why the plan has no tile for it
// (code != kMlaOk; index, value: the status word's).
struct MergeTile {
  int64_t p0 = 0;
  int n = 0;
  int code = kMlaOk;
  int index = -1;
  int64_t value = 0;
};

// Split tile k (-1: none had the item's q tokens) as item `it`'s tile, every entry read checked
// as the reduce kernel checks it: its pieces must include the item's partial rows.
__device__ inline MergeTile CheckMergeTile(const MlaDecodeParams& p, const Item& it, int k) {
  const MlaSplitMerge& m = p.merge;
  MergeTile t;
  t.code = kMlaBadMergePiece;
  t.value = it.partial;
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
    if (bad < 0 && (loc < 0 || int64_t{loc} + it.tokens > p.partial_rows_capacity)) bad = j;
    mine = mine || loc == it.partial;
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

// After item `it` wrote its piece of a split tile: the piece is counted on its tile's counter
// and the block whose count completes the tile merges the tile's rows into final O / LSE (and
// sets the counter back to 0 for the next launch). Run by the kThreads threads that wrote the
// piece (`tid`: this thread's index among them), which `sync()` brings together; `shared_pair`:
// 2 x 4 int32 of the block's shared memory, set up by MergeSharedInit before the walk (each call
// leaves them so); `call`: the block's count of calls so far. The tile is found by all threads at
// once (each compares some of reduce_final_map's entries with the item's q tokens: one round of
// loads, where a bisection would be a chain of them, and the map need not be sorted: kv lanes order
// it lane-major). Release / acquire: every thread fences its own partial writes before the first
// barrier; the counting thread fences after it learns the tile is complete, before the barrier
// past which the block reads the other blocks' pieces.
template <int kThreads, class Sync>
__device__ __forceinline__ void MergeIfLastPiece(const MlaDecodeParams& p, const Item& it, int cu,
                                                 int tid, int* shared_pair, uint32_t call,
                                                 Sync&& sync) {
  static_assert(kThreads % kMergeLanes == 0, "whole rows a pass");
  const MlaSplitMerge& m = p.merge;
  // Calls alternate between two sets of words, so that no word is written by one call while
  // a thread may still read it from the call before (two barriers apart, not one).
  int* shared = shared_pair + 4 * (call & 1);
  volatile int* tile_at = shared;  // [0] the tile, [1] merge here, [2] p0, [3] pieces
  int tiles =
      m.num_reduce_tiles_device != nullptr ? *m.num_reduce_tiles_device : m.num_reduce_tiles;
  tiles = tiles < 0 ? 0 : tiles > m.reduce_tiles_capacity ? m.reduce_tiles_capacity : tiles;
  const int64_t qs =
      int64_t{p.qo_indptr[it.b]} * p.head_fold + int64_t{it.g} * it.qlen + it.first_token;
  for (int k = tid; k < tiles; k += kThreads) {
    if (m.reduce_final_map[2 * k] == qs && m.reduce_final_map[2 * k + 1] == qs + it.tokens) {
      atomicMax(shared, k);  // a bad plan's duplicates: the last, the same in every run
    }
  }
  __threadfence();  // this thread's partial writes, before the count (release)
  sync();
  if (tid == 0) {
    const MergeTile t = CheckMergeTile(p, it, tile_at[0]);
    bool last = false;
    if (t.code != kMlaOk) {
      Report(p.status, t.code, cu, t.index, t.value);
    } else {
      const int k = tile_at[0];
      const int before = atomicAdd(m.counters + k, 1);
      last = before == t.n - 1;
      if (before >= t.n) Report(p.status, kMlaBadMergePiece, cu, k, before);
      if (last) atomicExch(m.counters + k, 0);
      __threadfence();
    }
    tile_at[1] = last ? 1 : 0;
    tile_at[2] = static_cast<int>(t.p0);
    tile_at[3] = t.n;
    // The next call's scan starts from -1 (only this thread read the tile past the barrier
    // above; the others write the next one only past the barrier below).
    tile_at[0] = -1;
  }
  sync();
  const bool last = tile_at[1] != 0;
  const int p0 = tile_at[2], n = tile_at[3];
  if (!last) return;
  MergeRows<kMergeLanes, kThreads>(p, m.reduce_partial_map + p0, n, it.rows,
                                   p.num_heads / p.head_fold, FinalRow(p, it, 0), tid, 0, 1);
}

// MergeIfLastPiece's shared words, set by one thread before a barrier that precedes the walk.
__device__ __forceinline__ void MergeSharedInit(int* shared_pair) {
  shared_pair[0] = -1;
  shared_pair[4] = -1;
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_MERGE_DEVICE_H_
