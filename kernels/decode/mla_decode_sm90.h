// Hopper (sm_90a) path of the persistent MLA decode: warpgroup MMAs (wgmma) on operands in
// swizzled shared memory, kv blocks landing on mbarriers, no mma.sync on the hot path.
// Contract: mla_decode.h; execution model: sim/executor.h; measurements: notes.md.
//
// One block of two warpgroups per SM runs 64-row tiles of bf16 inputs (the registry's sm90
// tiles; fewer rows in use leave the rest zero). Shared memory (SmemSm90 below) holds the
// Q tile for the whole work item and a ring of two 64-token kv blocks, all in the 128-byte
// swizzled layout that wgmma reads: a tile of R rows x 576 dims is 9 column chunks of
// R x 64 elements, row r of a chunk at 128 r bytes with its 16-byte units XOR-ed by r % 8.
// The same kv tile serves both products: K-major B of S = Q K^T, and MN-major (transposed)
// B of O += P V, since V is the first 512 dims of the same rows.
//
// Per kv block i, warpgroup w (threads 128 w ..):
//   S_w  = Q K_i[tokens 32 w .. 32 w + 31]^T       36 x wgmma m64n32k16 (both from smem)
//   row max over its 32 tokens, exchanged with the other warpgroup through shared memory
//   (the only point where the two meet besides P), then the online softmax in registers;
//   P (64 x 64, bf16 hi + lo parts: one bf16 rounding of P fails the elementwise gate,
//   notes.md) to shared memory: hi into the rope chunk of block i's slot (dims 512..575,
//   dead once both S products are done), lo into its own 8 KB;
//   O_w += P_hi V_i[:, 256 w ..] + P_lo V_i[:, 256 w ..]   8 x wgmma m64n256k16 (async)
// The loads of block i+1 are issued once both warpgroups are past block i-1's P V (the
// barrier after the row max), so a block's copy overlaps the previous block's math. The
// copies are cp.async (any page size: dense pages and sparse slots alike) completing on
// one mbarrier per ring slot (cp.async.mbarrier.arrive.noinc), so no thread waits for
// another's copies at a block barrier.
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"

