// The layout of one sm90 decode block that the producer (mla_decode_sm90_producer.h) and the
// consumers of every sm90 kernel share: three warpgroups (0, 1 consumers, 2 the producer) and
// their register split, the shared memory (a Q region, two kv slots of nine 64 x 64 column
// chunks, the mbarriers), the 128-byte swizzle wgmma reads, the kv tensor map's type, and the
// mbarriers by name (Sm90Bars; the handoffs they carry: mla_decode_sm90_producer.h).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BLOCK_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BLOCK_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90_probe.h"
#include "kernels/decode/sm90_primitives.h"

namespace mlaps {
namespace mla {

// ---- Shared memory of one sm90 block (host-visible: the launch sizes it) ------------------

struct SmemSm90 {
  static constexpr int kRows = 64;                // q rows of a tile
  static constexpr int kTokens = 64;              // kv tokens of a block
  static constexpr int kChunks = 9;               // 64-dim column chunks of a 576-dim row
  static constexpr int kChunk = 64 * 128;         // one chunk of 64 rows (or tokens), f16
  static constexpr int kTile = kChunks * kChunk;  // the Q tile, or one kv block
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + kTile;            // [2] kv slots
  static constexpr int kRowM = kKv + 2 * kTile;     // [64] running max (base 2) after a block
  static constexpr int kRowAlpha = kRowM + 64 * 4;  // [64] that block's rescale factor
  static constexpr int kRowL = kRowAlpha + 64 * 4;  // [item % 2][consumer][64] row sums
  static constexpr int kPvAlpha = kRowL + 2 * 2 * 64 * 4;        // [block % 4][64] rescale factors
  static constexpr int kPvMoved = kPvAlpha + 4 * 64 * 4;         // [block % 4][warp]: any moved
  static constexpr int kMergeBook = kPvMoved + 4 * 4 * 4;        // MergeBook (mla_merge_device.h)
  static constexpr int kBars = kMergeBook + 768;                 // mbarriers, 8 bytes each:
  static constexpr int kRingSlots = 4;                           // the most a ring has (KvRing)
  static constexpr int kFull = 0;                                //   [4 slots][9 chunks]
  static constexpr int kLanded = kFull + kRingSlots * kChunks;   //   [4 slots][9 chunks]
  static constexpr int kEmpty = kLanded + kRingSlots * kChunks;  //   [4 slots][2 consumers]
  static constexpr int kQLanded = kEmpty + 2 * kRingSlots;
  static constexpr int kQFull = kQLanded + 1;
  static constexpr int kQEmpty = kQFull + 1;
  static constexpr int kStats = kQEmpty + 1;
  static constexpr int kRowLFull = kStats + 1;         //   [item % 2]: both consumers' row sums
  static constexpr int kScoreStats = kRowLFull + 2;    // [block % 2]: f16pv, P and stats out
  static constexpr int kEmptyChunk = kScoreStats + 2;  // [2 slots][8 chunks]: bf16 f16pv, a V
                                                       // chunk read (CopyItemSm90's kChunkFree)
  static constexpr int kNumBars = kEmptyChunk + 2 * 8;
  static constexpr int kUsed = kBars + kNumBars * 8;
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes chunk bases on that
  // grid: the dynamic shared memory base is rounded up to it.
  static constexpr int kAlign = 1024;
  static constexpr int kBytes = kUsed + kAlign;
};
static_assert(SmemSm90::kBytes <= 227 * 1024, "sm90 layout fits an H100/H200 block");
static_assert(SmemSm90::kKv % 1024 == 0 && SmemSm90::kTile % 1024 == 0 &&
                  SmemSm90::kChunk % 1024 == 0,
              "swizzled chunk bases on the 1024-byte grid");

// A 2-D TMA tensor map (the 128 bytes of a CUtensorMap) over the kv cache as rows of 576
// elements (bf16, or e4m3 as bytes), boxes of 64 x 64 (bf16 with the 128-byte swizzle: one
// chunk of a tile as wgmma reads it; e4m3 plain: a chunk's staging half, or 64-byte swizzled
// where the kernel keeps e4m3 raw: KvMapSwizzleBytes). Kernels take it as a __grid_constant__
// parameter.
struct alignas(64) TmaMap {
  uint64_t words[16];
};
// The swizzle of the kv map's boxes in bytes of a box row (0: none) for a kernel on this
// layout: bf16 128; e4m3 widened by the producer 0; e4m3 kept raw for fp8 wgmma operands 64.
constexpr int KvMapSwizzleBytes(bool fp8, bool raw_e4m3) { return !fp8 ? 128 : raw_e4m3 ? 64 : 0; }
// A kernel parameter read in place from the parameter space (TmaMap arguments).
#if defined(__CUDACC__)
#define MLAPS_GRID_CONSTANT __grid_constant__
#else
#define MLAPS_GRID_CONSTANT
#endif

constexpr int kSm90Threads = 384;  // warpgroups 0, 1: consumers; 2: producer
constexpr int kSm90WgThreads = 128;
// The named barrier of both consumers around a merge (mla_merge_device.h); the kernels' others:
// 1 (bf16 hi + lo, the block), 2 + w (one consumer), 4 (the converters).
constexpr int kSm90MergeBarrier = 5;
// Registers per thread after setmaxnreg. The launch gives every thread the launch bounds' cap,
// 168 (65536 / 384, rounded down to 8), and setmaxnreg.inc takes from what the producer's
// .dec returns to the block's pool: a split above 3 x 168 leaves a consumer waiting forever
// (seen on the H200). Consumers hold half of O (128) + S (32) + addressing; a kernel may ask for
// more (RunSm90Block's kConsumerRegs), the producer keeping the rest.
constexpr int kSm90EntryRegs = 65536 / kSm90Threads / 8 * 8;
#if defined(MLAPS_SM90_PROBE_CONSUMER_REGS)  // probe variants only
constexpr int kSm90ConsumerRegs = MLAPS_SM90_PROBE_CONSUMER_REGS;
#else
constexpr int kSm90ConsumerRegs = 224;
#endif
__host__ __device__ constexpr int Sm90ProducerRegs(int consumer_regs) {
  return 3 * kSm90EntryRegs - 2 * consumer_regs;
}

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

// ---- Layouts -------------------------------------------------------------------------------

// Byte offset of 16-byte unit `unit` (f16 dims 8 unit .. 8 unit + 7) of row `row` in a
// swizzled tile whose column chunks are `chunk` bytes apart.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int unit, int chunk) {
  return (unit >> 3) * chunk + row * 128 + (((unit & 7) ^ (row & 7)) << 4);
}

// The chunk that slot s produces (and S reads) at position p: even slots in order, odd ones
// with the halves swapped (its block's owner frees 4-7 first), chunk 8 last in both.
__device__ __forceinline__ int ChunkAt(int slot, int p) {
  return (slot & 1) == 0 || p == 8 ? p : p < 4 ? p + 4 : p - 4;
}

// ---- Barriers and blocks ---------------------------------------------------------------------

struct Sm90Bars {
  uint32_t base;
  __device__ uint32_t Full(int slot, int c) const {
    return base + 8 * (SmemSm90::kFull + slot * SmemSm90::kChunks + c);
  }
  __device__ uint32_t Landed(int slot, int c) const {
    return base + 8 * (SmemSm90::kLanded + slot * SmemSm90::kChunks + c);
  }
  __device__ uint32_t Empty(int slot, int w) const {
    return base + 8 * (SmemSm90::kEmpty + slot * 2 + w);
  }
  __device__ uint32_t QLanded() const { return base + 8 * SmemSm90::kQLanded; }
  __device__ uint32_t QFull() const { return base + 8 * SmemSm90::kQFull; }
  __device__ uint32_t QEmpty() const { return base + 8 * SmemSm90::kQEmpty; }
  __device__ uint32_t Stats() const { return base + 8 * SmemSm90::kStats; }
  __device__ uint32_t RowLFull(uint32_t item) const {
    return base + 8 * (SmemSm90::kRowLFull + (item & 1));
  }
  __device__ uint32_t ScoreStats(uint32_t n) const {
    return base + 8 * (SmemSm90::kScoreStats + (n & 1));
  }
  // Chunk c (0-7) of slot `slot` (0, 1) read by its consumer (kChunkFree kernels).
  __device__ uint32_t EmptyChunk(int slot, int c) const {
    return base + 8 * (SmemSm90::kEmptyChunk + slot * 8 + c);
  }
};

// The blocks of an item: (e_lim - begin) / 64 rounded up, the same in every thread.
__device__ __forceinline__ int BlocksOf(const Item& it) {
  const int64_t span = it.e_lim - it.begin;
  return WarpUniform(span > 0 ? static_cast<int>((span + SmemSm90::kTokens - 1) / SmemSm90::kTokens)
                              : 0);
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BLOCK_H_
