// Hopper (sm_90a) path of the persistent MLA decode for bf16 inputs: warpgroup MMAs (wgmma) on
// bf16 operands in shared memory, kv blocks landing on mbarriers, two warpgroups with
// different roles and no block-wide barrier inside a work item. The launcher runs it for bf16
// launches (mla_decode_sm90.h's f16-tile kernel, which converts bf16 in shared memory, measured
// slower for bf16; it runs the fp8 launches). Contract: mla_decode.h; execution model:
// sim/executor.h; primitives: sm90_primitives.h; measurements: notes.md.
//
// One block of two warpgroups per SM runs 64-row tiles of bf16 inputs (the registry's sm90
// tiles; rows past the tile's are zero and never stored). Shared memory (SmemSm90) holds the
// Q tile for the whole item and a ring of four 32-token kv blocks, both in the 128-byte
// swizzled layout wgmma reads (a tile of R rows x 576 dims is 9 column chunks of R x 64
// elements; row r of a chunk at 128 r bytes, its 16-byte units XOR-ed by r % 8). One kv
// tile serves both products: K-major B of S = Q K^T and MN-major (transposed) B of P V, V
// being the first 512 dims of the same rows.
//
// Per kv block i:
//   warpgroup 0 (softmax): S = Q K_i^T (36 x wgmma m64n32k16), mask, online softmax in
//     registers, P (64 x 32) as bf16 hi + lo parts (one bf16 rounding of P fails the
//     elementwise gate, notes.md) and the rows' rescale factors to shared memory, then
//     O[:, 0:256] += P V_i[:, 0:256] (4 x wgmma m64n256k16) and on to block i+1;
//   warpgroup 1 (loader): rescales O[:, 256:512] and adds P V_i[:, 256:512] once P is
//     published, and copies block i+3 into the slot block i-1 has left (cp.async, any page
//     size, completing on the slot's mbarrier).
// So S of block i+1 and the softmax overlap warpgroup 1's P V, and three blocks are in
// flight while one is computed. mbarriers order everything: full[slot] (block landed),
// p_ready[i % 2] (P, lo part and rescale factors of block i published), pv1_done[i % 2]
// (warpgroup 1's P V of block i done: its P lo buffer may be rewritten).
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BF16_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BF16_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_merge_device.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/decode/sm90_softmax.h"

