// Raw e4m3 kv rows as operands of the sm90 decode kernels that keep fp8 unwidened (the narrow
// kernel, mla_decode_sm90_narrow.h, and the 64-row f16 P V kernel, mla_decode_sm90_f16pv.h):
// the 64-byte swizzled rows the producer lands (RawUnit, mla_decode_sm90_producer.h), read by
// QGMMA for S as they are, and V^T widened to f16 in registers as the register A operand of
// the transposed P V, O^T += V^T P^T (wgmma m64nNk16 f16, N the tile's q rows).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_RAW_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_RAW_H_

#include <cstdint>

#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_producer.h"
#include "kernels/decode/sm90_primitives.h"

namespace mlaps {
namespace mla {

// Raw e4m3 rows (RawUnit layout, rows of 64 bytes: 8 rows a 512-byte atom): the stride of
// the 8-row groups of a QGMMA operand over them.
constexpr uint32_t kRawAtom = 8 * 64;

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

// Where the raw rows of ring slot `slot` (KvRing<true>: four slots of half a tile) lie.
__device__ __forceinline__ uint32_t RawRows(uint32_t base, int slot) {
  using Ring = KvRing<true>;
  return base + SmemSm90::kKv + Ring::TileOf(slot) + Ring::RowsAt<true>(slot);
}

// Element (q row, K column) of a P^T tile whose 8-row groups (1 KB each, 128-byte swizzled like
// PAt's) lie a chunk apart from `p_tile` on: the B operand of the P V on register A, placed in
// the Q region's bytes that the raw Q tile leaves free (each kernel's RawPTile).
__device__ __forceinline__ uint32_t RawPAt(uint32_t p_tile, int row, int column) {
  return PAt(p_tile + (row >> 3) * SmemSm90::kChunk, row & 7, column);
}

// P V on register A: the wgmma row (M index) r of dims tile m of a consumer's 256 dims is its
// dim VtDim(m, r); the K column c (0..15) of k step kk is token 16 kk + c of the block, so P^T
// is stored in token order (a thread's two adjacent scores are one 32-bit store). A thread
// (warp wp, lane l) holds rows 16 wp + l / 4 (+ 8) and columns 2 (l % 4) (+ 1, + 8, + 9): its
// dims of all four tiles are the 8 bytes at 64 wp + 8 (l / 4) of a token row, and O^T rows land
// at their dims in the epilogues.
__device__ __forceinline__ int VtDim(int m, int r) {
  return 64 * (r >> 4) + 8 * (r & 7) + 2 * m + ((r >> 3) & 1);
}

// The register A operands of k step kk of the four dims tiles of 256 dims whose raw rows are
// the four chunks from `half_rows` (VtDim order, K columns the step's tokens): the thread's 8
// bytes of four token rows (LoadVtStep), two rows' bytes paired (prmt) and widened exactly to f16
// pairs (every e4m3 is an f16; WidenVtRows). Apart, so that a caller can load a step's bytes
// ahead. (A load's four lanes of a row group read token rows 2 q + e, q = l % 4, all of one
// parity: one half of the banks, 256 bytes in four wavefronts where two would do. Lanes q >= 2
// loading their odd row first spread them, but the per-lane pairing selectors that undo it cost
// ptxas registers and measured 3-5% slower: notes.md, session 20.)
__device__ __forceinline__ void LoadVtStep(uint32_t half_rows, int kk, int wtid, uint2 (&rows)[4]) {
  const int warp = wtid >> 5, g = (wtid & 31) >> 2, q = wtid & 3;
  const uint32_t chunk = half_rows + warp * SmemSm90::kChunk;
#pragma unroll
  for (int f = 0; f < 2; ++f) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int token = 16 * kk + 8 * f + 2 * q + e;  // K column 8 f + 2 q + e
      rows[2 * f + e] = LoadShared64(chunk + RawUnit(token, g >> 1) + 8 * (g & 1));
    }
  }
}
__device__ __forceinline__ void WidenVtRows(const uint2 (&rows)[4], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    // Bytes j of the two rows -> dim 8 g + j's pair: A register (j & 1) + 2 f of tile j / 2.
    const uint2 r0 = rows[2 * f], r1 = rows[2 * f + 1];
    uint32_t pair[4];
    pair[0] = PermuteBytes(r0.x, r1.x, 0x5140);
    pair[1] = PermuteBytes(r0.x, r1.x, 0x7362);
    pair[2] = PermuteBytes(r0.y, r1.y, 0x5140);
    pair[3] = PermuteBytes(r0.y, r1.y, 0x7362);
#pragma unroll
    for (int q = 0; q < 4; ++q) E4m3x4ToF16x2x2(pair[q], a[q][2 * f], a[q][2 * f + 1]);
  }
}
__device__ __forceinline__ void WidenVtStep(uint32_t half_rows, int kk, int wtid,
                                            uint32_t (&a)[4][4]) {
  uint2 rows[4];
  LoadVtStep(half_rows, kk, wtid, rows);
  WidenVtRows(rows, a);
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_RAW_H_