namespace mlaps {
namespace mla {

// ---- Shared memory of one sm90 block (host-visible: the launch sizes it) ------------------

struct SmemSm90 {
  static constexpr int kRows = 64;                    // q rows of a tile = kv tokens of a block
  static constexpr int kChunkBytes = kRows * 128;     // one 64-dim column chunk of a tile
  static constexpr int kTileBytes = 9 * kChunkBytes;  // 576 dims
  static constexpr int kStages = 2;
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + kTileBytes;              // kStages kv tiles
  static constexpr int kPLo = kKv + kStages * kTileBytes;  // P lo (64 x 64 bf16)
  static constexpr int kRowMax = kPLo + kChunkBytes;       // [2 warpgroups][64] fp32
  static constexpr int kRowSum = kRowMax + 2 * kRows * 4;  // [2][64] fp32
  static constexpr int kFull = kRowSum + 2 * kRows * 4;    // kStages mbarriers
  static constexpr int kUsed = kFull + kStages * 8;
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes chunk bases on that
  // grid: the dynamic shared memory base is rounded up to it.
  static constexpr int kAlign = 1024;
  static constexpr int kBytes = kUsed + kAlign;
};
static_assert(SmemSm90::kBytes <= 227 * 1024, "sm90 layout fits an H100/H200 block");
static_assert(SmemSm90::kKv % 1024 == 0 && SmemSm90::kPLo % 1024 == 0, "chunk bases 1024-aligned");

constexpr int kSm90Threads = 256;  // two warpgroups

#if defined(__CUDA_ARCH__) && !defined(MLAPS_HOST_EMULATION)
// =============================================================================================
// Device code (NVIDIA device pass only).
// =============================================================================================

// ---- Primitives --------------------------------------------------------------------------

// Matrix descriptor of a 128-byte-swizzled operand at shared address `addr` (16-byte
// units): lbo / sbo are the byte strides between 64-element column chunks (MN-major) and
// between 8-row groups; swizzle mode 1 (128 B) in bits 62-63.
__device__ __forceinline__ uint64_t SwizzledDesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Blocks until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (the
// barrier's count includes this arrival: .noinc).
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Orders this thread's generic-proxy shared memory accesses before later async-proxy ones
// (wgmma operand reads).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The two warpgroups of the block (every thread): barrier 1, so it never meets
// __syncthreads' barrier 0.
__device__ __forceinline__ void WarpgroupsSync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kSm90Threads) : "memory");
}
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma wait or
// issue: the registers are rewritten by the asynchronous MMA behind its back.
template <int kN>
__device__ __forceinline__ void PinAccumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (m64n32, fp32) = / += A B with A = 64 x 16 and B = 16 x 32 bf16 from shared memory,
// both K-major.
__device__ __forceinline__ void WgmmaM64N32K16(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void WgmmaM64N256K16TransB(float (&d)[128], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// ---- Tile loads ------------------------------------------------------------------------------

// Byte offset of 16-byte unit `unit` (dims 8 unit .. 8 unit + 7) of row `row` in a swizzled
// 64-row tile: column chunk unit / 8, then the row, then the unit XOR-ed by row % 8.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int unit) {
  return (unit >> 3) * SmemSm90::kChunkBytes + row * 128 + (((unit & 7) ^ (row & 7)) << 4);
}

constexpr int kUnits = kDimQk * 2 / 16;  // 16-byte units of a bf16 row: 72

// The Q tile (rows token-major, as O; rows past it.rows zero-filled so that their S is 0,
// never garbage), as cp.async copies that join the thread's next arrive. Consecutive
// threads copy consecutive units of a row.
__device__ __forceinline__ void IssueQTileSm90(const MlaDecodeParams& p, const Item& it,
                                               uint8_t* q_s) {
  const uint8_t* q = static_cast<const uint8_t*>(p.q);
  for (int u = threadIdx.x; u < SmemSm90::kRows * kUnits; u += kSm90Threads) {
    const int row = u / kUnits, unit = u - row * kUnits;
    const bool valid = row < it.rows;
    const int64_t src = valid ? FinalRow(p, it, row) * (kDimQk * 2) + unit * 16 : 0;
    CpAsync16(q_s + SwizzledOffset(row, unit), q + src, valid);
  }
}

// kv block `blk` of the item (tokens begin + 64 blk ..) into a ring slot: thread t copies
// units t % 4 + 4 k of token t / 4, so the four lanes of a token read 64 contiguous bytes
// per step and each thread looks up one page id. Tokens past e_lim and bad pages (reported)
// are zero-filled: their P is 0 and a zero V keeps 0 * garbage out of O.
__device__ __forceinline__ void IssueKvBlockSm90(const MlaDecodeParams& p, const Item& it, int blk,
                                                 uint8_t* dst, int cu) {
  const int tok = threadIdx.x >> 2, part = threadIdx.x & 3;
  const int64_t j = it.begin + static_cast<int64_t>(blk) * SmemSm90::kRows + tok;
  bool valid = j < it.e_lim;
  int64_t slot = 0;
  if (valid) {
    const int64_t index = it.kv_base + (j >> it.log2_page);
    const int32_t page = p.kv_indices[index];
    if (page < 0 || page >= p.num_pages) {
      Report(p.status, kMlaBadPageId, cu, static_cast<int>(index), page);
      valid = false;
    } else {
      slot = static_cast<int64_t>(page) * p.page_size + (j & (p.page_size - 1));
    }
  }
  const uint8_t* src = static_cast<const uint8_t*>(p.kv_cache) + slot * (kDimQk * 2);
#pragma unroll
  for (int k = 0; k < kUnits / 4; ++k) {
    const int unit = part + 4 * k;
    CpAsync16(dst + SwizzledOffset(tok, unit), src + unit * 16, valid);
  }
}

// ---- Tile math -------------------------------------------------------------------------------

// S_w = Q K^T over this warpgroup's 32 tokens of the block in slot `kv` (shared addresses):
// 9 chunks x 4 k16 steps; the k steps advance 32 bytes inside the swizzled 128-byte rows.
__device__ __forceinline__ void IssueScores(uint32_t q, uint32_t kv, int wg, float (&s)[16]) {
  constexpr uint32_t kC = SmemSm90::kChunkBytes;
#pragma unroll
  for (int c = 0; c < 9; ++c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t a = SwizzledDesc(q + c * kC + kk * 32, 16, 1024);
      const uint64_t b = SwizzledDesc(kv + c * kC + wg * 32 * 128 + kk * 32, 16, 1024);
      WgmmaM64N32K16(s, a, b, c + kk);
    }
  }
}