namespace mlaps {
namespace mla {
namespace sm90_bf16 {

// ---- Shared memory of one sm90 block (host-visible: the launch sizes it) ------------------

struct SmemSm90 {
  static constexpr int kRows = 64;                // q rows of a tile
  static constexpr int kTokens = 32;              // kv tokens of a block
  static constexpr int kSlots = 4;                // kv ring
  static constexpr int kQChunk = kRows * 128;     // one 64-dim column chunk of Q
  static constexpr int kKvChunk = kTokens * 128;  // ... of a kv block
  static constexpr int kKvSlot = 9 * kKvChunk;    // 576 dims
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + 9 * kQChunk;
  static constexpr int kPLo = kKv + kSlots * kKvSlot;  // [2] P lo, 64 x 32 bf16 each
  static constexpr int kPBytes = kRows * kTokens * 2;
  static constexpr int kAlpha = kPLo + 2 * kPBytes;     // [2][64] fp32 rescale factors
  static constexpr int kRowM = kAlpha + 2 * kRows * 4;  // [64] final running max (base 2)
  static constexpr int kRowL = kRowM + kRows * 4;       // [64] final row sum
  static constexpr int kMergeBook = kRowL + kRows * 4;  // MergeBook (mla_merge_device.h)
  static constexpr int kBars = kMergeBook + 768;        // mbarriers, 8 bytes each:
  static constexpr int kFull = 0;                       //   [kSlots] slot landed
  static constexpr int kPReady = kFull + kSlots;        //   [2] P of block i % 2 published
  static constexpr int kPv1Done = kPReady + 2;          //   [2] warpgroup 1's P V done
  static constexpr int kNumBars = kPv1Done + 2;
  static constexpr int kUsed = kBars + kNumBars * 8;
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes chunk bases on that
  // grid: the dynamic shared memory base is rounded up to it.
  static constexpr int kAlign = 1024;
  static constexpr int kBytes = kUsed + kAlign;
};
static_assert(SmemSm90::kBytes <= 227 * 1024, "sm90 layout fits an H100/H200 block");
static_assert(sizeof(MergeBook) <= SmemSm90::kBars - SmemSm90::kMergeBook &&
                  SmemSm90::kMergeBook % alignof(MergeBook) == 0,
              "the merge book fits its place");
static_assert(SmemSm90::kKv % 1024 == 0 && SmemSm90::kKvSlot % 1024 == 0 &&
                  SmemSm90::kKvChunk % 1024 == 0 && SmemSm90::kPLo % 1024 == 0,
              "swizzled chunk bases on the 1024-byte grid");

constexpr int kSm90Threads = 256;  // warpgroup 0: softmax, warpgroup 1: loader
constexpr int kSm90WgThreads = 128;

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
// =============================================================================================
// Device code (NVIDIA device pass, and the CPU emulation of tests/kernels/emu).
// =============================================================================================

// ---- Layouts -------------------------------------------------------------------------------

// Byte offset of 16-byte unit `unit` (dims 8 unit .. 8 unit + 7) of row `row` in a swizzled
// tile whose column chunks are `chunk` bytes apart.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int unit, int chunk) {
  return (unit >> 3) * chunk + row * 128 + (((unit & 7) ^ (row & 7)) << 4);
}

// P tiles (64 rows x 32 tokens, K-major, no swizzle): 8 x 8 core matrices of 128 bytes,
// 128 bytes apart along the tokens (lbo) and 512 apart along the rows (sbo).
constexpr uint32_t kPLbo = 128, kPSbo = 512;
__device__ __forceinline__ uint32_t POffset(int row, int token) {
  return (row >> 3) * kPSbo + (token >> 3) * kPLbo + (row & 7) * 16 + (token & 7) * 2;
}

constexpr int kUnits = kDimQk * 2 / 16;  // 16-byte units of a bf16 row: 72

// ---- Tile loads (warpgroup 1) ----------------------------------------------------------------

// The Q tile (rows token-major, as O; rows past it.rows zero-filled so that their S is 0,
// never garbage), as cp.async copies that join the thread's next arrive.
__device__ __forceinline__ void IssueQTileSm90(const MlaDecodeParams& p, const Item& it,
                                               uint8_t* q_s, int wtid) {
  const uint8_t* q = static_cast<const uint8_t*>(p.q);
  for (int u = wtid; u < SmemSm90::kRows * kUnits; u += kSm90WgThreads) {
    const int row = u / kUnits, unit = u - row * kUnits;
    const bool valid = row < it.rows;
    const int64_t src = valid ? FinalRow(p, it, row) * (kDimQk * 2) + unit * 16 : 0;
    CpAsync16(q_s + SwizzledOffset(row, unit, SmemSm90::kQChunk), q + src, valid);
  }
}

// The page id of the token thread `wtid` copies in kv block `blk` (token wtid / 4), or -1
// past e_lim (nothing is read). Loaded one block before IssueKvBlockSm90 needs it, so the
// dependent global load is off the loader's path.
__device__ __forceinline__ int32_t LoadPageIdSm90(const MlaDecodeParams& p, const Item& it, int blk,
                                                  int wtid) {
  const int64_t j = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens + (wtid >> 2);
  return j < it.e_lim ? p.kv_indices[it.kv_base + (j >> it.log2_page)] : -1;
}

// kv block `blk` of the item (tokens begin + 32 blk ..) into a ring slot, given the thread's
// page id (LoadPageIdSm90): thread t copies units t % 4 + 4 k of token t / 4, so the four
// lanes of a token read 64 contiguous bytes per step. Tokens past e_lim and bad pages
// (reported) are zero-filled: their P is 0 and a zero V keeps 0 * garbage out of O.
__device__ __forceinline__ void IssueKvBlockSm90(const MlaDecodeParams& p, const Item& it, int blk,
                                                 int32_t page, uint8_t* dst, int wtid, int cu) {
  const int tok = wtid >> 2, part = wtid & 3;
  const int64_t j = it.begin + static_cast<int64_t>(blk) * SmemSm90::kTokens + tok;
  bool valid = j < it.e_lim;
  if (valid && (page < 0 || page >= p.num_pages)) {
    Report(p.status, kMlaBadPageId, cu, static_cast<int>(it.kv_base + (j >> it.log2_page)), page);
    valid = false;
  }
  const int64_t slot =
      valid ? static_cast<int64_t>(page) * p.page_size + (j & (p.page_size - 1)) : 0;
  const uint8_t* src = static_cast<const uint8_t*>(p.kv_cache) + slot * (kDimQk * 2);
#pragma unroll
  for (int k = 0; k < kUnits / 4; ++k) {
    const int unit = part + 4 * k;
    CpAsync16(dst + SwizzledOffset(tok, unit, SmemSm90::kKvChunk), src + unit * 16, valid);
  }
}

// ---- Tile math -------------------------------------------------------------------------------

// S = Q K^T for the 32 tokens of the kv slot at `kv` (shared addresses): 9 chunks x 4 k16
// steps; a k step advances 32 bytes inside the swizzled 128-byte rows (8-row groups 1024
// bytes apart).
// The descriptors are built once and stepped by adding the byte offset / 16 to their address
// field (addresses stay below 256 KB, so the 14-bit field never carries).
__device__ __forceinline__ void IssueScores(uint32_t q, uint32_t kv, float (&s)[16]) {
  const uint64_t a0 = MatrixDesc(q, 16, 1024, kSwizzle128B);
  const uint64_t b0 = MatrixDesc(kv, 16, 1024, kSwizzle128B);
#pragma unroll
  for (int c = 0; c < 9; ++c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      WgmmaM64N32K16(s, a0 + ((c * SmemSm90::kQChunk + kk * 32) >> 4),
                     b0 + ((c * SmemSm90::kKvChunk + kk * 32) >> 4), c + kk);
    }
  }
}

// O[:, 256 half ..] += (P hi + P lo) V[:, 256 half ..]: V is read MN-major from the kv slot
// (4 column chunks kKvChunk apart, 8-token groups 1024 apart); a k16 step is 16 tokens.
__device__ __forceinline__ void IssuePv(uint32_t p_hi, uint32_t p_lo, uint32_t kv, int half,
                                        float (&o)[128]) {
  const uint64_t v0 =
      MatrixDesc(kv + 4 * half * SmemSm90::kKvChunk, SmemSm90::kKvChunk, 1024, kSwizzle128B);
  const uint64_t hi0 = MatrixDesc(p_hi, kPLbo, kPSbo, kSwizzleNone);
  const uint64_t lo0 = MatrixDesc(p_lo, kPLbo, kPSbo, kSwizzleNone);
#pragma unroll
  for (int kk = 0; kk < SmemSm90::kTokens / 16; ++kk) {
    const uint64_t v = v0 + ((kk * 16 * 128) >> 4);
    const uint32_t step = (kk * 2 * kPLbo) >> 4;
    WgmmaM64N256K16TransB(o, hi0 + step, v, 1);
    WgmmaM64N256K16TransB(o, lo0 + step, v, 1);
  }
}

// ---- One work item ---------------------------------------------------------------------------

// `seq` counts the kv blocks this block has consumed, across items: block n sits in ring
// slot n % 4 (full[] phase n / 4) and uses P lo / rescale buffer n % 2 (p_ready[] and
// pv1_done[] phase n / 2).
__device__ inline void RunItemSm90(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu,
                                   uint32_t& seq) {
  using L = SmemSm90;
  const int tid = threadIdx.x, wg = WarpUniform(tid >> 7), wtid = tid & (kSm90WgThreads - 1);
  const int quad = tid & 3;
  const int r0 = ((wtid >> 5) << 4) + ((tid & 31) >> 2);  // rows r0 and r0 + 8
  const uint32_t base = SmemAddr(smem);
  const uint32_t bars = base + L::kBars;
  auto full = [&](uint32_t n) { return bars + 8 * (L::kFull + (n & (L::kSlots - 1))); };
  auto p_ready = [&](uint32_t n) { return bars + 8 * (L::kPReady + (n & 1)); };
  auto pv1_done = [&](uint32_t n) { return bars + 8 * (L::kPv1Done + (n & 1)); };
  auto slot_of = [&](uint32_t n) { return L::kKv + (n & (L::kSlots - 1)) * L::kKvSlot; };
  float* alpha_s = reinterpret_cast<float*>(smem + L::kAlpha);
  float* row_m = reinterpret_cast<float*>(smem + L::kRowM);
  float* row_l = reinterpret_cast<float*>(smem + L::kRowL);
  const int64_t span = it.e_lim - it.begin;
  const int nblk =
      WarpUniform(span > 0 ? static_cast<int>((span + L::kTokens - 1) / L::kTokens) : 0);

  // The previous item's readers of Q, the ring and the row statistics are done.
  __syncthreads();

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;

  if (wg == 0) {
    int64_t vend[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      vend[h] = VisibleEnd(p, it, it.first_token + (r0 + 8 * h) / it.hpg);
    }
    const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
    float m[2] = {NegInf(), NegInf()}, l[2] = {0.0f, 0.0f};
    for (int i = 0; i < nblk; ++i) {
      const uint32_t n = seq + i;
      const uint32_t kv = base + slot_of(n);
      MbarWait(full(n), (n >> 2) & 1);
      FenceProxyAsync();
      float s[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) s[e] = 0.0f;
      PinAccumulators(s);
      WgmmaFence();
      IssueScores(base + L::kQ, kv, s);
      WgmmaCommit();
      WgmmaWait<0>();  // S_i and this warpgroup's P V_{i-1}
      PinAccumulators(s);
      PinAccumulators(o);

      // Mask and the online softmax over the block's 32 tokens (quad-wide rows).
      // Tokens of the block each row sees: [0, lim[h]) (token t of the block is kv position
      // begin + 32 i + t).
      const int64_t j_blk = it.begin + static_cast<int64_t>(i) * L::kTokens;
      int lim[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t d = vend[h] - j_blk;
        lim[h] = d < 0 ? 0 : d > L::kTokens ? L::kTokens : static_cast<int>(d);
      }
      float mx[2], m_use[2], alpha[2];
      MaskRowMax(s, lim, quad, scale_log2, mx);
      StepRunningMax(mx, m, l, m_use, alpha);
      ScaleRowsIfMoved(o, alpha[0], alpha[1]);

      // Publish P (hi into the slot's rope chunk, dead once S is done; lo into buffer n % 2,
      // free once warpgroup 1's P V of block n-2 is) and the rescale factors. Every phase of
      // pv1_done is waited for, also across items (where it has long completed), so that
      // no phase can complete twice unseen (and compute-sanitizer synccheck sees no arrive
      // on an unwaited phase).
      if (n >= 2) MbarWait(pv1_done(n), ((n - 2) >> 1) & 1);
      uint8_t* p_hi = smem + slot_of(n) + 8 * L::kKvChunk;
      uint8_t* p_lo = smem + L::kPLo + (n & 1) * L::kPBytes;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = BlockP(s[4 * jj + 2 * h], scale_log2, m_use[h]);
          const float p1 = BlockP(s[4 * jj + 2 * h + 1], scale_log2, m_use[h]);
          l[h] += p0 + p1;
          const uint32_t hi = PackBf16x2(p0, p1);
          const uint32_t lo =
              PackBf16x2(p0 - BitsToFloat(hi << 16), p1 - BitsToFloat(hi & 0xffff0000u));
          const uint32_t off = POffset(r0 + 8 * h, 8 * jj + 2 * quad);
          *reinterpret_cast<uint32_t*>(p_hi + off) = hi;
          *reinterpret_cast<uint32_t*>(p_lo + off) = lo;
        }
      }
      if (quad == 0) {
        alpha_s[(n & 1) * L::kRows + r0] = alpha[0];
        alpha_s[(n & 1) * L::kRows + r0 + 8] = alpha[1];
      }
      FenceProxyAsync();
      MbarArrive(p_ready(n));

      PinAccumulators(o);  // the rescale is done before the fence
      WgmmaFence();
      IssuePv(SmemAddr(p_hi), SmemAddr(p_lo), kv, 0, o);
      WgmmaCommit();
    }
    WgmmaWait<0>();
    PinAccumulators(o);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] = QuadSum(l[h]);
      if (quad == 0) {
        row_m[r0 + 8 * h] = m[h];
        row_l[r0 + 8 * h] = l[h];
      }
    }
  } else {
    // Prologue: Q (with block 0) and blocks 0 .. 2; then block i+3 after the P V of block
    // i is issued, into the slot block i-1 has left.
    constexpr int kAhead = L::kSlots - 1;
    for (int b = 0; b < nblk && b < kAhead; ++b) {
      if (b == 0) IssueQTileSm90(p, it, smem + L::kQ, wtid);
      IssueKvBlockSm90(p, it, b, LoadPageIdSm90(p, it, b, wtid), smem + slot_of(seq + b), wtid, cu);
      CpAsyncArrive(full(seq + b));
    }
    int32_t next_page = kAhead < nblk ? LoadPageIdSm90(p, it, kAhead, wtid) : -1;
    for (int i = 0; i < nblk; ++i) {
      const uint32_t n = seq + i;
      MbarWait(p_ready(n), (n >> 1) & 1);
      WgmmaWait<0>();  // this warpgroup's P V_{i-1}
      PinAccumulators(o);
      if (i >= 1) MbarArrive(pv1_done(n - 1));
      ScaleRowsIfMoved(o, alpha_s[(n & 1) * L::kRows + r0], alpha_s[(n & 1) * L::kRows + r0 + 8]);
      PinAccumulators(o);
      WgmmaFence();
      IssuePv(base + slot_of(n) + 8 * L::kKvChunk, base + L::kPLo + (n & 1) * L::kPBytes,
              base + slot_of(n), 1, o);
      WgmmaCommit();
      // Block i-1 is done by both warpgroups (warpgroup 0 published P_i after its own
      // P V_{i-1}): its slot takes block i+3.
      if (i + kAhead < nblk) {
        IssueKvBlockSm90(p, it, i + kAhead, next_page, smem + slot_of(n + kAhead), wtid, cu);
        CpAsyncArrive(full(n + kAhead));
        if (i + kAhead + 1 < nblk) next_page = LoadPageIdSm90(p, it, i + kAhead + 1, wtid);
      }
    }
    WgmmaWait<0>();
    PinAccumulators(o);
    if (nblk > 0) MbarArrive(pv1_done(seq + nblk - 1));
  }
  seq += nblk;
  NamedBarrierSync(1, kSm90Threads);  // row statistics published; every P V done

  // Epilogue: each warpgroup normalizes and stores its 256 columns (bf16 or, with o_fp32,
  // fp32 final O; fp32 partial O); warpgroup 0 the LSE.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + 8 * h;
    if (row >= it.rows) continue;
    const float lt = row_l[row];
    const float inv = lt > 0.0f ? p.kv_scale / lt : 0.0f;
    const int col0 = 256 * wg + 2 * quad;
    if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
      float* dst = p.o_fp32 + FinalRow(p, it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<float2*>(dst + 8 * jj) =
            make_float2(o[4 * jj + 2 * h] * inv, o[4 * jj + 2 * h + 1] * inv);
      }
    } else if (it.partial < 0) {
      uint16_t* dst = p.o + FinalRow(p, it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<uint32_t*>(dst + 8 * jj) =
            PackBf16x2(o[4 * jj + 2 * h] * inv, o[4 * jj + 2 * h + 1] * inv);
      }
    } else {
      float* dst = p.partial_o + PartialRow(it, row) * kDimV + col0;
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        *reinterpret_cast<float2*>(dst + 8 * jj) =
            make_float2(o[4 * jj + 2 * h] * inv, o[4 * jj + 2 * h + 1] * inv);
      }
    }
    if (wg == 0 && quad == 0) WriteLse(p, it, row, RowLse(row_m[row], lt));
  }
}

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