// O_w += P V[:, 256 w .. 256 w + 255] for P = hi + lo (both 64 x 64, K-major at p_hi /
// p_lo) and V the first 512 dims of the kv slot, read MN-major: 4 column chunks (lbo) of
// 8-token groups (sbo); a k16 step is 16 token rows.
__device__ __forceinline__ void IssuePv(uint32_t p_hi, uint32_t p_lo, uint32_t kv, int wg,
                                        float (&o)[128]) {
  constexpr uint32_t kC = SmemSm90::kChunkBytes;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t v = SwizzledDesc(kv + 4 * wg * kC + kk * 16 * 128, kC, 1024);
    WgmmaM64N256K16TransB(o, SwizzledDesc(p_hi + kk * 32, 16, 1024), v, 1);
    WgmmaM64N256K16TransB(o, SwizzledDesc(p_lo + kk * 32, 16, 1024), v, 1);
  }
}

// ---- One work item ---------------------------------------------------------------------------

// Accumulator layout (wgmma m64nN, fp32): thread t of warpgroup w holds rows r0 = 16 (t/32 %
// 4) + (t % 32) / 4 and r0 + 8; element 4 j + 2 h + e is row r0 + 8 h, column 8 j + 2 (t %
// 4) + e. `seq` counts the kv blocks this block has consumed (ring slot seq % 2, mbarrier
// phase seq / 2 % 2), across items.
__device__ inline void RunItemSm90(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu,
                                   uint32_t& seq) {
  using L = SmemSm90;
  const int tid = threadIdx.x, wg = tid >> 7;
  const int lane = tid & 31, quad = lane & 3;
  const int r0 = (((tid & 127) >> 5) << 4) + (lane >> 2);
  const uint32_t base = SmemAddr(smem);
  const uint32_t full = base + L::kFull;  // + 8 slot
  float* row_max = reinterpret_cast<float*>(smem + L::kRowMax);
  float* row_sum = reinterpret_cast<float*>(smem + L::kRowSum);
  const int64_t span = it.e_lim - it.begin;
  const int nblk = span > 0 ? static_cast<int>((span + L::kRows - 1) / L::kRows) : 0;
  int64_t vend[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) vend[h] = VisibleEnd(p, it, it.first_token + (r0 + 8 * h) / it.hpg);
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;

  // The previous item's readers of Q, the ring and the row sums are done.
  __syncthreads();
  if (nblk > 0) {
    IssueQTileSm90(p, it, smem + L::kQ);
    IssueKvBlockSm90(p, it, 0, smem + L::kKv + (seq & 1) * L::kTileBytes, cu);
    CpAsyncArrive(full + (seq & 1) * 8);
  }
  if (nblk > 1) {
    IssueKvBlockSm90(p, it, 1, smem + L::kKv + ((seq + 1) & 1) * L::kTileBytes, cu);
    CpAsyncArrive(full + ((seq + 1) & 1) * 8);
  }

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m[2] = {NegInf(), NegInf()}, l[2] = {0.0f, 0.0f};

  for (int i = 0; i < nblk; ++i) {
    const uint32_t n = seq + i, slot = n & 1;
    const uint32_t kv = base + L::kKv + slot * L::kTileBytes;
    MbarWait(full + slot * 8, (n >> 1) & 1);
    FenceProxyAsync();

    float s[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) s[e] = 0.0f;
    WgmmaFence();
    IssueScores(base + L::kQ, kv, wg, s);
    WgmmaCommit();
    WgmmaWait<0>();  // S_i, and this warpgroup's P V_{i-1}
    PinAccumulators(s);
    PinAccumulators(o);

    // Mask, row max over this warpgroup's tokens, then over both.
    const int64_t j0 = it.begin + static_cast<int64_t>(i) * L::kRows + wg * 32 + 2 * quad;
    float mx[2] = {NegInf(), NegInf()};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int h = (e >> 1) & 1;
      const int64_t j = j0 + 8 * (e >> 2) + (e & 1);
      s[e] = j < vend[h] ? s[e] * scale_log2 : NegInf();
      mx[h] = MaxF(mx[h], s[e]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = QuadMax(mx[h]);
      if (quad == 0) row_max[wg * L::kRows + r0 + 8 * h] = mx[h];
    }
    WarpgroupsSync();
    // Both warpgroups are past S_i and P V_{i-1}: block i-1's slot takes block i+1, and P
    // may be overwritten.
    if (i >= 1 && i + 1 < nblk) {
      IssueKvBlockSm90(p, it, i + 1, smem + L::kKv + ((n + 1) & 1) * L::kTileBytes, cu);
      CpAsyncArrive(full + ((n + 1) & 1) * 8);
    }

    float m_use[2], alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float other = row_max[(1 - wg) * L::kRows + r0 + 8 * h];
      const float m_new = MaxF(m[h], MaxF(mx[h], other));
      m_use[h] = m_new == NegInf() ? 0.0f : m_new;  // a row that saw nothing keeps P = 0
      alpha[h] = exp2f(m[h] - m_use[h]);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int e = 0; e < 128; ++e) o[e] *= alpha[(e >> 1) & 1];

    // P = 2^(x - m) as bf16 hi + lo into the swizzled 64 x 64 P tiles (row r, token c:
    // unit c / 8 of row r).
    uint8_t* p_hi = smem + L::kKv + slot * L::kTileBytes + 8 * L::kChunkBytes;
    uint8_t* p_lo = smem + L::kPLo;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float p0 = exp2f(s[4 * jj + 2 * h] - m_use[h]);
        const float p1 = exp2f(s[4 * jj + 2 * h + 1] - m_use[h]);
        l[h] += p0 + p1;
        const uint32_t hi = PackBf16x2(p0, p1);
        const uint32_t lo =
            PackBf16x2(p0 - BitsToFloat(hi << 16), p1 - BitsToFloat(hi & 0xffff0000u));
        const int row = r0 + 8 * h;
        const uint32_t off = row * 128 + (((wg * 4 + jj) ^ (row & 7)) << 4) + quad * 4;
        *reinterpret_cast<uint32_t*>(p_hi + off) = hi;
        *reinterpret_cast<uint32_t*>(p_lo + off) = lo;
      }
    }
    FenceProxyAsync();
    WarpgroupsSync();  // both halves of P are in shared memory

    WgmmaFence();
    IssuePv(SmemAddr(p_hi), SmemAddr(p_lo), kv, wg, o);
    WgmmaCommit();
  }
  WgmmaWait<0>();
  PinAccumulators(o);
  seq += nblk;

  // Epilogue: row sums of both warpgroups, then each warpgroup normalizes and stores its 256
  // columns (bf16 or, with o_fp32, fp32 final O; fp32 partial O); warpgroup 0 the LSE.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = QuadSum(l[h]);
    if (quad == 0) row_sum[wg * L::kRows + r0 + 8 * h] = l[h];
  }
  WarpgroupsSync();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + 8 * h;
    if (row >= it.rows) continue;
    const float lt = row_sum[row] + row_sum[L::kRows + row];
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
    if (wg == 0 && quad == 0) WriteLse(p, it, row, RowLse(m[h], lt));
  }
}

#endif  // __CUDA_ARCH__ && !MLAPS_HOST_EMULATION

// The sm90 decode kernel: the item walk of every path around RunItemSm90 (bf16, 64-row
// tiles). Its body exists in the NVIDIA device pass only.
__global__ void __launch_bounds__(kSm90Threads, 1) MlaDecodeSm90Kernel(const MlaDecodeParams p) {
#if defined(__CUDA_ARCH__) && !defined(MLAPS_HOST_EMULATION)
  uint8_t* smem = DynamicSmem();
  smem += (SmemSm90::kAlign - (SmemAddr(smem) & (SmemSm90::kAlign - 1))) & (SmemSm90::kAlign - 1);
  if (threadIdx.x == 0) {
    for (int s = 0; s < SmemSm90::kStages; ++s) {
      MbarInit(SmemAddr(smem) + SmemSm90::kFull + 8 * s, kSm90Threads);
    }
  }
  __syncthreads();
  uint32_t seq = 0;
  WalkItems(p, SmemSm90::kRows, [&](const Item& it, int cu) { RunItemSm90(p, it, smem, cu, seq); });
#endif
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_H_