// The sm90 decode kernel: the item walk of every path around RunItemSm90 (bf16, 64-row
// tiles). Its body exists in the NVIDIA device pass and the CPU emulation only.
__global__ void __launch_bounds__(kSm90Threads, 1) MlaDecodeSm90Kernel(const MlaDecodeParams p) {
#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)
  mlapsTriggerDependents();  // the reduce may launch (it waits for this grid: LaunchMlaReduce)
  uint8_t* smem = DynamicSmem();
  smem += (SmemSm90::kAlign - (SmemAddr(smem) & (SmemSm90::kAlign - 1))) & (SmemSm90::kAlign - 1);
  if (threadIdx.x == 0) {
    const uint32_t bars = SmemAddr(smem) + SmemSm90::kBars;
    // full: warpgroup 1's copies (noinc arrivals); p_ready: warpgroup 0; pv1_done: 1.
    for (int b = 0; b < SmemSm90::kNumBars; ++b) MbarInit(bars + 8 * b, kSm90WgThreads);
  }
  __syncthreads();
  uint32_t seq = 0;
  const bool merge = p.merge.counters != nullptr;
  MergeBook* book = reinterpret_cast<MergeBook*>(smem + SmemSm90::kMergeBook);
  const int tid = static_cast<int>(threadIdx.x);
  auto sync = [] { __syncthreads(); };
  if (merge) OpenMergeBook<kSm90Threads>(p, PlanCu(p), tid, book, sync);
  WalkItems(p, SmemSm90::kRows, [&](const Item& it, int cu) { RunItemSm90(p, it, smem, cu, seq); });
  // With merge asked for, the block's pieces of split tiles are counted once all its items ran,
  // and the block merges each tile whose count it completes (after the walk as in RunSm90Block,
  // mla_decode_sm90_producer.h).
  if (merge) CloseMergeBook<kSm90Threads>(p, PlanCu(p), tid, book, sync);
#endif
}

}  // namespace sm90_bf16
}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_BF16_H_
