// Device code of the persistent MLA decode kernel (contract: mla_decode.h; the reduce is in
// mla_reduce_device.h;
// execution model: sim/executor.h). HIP dialect, included by mla_decode.hip. It is a header
// so that tests/kernels/decode/mla_decode_emu_test.cc can also compile it for the CPU on top of a
// host emulation of the few device primitives it uses (MLAPS_HOST_EMULATION), which runs
// the exact same tile code, fragment layouts and pipeline logic without a GPU.
//
// Two paths, chosen at compile time, computing the same function:
//   * MLAPS_MLA_MMA (NVIDIA device pass, or the emulation): 64-row qo tiles on the tensor
//     cores. Per work item the Q tile (rows = tokens x heads, token-major) sits in shared
//     memory for the whole item; kv blocks of kBlockN tokens stream through a cp.async ring
//     of kStages buffers (16-byte copies, each 128-byte line read whole by 8 lanes), so one
//     kv block in shared memory serves every q row of the tile. Per kv block:
//       S  = Q K^T  (rows x 32, K = 576): the 8 warps split the 576 dims into parts for
//            each 16-row group (64 rows: 4 groups x 2 parts; 16 rows: 1 x 8), so Q is read
//            from shared memory once and small tiles still use every warp; the other parts'
//            partial S goes through shared memory to part 0's warps;
//       softmax (part 0's warps): mask, running max / sum per row (base 2), P to shared
//            memory as 16-bit, and the per-row rescale factor alpha;
//       O += P V  (64 x 512, K = 32): each warp owns 64 output columns of every row, so the
//            fp32 accumulator (128 registers a thread) never moves.
//     bf16 inputs run bf16 MMAs; fp8 e4m3fn inputs are widened exactly to f16 (every e4m3
//     value is an f16) when they land in shared memory and run f16 MMAs, so the logits of
//     both dtypes are exact fp32 sums of exact products. P goes to the PV MMAs as f16
//     (fp8 inputs) or as two bf16 parts hi + lo (bf16 inputs; one bf16 rounding of P fails
//     the elementwise gate), see SoftmaxRows.
//   * otherwise (AMD, and the host pass of nvcc): a generic path, one warp (wavefront) per
//     q row, scalar fp32 FMAs over lanes, per-token online softmax. Correct, not tuned.
#ifndef MLAPS_KERNELS_MLA_DECODE_DEVICE_H_
#define MLAPS_KERNELS_MLA_DECODE_DEVICE_H_

#include <cstdint>

#include "kernels/decode/mla_decode.h"

#if defined(MLAPS_HOST_EMULATION)
#include <cstring>  // the emulation header (included first) defines the device dialect
#else
#include "kernels/platform/hip_runtime.h"
#endif

#if !defined(MLAPS_MLA_MMA)
#if defined(MLAPS_HOST_EMULATION) || defined(__CUDA_ARCH__)
#define MLAPS_MLA_MMA 1
#else
#define MLAPS_MLA_MMA 0
#endif
#endif

namespace mlaps {
namespace mla {

// ---- Shapes ------------------------------------------------------------------------------
constexpr int kDimQk = 576;    // 512 latent + 64 rope
constexpr int kDimV = 512;     // V = the first 512 of a kv row
constexpr int kTileRows = 64;  // q rows (tokens x heads) of a qo tile: the registry's 64
constexpr int kThreads = 256;  // decode block (the generic path; the MMA path: 256 or 512)
constexpr int kBlockN = 32;    // kv tokens per online-softmax step (MMA path)
constexpr int kReduceThreads = 128;
constexpr int kReduceRowSplit = 8;  // reduce blocks per split tile (grid.y)
// Rows a reduce block merges side by side, kReduceThreads / kReduceRowsAtOnce threads each:
// a row's merge is a chain of dependent global loads (LSEs, then partial O), so one row at
// a time per block was latency-bound (9-25 us per reduce on the H200); 8 blocks x 8 rows
// cover a 64-row tile in one pass. (One block per row measured slower: 8x the blocks, each
// repeating the entry's validation.)
// Small tiles take fewer rows a block (RowsAtOnce), so that all kReduceRowSplit blocks work.
// (Session 17, H200: 4 rows a block and 16 blocks a tile, 96 registers against 149, measured
// 1-10% slower than this with the two-piece loads of MergeRow.)
constexpr int kReduceRowsAtOnce = 8;
// Pieces a row merges with their LSE loads issued together (more: three passes over the
// LSEs); either way the partial O rows load two pieces at a time (MergeRow).
constexpr int kReduceFewPieces = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- Bits and number formats (device, host pass and emulation alike) ----------------------

__host__ __device__ __forceinline__ float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

__host__ __device__ __forceinline__ uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

__host__ __device__ __forceinline__ float NegInf() { return BitsToFloat(0xff800000u); }

// Finite: neither inf nor NaN (exponent field not all ones).
__host__ __device__ __forceinline__ bool IsFiniteF(float x) {
  return (FloatToBits(x) & 0x7f800000u) != 0x7f800000u;
}

__host__ __device__ __forceinline__ float MaxF(float a, float b) { return a > b ? a : b; }

// bf16 <-> float. To bf16: round to nearest even; NaN -> quiet NaN with the sign kept
// (sim::FloatToBf16Bits).
__host__ __device__ __forceinline__ float Bf16ToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}
__host__ __device__ __forceinline__ uint16_t FloatToBf16(float x) {
  const uint32_t u = FloatToBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(0x7fc0u | ((u >> 16) & 0x8000u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// OCP fp8 e4m3fn -> float, exact: bias 7, no infinities, 0x7f / 0xff are NaN.
__host__ __device__ __forceinline__ float E4m3fnToFloat(uint32_t byte) {
  const uint32_t e = (byte >> 3) & 0xfu, m = byte & 7u;
  if ((byte & 0x7fu) == 0x7fu) return BitsToFloat(0x7fc00000u | ((byte & 0x80u) << 24));
  const float mag = e == 0 ? static_cast<float>(m) * 0.001953125f  // m/8 * 2^-6
                           : BitsToFloat(((e + 120u) << 23) | (m << 20));
  return (byte & 0x80u) ? -mag : mag;
}

// One q or kv element of the input dtype as float.
template <bool kFp8>
__host__ __device__ __forceinline__ float LoadElem(const void* base, int64_t index) {
  if (kFp8) return E4m3fnToFloat(static_cast<const uint8_t*>(base)[index]);
  return Bf16ToFloat(static_cast<const uint16_t*>(base)[index]);
}

// ---- Status word -------------------------------------------------------------------------

// The first error wins; the block that set the code fills in the details.
__device__ __forceinline__ void Report(MlaStatus* status, int code, int cu, int index,
                                       int64_t value) {
  if (atomicCAS(&status->code, 0, code) == 0) {
    status->cu = cu;
    status->index = index;
    status->value = value;
  }
}

// ---- Work item decode (both paths) ----------------------------------------------------------

// A validated work item in request-local terms (sim/executor.h's reconstruction).
struct Item {
  int b, g;            // request, head group (v = b * head_fold + g)
  int hpg;             // heads per group H / r
  int tokens, rows;    // q tokens of the item, rows = tokens * hpg (<= kTileRows)
  int first_token;     // index within request b of the item's first q token
  int qlen;            // request b's q tokens (the causal rule's q)
  int64_t q_row0;      // Q / O row (global q token) of the first token
  int64_t kv_base;     // kv_indptr[b]: request b's first entry of kv_indices
  int64_t begin, end;  // request-local kv tokens [begin, end) the item reads
  int64_t mask_len;    // the request length the causal mask uses: end + kv_offset
                       // (CP: cp_global_kv_len[b], the global length)
  int64_t e_lim;       // exclusive end of what any of its tokens sees (<= end)
  int partial;         // partial_qo_loc (-1: final)
  int log2_page;       // log2(page_size)
};

// CP round-robin: the number of this rank's local kv tokens j whose global position
// g(j) = (j / I) * I * W + rank * I + j % I is < `limit`. g is increasing in j, so they are
// exactly the local tokens [0, count): g(j) < limit <=> j < count.
__device__ __forceinline__ int64_t CpVisibleCount(const MlaDecodeParams& p, int64_t limit) {
  if (limit <= 0) return 0;
  const int64_t run = p.cp_interleave, period = run * p.cp_world_size;
  const int64_t cycles = limit / period;
  int64_t rem = limit - cycles * period - int64_t{p.cp_rank} * run;  // into this rank's run
  rem = rem < 0 ? 0 : rem > run ? run : rem;
  return cycles * run + rem;
}

// Exclusive end of the kv tokens request-local token `i` sees (<= it.end).
__device__ __forceinline__ int64_t VisibleEnd(const MlaDecodeParams& p, const Item& it, int i) {
  if (p.mask == kMlaMaskCpRoundRobin) {
    const int64_t e = CpVisibleCount(p, it.mask_len - it.qlen + i + 1);
    return e < it.end ? e : it.end;
  }
  if (p.mask != kMlaMaskCausal) return it.end;
  int64_t e = it.mask_len - it.qlen + i + 1;
  e = e < 0 ? 0 : e;
  return e < it.end ? e : it.end;
}

// Decodes and checks work item `w` (its words already read into info). Every thread of the
// block computes the same answer; only the caller's thread 0 reports. Returns 0 or the
// MlaStatusCode, with *value the offending value.
__device__ inline int DecodeItem(const MlaDecodeParams& p, const int32_t (&info)[8], Item* it,
                                 int64_t* value, int max_rows) {
  const int r = p.head_fold;
  const int v = info[0];
  *value = v;
  if (v < 0 || v >= p.num_requests * r) return kMlaBadBatchIdx;
  it->b = v / r;
  it->g = v % r;
  it->hpg = p.num_heads / r;
  const int64_t qo0 = p.qo_indptr[it->b], qo1 = p.qo_indptr[it->b + 1];
  *value = qo1;
  if (qo0 < 0 || qo1 < qo0 || qo1 > p.num_q_tokens) return kMlaBadQoIndptr;
  const int64_t kv0 = p.kv_indptr[it->b], kv1 = p.kv_indptr[it->b + 1];
  *value = kv1;
  if (kv0 < 0 || kv1 < kv0 || kv1 > p.num_kv_indices) return kMlaBadKvIndptr;
  it->qlen = static_cast<int>(qo1 - qo0);
  const int64_t fqo = qo0 * r + static_cast<int64_t>(it->g) * it->qlen;  // folded qo_indptr[v]
  const int64_t qs = info[2], qe = info[3];
  *value = qe;
  if (qs < fqo || qe <= qs || qe > fqo + it->qlen || qe - qs > p.tokens_per_tile ||
      (qe - qs) * it->hpg > max_rows) {
    return kMlaBadQoRange;
  }
  it->tokens = static_cast<int>(qe - qs);
  it->rows = it->tokens * it->hpg;
  it->first_token = static_cast<int>(qs - fqo);
  it->q_row0 = qo0 + it->first_token;
  const int64_t ks = info[4], ke = info[5];
  *value = ke;
  if (ks < kv0 || ke < ks || ke > kv1) return kMlaBadKvRange;
  const int64_t pages = kv1 - kv0;
  int64_t kv_len = 0;
  if (pages > 0) {
    const int last = p.kv_last_page_lens[it->b];
    *value = last;
    if (last < 1 || last > p.page_size) return kMlaBadLastPageLen;
    kv_len = (pages - 1) * p.page_size + last;
  }
  const int64_t begin = (ks - kv0) * p.page_size, end = (ke - kv0) * p.page_size;
  it->begin = begin < kv_len ? begin : kv_len;
  it->end = end < kv_len ? end : kv_len;
  it->mask_len =
      p.mask == kMlaMaskCpRoundRobin ? int64_t{p.cp_global_kv_len[it->b]} : it->end + info[6];
  it->kv_base = kv0;
  it->partial = info[1];
  *value = it->partial;
  if (it->partial < -1 ||
      (it->partial >= 0 && int64_t{it->partial} + it->tokens > p.partial_rows_capacity)) {
    return kMlaBadPartialLoc;
  }
  it->log2_page = __ffs(p.page_size) - 1;
  it->e_lim = VisibleEnd(p, *it, it->first_token + it->tokens - 1);  // the last token sees most
  return kMlaOk;
}

// Cache slot of request-local kv token j, or -1 (reported) for a page id out of range.
__device__ __forceinline__ int64_t KvSlot(const MlaDecodeParams& p, const Item& it, int64_t j,
                                          int cu) {
  const int64_t index = it.kv_base + (j >> it.log2_page);
  const int64_t page = p.kv_indices[index];
  if (page < 0 || page >= p.num_pages) {
    Report(p.status, kMlaBadPageId, cu, static_cast<int>(index), page);
    return -1;
  }
  return (page << it.log2_page) + (j & (p.page_size - 1));
}

// Global O / LSE element offsets of tile row `row` (token-major: row = token * hpg + head).
__device__ __forceinline__ int64_t FinalRow(const MlaDecodeParams& p, const Item& it, int row) {
  const int tok = row / it.hpg, hh = row - tok * it.hpg;
  return (it.q_row0 + tok) * p.num_heads + static_cast<int64_t>(it.g) * it.hpg + hh;
}
__device__ __forceinline__ int64_t PartialRow(const Item& it, int row) {
  const int tok = row / it.hpg, hh = row - tok * it.hpg;
  return (static_cast<int64_t>(it.partial) + tok) * it.hpg + hh;
}

// LSE of a row from its running base-2 max m (of logits * log2 e) and sum l; -inf when the
// row saw nothing. Natural log: ln(sum e^x) = m ln 2 + ln l.
__device__ __forceinline__ float RowLse(float m, float l) {
  return l > 0.0f ? m * kLn2 + logf(l) : NegInf();
}

__device__ __forceinline__ void WriteLse(const MlaDecodeParams& p, const Item& it, int row,
                                         float lse) {
  if (it.partial < 0) {
    p.lse[FinalRow(p, it, row)] = lse;
  } else {
    p.partial_lse[PartialRow(it, row)] = lse;
  }
}

// ---- Shared memory layout of the tensor-core path (host-visible: the launch sizes it) -----

// mma.sync's fragment layouts are defined by PTX for 32-lane warps; this path only runs
// where warps have 32 lanes (NVIDIA), so the warp arithmetic below uses that constant.
constexpr int kMmaLanes = 32;
constexpr int kWarps = 8;               // warps of the S phase (see below)
constexpr int kStride = kDimQk + 8;     // 16-bit elements per smem row: +16 B
                                        // so ldmatrix's 8 rows hit 8 bank groups
constexpr int kPStride = kBlockN + 8;   // P rows (16-bit), same reason
constexpr int kSxStride = kBlockN + 8;  // partial-S rows (fp32)
constexpr int kKSteps = kDimQk / 16;    // 36 k16 steps of S = Q K^T
constexpr int kSxRows = 112;            // partial-S rows: (8 - groups) x 16

// Block shape of the tensor-core path: kW warps (8 or 16; MlaDecodeParams::block_threads).
// The S phase always runs on the first kWarps = 8 warps (more parts would need more partial-S
// shared memory than is left); the PV product and the copies use all of them, each warp
// owning kCols = 512 / kW output columns (64 or 32: 128 or 64 accumulator registers).
template <int kW>
struct BlockShape {
  static constexpr int kThreads = kW * kMmaLanes;
  static constexpr int kCols = kDimV / kW;
  static constexpr int kColTiles = kCols / 8;           // m16n8 tiles per row group
  static constexpr int kTokLanes = kThreads / kBlockN;  // copy lanes per kv token: 8 or 16
  static_assert(kW == 8 || kW == 16, "8 or 16 warps");
};

// kRg: row groups of 16 the Q tile holds. 4: the registry's 64-row tiles, one block per SM
// (~211 KB). 1: the compact layout for tiles of <= 16 rows in use ((H / r) x tokens, e.g.
// H = 16, qlen 1): 16-row Q and a two-block ring, ~111 KB and <= 128 registers a thread, so
// two blocks share an SM (twice the warps to hide latency; see UseCompactLayout).
template <bool kFp8, int kRg = 4>
struct MmaLayout {
  static constexpr int kQRows = 16 * kRg;
  // kv blocks in the ring: 64-row tiles ~74 KB either dtype; compact two blocks.
  static constexpr int kStages = kRg == 4 ? (kFp8 ? 5 : 3) : 2;
  static constexpr int kTile16 = kBlockN * kStride * 2;  // one 16-bit kv block
  static constexpr int kQ = 0;
  static constexpr int kKv16 = kQ + kQRows * kStride * 2;
  // bf16: the ring itself; fp8: one f16 block the landed fp8 block is widened into.
  static constexpr int kKv8 = kKv16 + (kFp8 ? 1 : kStages) * kTile16;
  static constexpr int kP = kKv8 + (kFp8 ? kStages * kBlockN * kDimQk : 0);
  // bf16: P is split into bf16 hi + lo parts (kPLo holds lo), see SoftmaxRows.
  static constexpr int kPLo = kP + kQRows * kPStride * 2;
  static constexpr int kSx = kPLo + (kFp8 ? 0 : kQRows * kPStride * 2);
  static_assert(kRg == 1 || kRg == 4, "64-row or compact 16-row tiles");
  static constexpr int kAlpha = kSx + kSxRows * kSxStride * 4;
  static constexpr int kRowM = kAlpha + kQRows * 4;
  static constexpr int kRowL = kRowM + kQRows * 4;
  static constexpr int kBytes = kRowL + kQRows * 4;
};
static_assert(MmaLayout<false>::kBytes <= 227 * 1024, "bf16 layout fits an H100/H200 block");
static_assert(MmaLayout<true>::kBytes <= 227 * 1024, "fp8 layout fits an H100/H200 block");
// Two compact blocks (plus 1 KB the hardware reserves for each) fit an SM's 228 KB.
static_assert(2 * (MmaLayout<false, 1>::kBytes + 1024) <= 228 * 1024 &&
                  2 * (MmaLayout<true, 1>::kBytes + 1024) <= 228 * 1024,
              "two compact blocks share an H100/H200 SM");
static_assert(MmaLayout<false>::kKv16 % 16 == 0 && MmaLayout<true>::kKv8 % 16 == 0 &&
                  MmaLayout<true>::kP % 16 == 0 && MmaLayout<false>::kSx % 16 == 0,
              "16-byte aligned regions");

#if MLAPS_MLA_MMA
// =============================================================================================
// Tensor-core path (NVIDIA sm_90a; the CPU emulation runs the same code).
// =============================================================================================

// ---- Primitives (inline PTX; emulated on the CPU) -----------------------------------------
#if defined(MLAPS_HOST_EMULATION)

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  mlaps_emu::LdMatrixX4(r, row, false);
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  mlaps_emu::LdMatrixX4(r, row, true);
}
template <bool kF16>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  mlaps_emu::Mma16816(c, a, b0, b1, kF16);
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  mlaps_emu::CpAsync16(dst, src, valid);
}
__device__ __forceinline__ void CpAsyncCommit() { mlaps_emu::CpAsyncCommit(); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  mlaps_emu::CpAsyncWait(kPending);
}
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  return static_cast<uint32_t>(FloatToBf16(lo)) | (static_cast<uint32_t>(FloatToBf16(hi)) << 16);
}
__device__ __forceinline__ uint32_t PackF16x2(float lo, float hi) {
  return mlaps_emu::PackF16x2(lo, hi);
}
__device__ __forceinline__ uint32_t E4m3x2ToF16x2(uint32_t two) {
  return mlaps_emu::E4m3x2ToF16x2(two);
}
__device__ __forceinline__ void E4m3x4ToF16x2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
  lo = mlaps_emu::E4m3x2ToF16x2(four & 0xffffu);
  hi = mlaps_emu::E4m3x2ToF16x2(four >> 16);
}

#else  // NVIDIA device pass

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Four 8x8 16-bit matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(row)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(row)));
}
// c += a * b, m16n8k16, fp32 accumulate; a / b are bf16 pairs (kF16: f16 pairs).
template <bool kF16>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// 16 bytes global -> shared, bypassing L1 (streamed data); !valid fills zeros and reads
// nothing (src-size 0).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ uint32_t PackF16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// Two e4m3fn bytes (low byte -> low half) to two f16, exact.
__device__ __forceinline__ uint32_t E4m3x2ToF16x2(uint32_t two) {
  uint32_t d;
  const uint16_t h = static_cast<uint16_t>(two);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(h));
  return d;
}
// The four e4m3 of a word as two f16 pairs (bytes 0-1 to lo, 2-3 to hi): the word's halves
// are the conversions' operands, so no shift extracts the high one.
__device__ __forceinline__ void E4m3x4ToF16x2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(four));
}

#endif  // MLAPS_HOST_EMULATION

template <bool kF16>
__device__ __forceinline__ uint32_t PackP(float lo, float hi) {
  return kF16 ? PackF16x2(lo, hi) : PackBf16x2(lo, hi);
}

// 8 e4m3fn bytes -> 8 f16 (16 bytes).
__device__ __forceinline__ void Widen8(const uint8_t* src, uint16_t* dst) {
  const uint2 in = *reinterpret_cast<const uint2*>(src);
  uint4 out;
  out.x = E4m3x2ToF16x2(in.x & 0xffffu);
  out.y = E4m3x2ToF16x2(in.x >> 16);
  out.z = E4m3x2ToF16x2(in.y & 0xffffu);
  out.w = E4m3x2ToF16x2(in.y >> 16);
  *reinterpret_cast<uint4*>(dst) = out;
}

// ---- Tile loads ------------------------------------------------------------------------------

// The Q tile into shared memory, rows token-major. bf16: cp.async (joins the caller's next
// commit group). fp8: loaded, widened to f16 and stored (visible after the next barrier).
// Rows past it.rows are never read (whole 16-row groups are skipped), so they stay unset.
template <bool kFp8, int kW>
__device__ __forceinline__ void LoadQTile(const MlaDecodeParams& p, const Item& it, uint16_t* q_s) {
  constexpr int kParts = kDimQk / 8;  // 8-element units per row (16 B bf16, 8 B fp8)
  const int units = it.rows * kParts;
  for (int u = threadIdx.x; u < units; u += BlockShape<kW>::kThreads) {
    const int row = u / kParts, part = u - row * kParts;
    const int64_t src_row = FinalRow(p, it, row);  // same (token, head) indexing as O
    uint16_t* dst = q_s + row * kStride + part * 8;
    if (kFp8) {
      Widen8(static_cast<const uint8_t*>(p.q) + src_row * kDimQk + part * 8, dst);
    } else {
      CpAsync16(dst, static_cast<const uint16_t*>(p.q) + src_row * kDimQk + part * 8, true);
    }
  }
}

// The page id of the token this thread copies in kv block `blk` (token threadIdx.x / 8),
// or -1 past e_lim (nothing is read). Loaded one ring step before IssueKvBlock needs it, so
// that the dependent global load is off the critical path.
template <int kW>
__device__ __forceinline__ int32_t LoadPageId(const MlaDecodeParams& p, const Item& it, int blk) {
  const int64_t j =
      it.begin + static_cast<int64_t>(blk) * kBlockN + threadIdx.x / BlockShape<kW>::kTokLanes;
  return j < it.e_lim ? p.kv_indices[it.kv_base + (j >> it.log2_page)] : -1;
}

// Issues kv block `blk` of the item (tokens begin + blk*kBlockN ..) into ring slot `dst`
// (bf16: 16-bit rows of kStride; fp8: raw rows of 576 bytes) given the thread's page id
// (LoadPageId). Thread t copies token t / n, 16-byte parts t % n + n k (n = 8 or 16 lanes a
// token): the lanes of a token read whole 128-byte lines. Tokens past e_lim (and bad pages,
// reported) are zero-filled so that P = 0 meets V = 0, never garbage.
template <bool kFp8, int kW>
__device__ __forceinline__ void IssueKvBlock(const MlaDecodeParams& p, const Item& it, int blk,
                                             int32_t page, uint8_t* dst, int cu) {
  constexpr int kLanes = BlockShape<kW>::kTokLanes;
  const int tok = threadIdx.x / kLanes, lane_t = threadIdx.x % kLanes;
  const int64_t j = it.begin + static_cast<int64_t>(blk) * kBlockN + tok;
  bool valid = j < it.e_lim;
  if (valid && (page < 0 || page >= p.num_pages)) {
    Report(p.status, kMlaBadPageId, cu, static_cast<int>(it.kv_base + (j >> it.log2_page)), page);
    valid = false;
  }
  const int64_t slot = valid ? static_cast<int64_t>(page) * p.page_size + (j & (p.page_size - 1))
                             : 0;  // a harmless address; nothing is read
  constexpr int kRowBytes = kFp8 ? kDimQk : kDimQk * 2;
  constexpr int kParts = kRowBytes / 16;  // 36 (fp8) or 72 (bf16)
  const uint8_t* src = static_cast<const uint8_t*>(p.kv_cache) + slot * kRowBytes;
  uint8_t* row = dst + tok * (kFp8 ? kDimQk : kStride * 2);
#pragma unroll
  for (int k = 0; k < (kParts + kLanes - 1) / kLanes; ++k) {
    const int part = lane_t + kLanes * k;
    if (part < kParts) CpAsync16(row + part * 16, src + part * 16, valid);
  }
}

// fp8: the landed raw block -> the f16 block (exact), 8 elements a unit.
template <int kW>
__device__ __forceinline__ void WidenKvBlock(const uint8_t* raw, uint16_t* kv16) {
  constexpr int kParts = kDimQk / 8;
  for (int u = threadIdx.x; u < kBlockN * kParts; u += BlockShape<kW>::kThreads) {
    const int tok = u / kParts, part = u - tok * kParts;
    Widen8(raw + tok * kDimQk + part * 8, kv16 + tok * kStride + part * 8);
  }
}

// ---- Tile math -------------------------------------------------------------------------------

// Partial S (16 rows of row group rg x kBlockN tokens) over dims [k_begin, k_end):
// s[nt] is the m16n8 accumulator of tokens nt*8 .. nt*8+7.
template <bool kF16>
__device__ __forceinline__ void PartialScores(const uint16_t* q_s, const uint16_t* kv_t, int rg,
                                              int k_begin, int k_end, int lane,
                                              float (&s)[kBlockN / 8][4]) {
  // ldmatrix row addresses: A (Q rows) lane -> row lane % 16, column half lane / 16;
  // B (K rows = tokens) lane -> token (lane / 16) * 8 + lane % 8, column half (lane / 8) % 2.
  const uint16_t* a_row = q_s + (rg * 16 + (lane & 15)) * kStride + (lane >> 4) * 8;
  const uint16_t* b_row =
      kv_t + (((lane >> 4) << 3) + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
  }
#pragma unroll 1
  for (int k = k_begin; k < k_end; k += 16) {
    uint32_t a[4];
    LdMatrixX4(a, a_row + k);
#pragma unroll
    for (int np = 0; np < kBlockN / 16; ++np) {
      uint32_t b[4];
      LdMatrixX4(b, b_row + np * 16 * kStride + k);
      Mma16816<kF16>(s[2 * np], a, b[0], b[1]);
      Mma16816<kF16>(s[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// O[rg rows, this warp's kNt*8 columns] += P[rg rows, kBlockN] V[kBlockN, columns] for
// every valid row group (o[rg][nt] is the m16n8 accumulator of columns col0 + nt*8 ..).
template <bool kF16, int kNt, int kRg>
__device__ __forceinline__ void AccumulatePv(const uint16_t* p_s, const uint16_t* p_lo_s,
                                             const uint16_t* kv_t, int col0, int nrg, int lane,
                                             float (&o)[kRg][kNt][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    // V B-fragments by ldmatrix.trans over token rows: lane -> token kk*16 + ((lane/8)%2)*8
    // + lane%8, columns col0 + np*16 + (lane/16)*8.
    uint32_t vb[kNt][2];
#pragma unroll
    for (int np = 0; np < kNt / 2; ++np) {
      uint32_t r[4];
      LdMatrixX4Trans(r, kv_t + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + col0 +
                             np * 16 + (lane >> 4) * 8);
      vb[2 * np][0] = r[0];
      vb[2 * np][1] = r[1];
      vb[2 * np + 1][0] = r[2];
      vb[2 * np + 1][1] = r[3];
    }
#pragma unroll
    for (int rg = 0; rg < kRg; ++rg) {
      if (rg < nrg) {
        const int at = (rg * 16 + (lane & 15)) * kPStride + kk * 16 + (lane >> 4) * 8;
        uint32_t a[4];
        LdMatrixX4(a, p_s + at);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) Mma16816<kF16>(o[rg][nt], a, vb[nt][0], vb[nt][1]);
        if (!kF16) {  // bf16: the lo part of P (see SoftmaxRows)
          LdMatrixX4(a, p_lo_s + at);
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) Mma16816<kF16>(o[rg][nt], a, vb[nt][0], vb[nt][1]);
        }
      }
    }
  }
}

// Reduction over the 4 lanes that share an accumulator row (lanes 4g .. 4g+3).
__device__ __forceinline__ float QuadMax(float x) {
  x = MaxF(x, __shfl_xor(x, 1));
  return MaxF(x, __shfl_xor(x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor(x, 1);
  return x + __shfl_xor(x, 2);
}

// Online softmax of one kv block for the rows g + 8h, h in [kH0, kH1), of a row group a lane
// holds (h = 0: row g, h = 1: row g + 8; one finisher warp may do both, or two warps a half
// each): masks positions >= vend[h], updates the running base-2 max m[h] and sum l[h], writes
// P (16-bit) and the rows' rescale factor alpha to shared memory.
//
// P precision: rounding P to bf16 (8 bits) alone moves O by ~2^-9 of its terms, which fails
// docs/design.md's elementwise gate (abs 8e-4 or rel 2/128, no element may fail) on a fraction of
// the outputs. So bf16 P is stored as hi = bf16(p) plus lo = bf16(p - hi) (p_lo_s) and the
// PV product runs twice on the same V fragments (~16-bit P). fp8 inputs run f16 MMAs, whose
// 11-bit P passes as is (p_lo_s unused).
template <bool kF16, int kH0, int kH1>
__device__ __forceinline__ void SoftmaxRows(float (&s)[kBlockN / 8][4], int64_t j0,
                                            const int64_t (&vend)[2], float scale_log2, int row0,
                                            int lane, float (&m)[2], float (&l)[2], uint16_t* p_s,
                                            uint16_t* p_lo_s, float* alpha_s) {
  const int g = lane >> 2, t = lane & 3;
  float mx[2] = {NegInf(), NegInf()};
#pragma unroll
  for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
    for (int h = kH0; h < kH1; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t pos = j0 + nt * 8 + 2 * t + e;
        float& x = s[nt][2 * h + e];
        x = pos < vend[h] ? x * scale_log2 : NegInf();
        mx[h] = MaxF(mx[h], x);
      }
    }
  }
  float m_use[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = kH0; h < kH1; ++h) {
    const float m_new = MaxF(m[h], QuadMax(mx[h]));
    // A row that has seen nothing yet keeps m = -inf; exponentiate against 0 then, so that
    // masked logits give exp2(-inf) = 0 rather than NaN.
    m_use[h] = m_new == NegInf() ? 0.0f : m_new;
    alpha[h] = exp2f(m[h] - m_use[h]);
    m[h] = m_new;
  }
#pragma unroll
  for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
    for (int h = kH0; h < kH1; ++h) {
      const float p0 = exp2f(s[nt][2 * h] - m_use[h]);
      const float p1 = exp2f(s[nt][2 * h + 1] - m_use[h]);
      sum[h] += p0 + p1;
      const int at = (row0 + g + 8 * h) * kPStride + nt * 8 + 2 * t;
      const uint32_t hi = PackP<kF16>(p0, p1);
      *reinterpret_cast<uint32_t*>(p_s + at) = hi;
      if (!kF16) {
        *reinterpret_cast<uint32_t*>(p_lo_s + at) =
            PackBf16x2(p0 - Bf16ToFloat(static_cast<uint16_t>(hi & 0xffffu)),
                       p1 - Bf16ToFloat(static_cast<uint16_t>(hi >> 16)));
      }
    }
  }
#pragma unroll
  for (int h = kH0; h < kH1; ++h) {
    l[h] = l[h] * alpha[h] + QuadSum(sum[h]);
    if (t == 0) alpha_s[row0 + g + 8 * h] = alpha[h];
  }
}

// The finisher's rows h in [kH0, kH1) of its row group's S: adds the other parts' partial S
// from shared memory (q = 1: slot rg, part 1's rows or, split, the other finisher's half;
// q >= 2: part q's slot).
template <int kH0, int kH1>
__device__ __forceinline__ void FinishPartialSum(const float* sx_s, int groups, int rg, int kparts,
                                                 int g, int t, float (&s)[kBlockN / 8][4]) {
  for (int q = 1; q < kparts; ++q) {
    const float* src = sx_s + ((q - 1) * groups + rg) * 16 * kSxStride;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int h = kH0; h < kH1; ++h) {
        const float2 x =
            *reinterpret_cast<const float2*>(src + (g + 8 * h) * kSxStride + nt * 8 + 2 * t);
        s[nt][2 * h] += x.x;
        s[nt][2 * h + 1] += x.y;
      }
    }
  }
}

// One work item on the tensor cores. Preconditions: `it` validated; no cp.async pending.
template <bool kFp8, int kW, int kRg>
__device__ void RunItemMma(const MlaDecodeParams& p, const Item& it, uint8_t* smem, int cu) {
  using L = MmaLayout<kFp8, kRg>;
  using B = BlockShape<kW>;
  constexpr int kNt = B::kColTiles;
  constexpr int kStages = L::kStages;
  const int tid = threadIdx.x, warp = tid / kMmaLanes, lane = tid % kMmaLanes;
  const int g = lane >> 2, t = lane & 3;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem + L::kQ);
  uint16_t* kv16 = reinterpret_cast<uint16_t*>(smem + L::kKv16);
  uint8_t* kv8 = smem + L::kKv8;
  uint16_t* p_s = reinterpret_cast<uint16_t*>(smem + L::kP);
  uint16_t* p_lo_s = reinterpret_cast<uint16_t*>(smem + L::kPLo);
  float* sx_s = reinterpret_cast<float*>(smem + L::kSx);
  float* alpha_s = reinterpret_cast<float*>(smem + L::kAlpha);
  float* row_m = reinterpret_cast<float*>(smem + L::kRowM);
  float* row_l = reinterpret_cast<float*>(smem + L::kRowL);
  // Ring slot of kv block i, as the copies see it.
  auto slot = [&](int i) -> uint8_t* {
    const int s = i % kStages;
    return kFp8 ? kv8 + s * (kBlockN * kDimQk) : reinterpret_cast<uint8_t*>(kv16) + s * L::kTile16;
  };

  const int nrg = it.rows / 16;  // valid row groups (rows are whole multiples of 16)
  // S phase: the 8 warps split the 576 dims into kparts parts for each of the groups' row
  // groups (1, 2 or 4 groups: 8, 4 or 2 parts), so small tiles keep every warp and every
  // SM sub-partition (warp % 4) busy and the serial k chain short. Warp -> (row group
  // rg_s = warp % groups, part kp = warp / groups). The finisher sums the others' partial S
  // (through shared memory) and runs the softmax: in the compact layout (16-row tiles) two
  // warps each finish half of the rows (part 0 rows g, part 1 rows g + 8), in the 64-row
  // layout part 0 finishes all of them. Measured on the H200 (notes.md): the
  // split takes (16,1) from 375 to 348 us but costs the 64-row tiles 2-3%.
  const int groups = nrg <= 1 ? 1 : nrg == 2 ? 2 : 4;
  const int kparts = kWarps / groups;
  const int rg_s = warp % groups, kp = warp / groups;
  const bool s_active = warp < kWarps && rg_s < nrg;
  const int k_begin = kp * kKSteps / kparts * 16, k_end = (kp + 1) * kKSteps / kparts * 16;
  const int64_t span = it.e_lim - it.begin;
  const int nblk = span > 0 ? static_cast<int>((span + kBlockN - 1) / kBlockN) : 0;

  constexpr bool kSplitFinish = kRg == 1;
  const bool finisher = s_active && (kSplitFinish ? kp <= 1 : kp == 0);
  const int fh = kp == 0 ? 0 : 1;  // split: the finisher's half
  // Rows g and g + 8 of the S row group: their tokens' visible ends.
  int64_t vend[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vend[h] = VisibleEnd(p, it, it.first_token + (rg_s * 16 + g + 8 * h) / it.hpg);
  }
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;

  // The previous item's epilogue still reads row_m / row_l (and, with no kv block in
  // between, nothing else would order it before this item's writes): one barrier per item.
  __syncthreads();
  // Prologue: Q (bf16: with block 0's group) and blocks 0 .. kStages-2, one group each.
  LoadQTile<kFp8, kW>(p, it, q_s);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nblk) IssueKvBlock<kFp8, kW>(p, it, s, LoadPageId<kW>(p, it, s), slot(s), cu);
    CpAsyncCommit();
  }
  int32_t next_page = kStages - 1 < nblk ? LoadPageId<kW>(p, it, kStages - 1) : -1;

  float o[kRg][kNt][4];
#pragma unroll
  for (int rg = 0; rg < kRg; ++rg) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[rg][nt][e] = 0.0f;
    }
  }
  float m[2] = {NegInf(), NegInf()}, l[2] = {0.0f, 0.0f};

  for (int i = 0; i < nblk; ++i) {
    // Block i landed (this thread's copies), and after the barrier everyone's; the barrier
    // also retires block i-1's readers, so its slot can take block i + kStages - 1.
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    if (i + kStages - 1 < nblk) {
      IssueKvBlock<kFp8, kW>(p, it, i + kStages - 1, next_page, slot(i + kStages - 1), cu);
    }
    CpAsyncCommit();  // possibly empty: keeps one group per iteration for the wait count
    // The next issue's page ids: loaded now, used one iteration later.
    if (i + kStages < nblk) next_page = LoadPageId<kW>(p, it, i + kStages);
    const uint16_t* kv_t;
    if (kFp8) {
      WidenKvBlock<kW>(slot(i), kv16);
      __syncthreads();
      kv_t = kv16;
    } else {
      kv_t = reinterpret_cast<const uint16_t*>(slot(i));
    }
    const int64_t j0 = it.begin + static_cast<int64_t>(i) * kBlockN;

    float s[kBlockN / 8][4];
    if (s_active) {
      PartialScores<kFp8>(q_s, kv_t, rg_s, k_begin, k_end, lane, s);
      // Partial S of part kp >= 1 -> slot (kp - 1) * groups + rg_s, its 16 rows. Split: parts
      // 0 and 1 share slot rg_s, part 1 leaving its rows g there (for part 0) and part 0 its
      // rows g + 8 (for part 1); each keeps the half it finishes in registers.
      float* dst = sx_s + ((kp >= 1 ? kp - 1 : 0) * groups + rg_s) * 16 * kSxStride;
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (kp >= 2 || (kp == 1 && (!kSplitFinish || h == 0)) ||
              (kSplitFinish && kp == 0 && h == 1)) {
            *reinterpret_cast<float2*>(dst + (g + 8 * h) * kSxStride + nt * 8 + 2 * t) =
                make_float2(s[nt][2 * h], s[nt][2 * h + 1]);
          }
        }
      }
    }
    __syncthreads();  // the other parts' partial S is in shared memory
    if (finisher) {
      // (Compile-time row halves in each branch: a run-time index into s would put the
      // array in local memory.)
      if (!kSplitFinish) {
        FinishPartialSum<0, 2>(sx_s, groups, rg_s, kparts, g, t, s);
        SoftmaxRows<kFp8, 0, 2>(s, j0, vend, scale_log2, rg_s * 16, lane, m, l, p_s, p_lo_s,
                                alpha_s);
      } else if (fh == 0) {
        FinishPartialSum<0, 1>(sx_s, groups, rg_s, kparts, g, t, s);
        SoftmaxRows<kFp8, 0, 1>(s, j0, vend, scale_log2, rg_s * 16, lane, m, l, p_s, p_lo_s,
                                alpha_s);
      } else {
        FinishPartialSum<1, 2>(sx_s, groups, rg_s, kparts, g, t, s);
        SoftmaxRows<kFp8, 1, 2>(s, j0, vend, scale_log2, rg_s * 16, lane, m, l, p_s, p_lo_s,
                                alpha_s);
      }
    }
    __syncthreads();  // P and alpha are in shared memory
#pragma unroll
    for (int rg = 0; rg < kRg; ++rg) {
      if (rg < nrg) {
        const float a0 = alpha_s[rg * 16 + g], a1 = alpha_s[rg * 16 + g + 8];
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          o[rg][nt][0] *= a0;
          o[rg][nt][1] *= a0;
          o[rg][nt][2] *= a1;
          o[rg][nt][3] *= a1;
        }
      }
    }
    AccumulatePv<kFp8, kNt, kRg>(p_s, p_lo_s, kv_t, warp * B::kCols, nrg, lane, o);
  }
  CpAsyncWait<0>();  // only empty groups can be left; the next item starts clean

  // Epilogue: the softmax warps publish m and l; every warp normalizes and stores its
  // columns (bf16 or, with o_fp32, fp32 final O; fp32 partial O), 4 lanes of a row write
  // 16 / 32 bytes.
  if (finisher && t == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!kSplitFinish || h == fh) {
        row_m[rg_s * 16 + g + 8 * h] = m[h];
        row_l[rg_s * 16 + g + 8 * h] = l[h];
      }
    }
  }
  __syncthreads();
  const int col0 = warp * B::kCols;
#pragma unroll
  for (int rg = 0; rg < kRg; ++rg) {
    if (rg < nrg) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = rg * 16 + g + 8 * h;
        const float lr = row_l[row];
        const float inv = lr > 0.0f ? p.kv_scale / lr : 0.0f;
        if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
          float* dst = p.o_fp32 + FinalRow(p, it, row) * kDimV + col0 + 2 * t;
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            *reinterpret_cast<float2*>(dst + nt * 8) =
                make_float2(o[rg][nt][2 * h] * inv, o[rg][nt][2 * h + 1] * inv);
          }
        } else if (it.partial < 0) {
          uint16_t* dst = p.o + FinalRow(p, it, row) * kDimV + col0 + 2 * t;
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            *reinterpret_cast<uint32_t*>(dst + nt * 8) =
                PackBf16x2(o[rg][nt][2 * h] * inv, o[rg][nt][2 * h + 1] * inv);
          }
        } else {
          float* dst = p.partial_o + PartialRow(it, row) * kDimV + col0 + 2 * t;
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            *reinterpret_cast<float2*>(dst + nt * 8) =
                make_float2(o[rg][nt][2 * h] * inv, o[rg][nt][2 * h + 1] * inv);
          }
        }
      }
    }
  }
  if (tid < it.rows) WriteLse(p, it, tid, RowLse(row_m[tid], row_l[tid]));
  // The next item overwrites Q, the ring, P and the row stats only after its own barriers;
  // row_m / row_l are rewritten only in its epilogue, after those barriers.
}

#else  // !MLAPS_MLA_MMA
// =============================================================================================
// Generic path (AMD, nvcc host pass): one warp per q row, lanes over the head dims.
// =============================================================================================

constexpr int kMaxQPerLane = kDimQk / 32;  // 18 with 32 lanes, 9 used with 64
constexpr int kMaxVPerLane = kDimV / 32;   // 16 with 32 lanes, 8 used with 64

__device__ __forceinline__ float WarpSum(float x) {
  for (int mask = warpSize / 2; mask > 0; mask /= 2) x += __shfl_xor(x, mask);
  return x;
}

template <bool kFp8>
__device__ void RunItemGeneric(const MlaDecodeParams& p, const Item& it, int cu) {
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const int num_warps = blockDim.x / warpSize;
  const float scale_log2 = p.sm_scale * p.q_scale * p.kv_scale * kLog2e;
  for (int row = warp; row < it.rows; row += num_warps) {
    const int64_t vend = VisibleEnd(p, it, it.first_token + row / it.hpg);
    const int64_t q_off = FinalRow(p, it, row) * kDimQk;
    float q[kMaxQPerLane], acc[kMaxVPerLane];
#pragma unroll
    for (int k = 0; k < kMaxQPerLane; ++k) {
      const int d = lane + k * warpSize;
      q[k] = d < kDimQk ? LoadElem<kFp8>(p.q, q_off + d) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kMaxVPerLane; ++k) acc[k] = 0.0f;
    float m = NegInf(), l = 0.0f;
    for (int64_t j = it.begin; j < vend; ++j) {
      const int64_t slot = KvSlot(p, it, j, cu);
      if (slot < 0) continue;  // reported; the token reads as zeros: logit 0, V 0
      const int64_t kv_off = slot * kDimQk;
      float dot = 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxQPerLane; ++k) {
        const int d = lane + k * warpSize;
        if (d < kDimQk) dot += q[k] * LoadElem<kFp8>(p.kv_cache, kv_off + d);
      }
      const float x = WarpSum(dot) * scale_log2;
      const float m_new = MaxF(m, x);
      const float alpha = exp2f(m - m_new);  // 0 while m == -inf
      const float pj = exp2f(x - m_new);
      l = l * alpha + pj;
#pragma unroll
      for (int k = 0; k < kMaxVPerLane; ++k) {
        const int d = lane + k * warpSize;
        if (d < kDimV) acc[k] = acc[k] * alpha + pj * LoadElem<kFp8>(p.kv_cache, kv_off + d);
      }
      m = m_new;
    }
    const float inv = l > 0.0f ? p.kv_scale / l : 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxVPerLane; ++k) {
      const int d = lane + k * warpSize;
      if (d >= kDimV) continue;
      if (it.partial < 0 && p.o_fp32 != nullptr) {  // fp32 final O (CP ranks)
        p.o_fp32[FinalRow(p, it, row) * kDimV + d] = acc[k] * inv;
      } else if (it.partial < 0) {
        p.o[FinalRow(p, it, row) * kDimV + d] = FloatToBf16(acc[k] * inv);
      } else {
        p.partial_o[PartialRow(it, row) * kDimV + d] = acc[k] * inv;
      }
    }
    if (lane == 0) WriteLse(p, it, row, RowLse(m, l));
  }
}

#endif  // MLAPS_MLA_MMA

// ---- The decode kernel ---------------------------------------------------------------------

__device__ __forceinline__ uint8_t* DynamicSmem() {
#if defined(MLAPS_HOST_EMULATION)
  return mlaps_emu::DynamicSmem();
#else
  extern __shared__ __align__(16) uint8_t mla_dynamic_smem[];
  return mla_dynamic_smem;
#endif
}

// O = 0, LSE = -inf for the rows of requests without kv pages (no item covers them), by the
// block's first `threads` threads.
__device__ inline void ClearEmptyRequests(const MlaDecodeParams& p, int threads) {
  for (int b = blockIdx.x; b < p.num_requests; b += gridDim.x) {
    const int64_t kv0 = p.kv_indptr[b], kv1 = p.kv_indptr[b + 1];
    const int64_t qo0 = p.qo_indptr[b], qo1 = p.qo_indptr[b + 1];
    if (kv1 != kv0 || qo0 < 0 || qo1 < qo0 || qo1 > p.num_q_tokens) continue;
    const int64_t rows = (qo1 - qo0) * p.num_heads, first = qo0 * p.num_heads;
    for (int64_t x = threadIdx.x; x < rows * kDimV; x += threads) {
      if (p.o_fp32 != nullptr) {
        p.o_fp32[first * kDimV + x] = 0.0f;
      } else {
        p.o[first * kDimV + x] = 0;
      }
    }
    for (int64_t x = threadIdx.x; x < rows; x += threads) p.lse[first + x] = NegInf();
  }
}

// The plan CU this block runs (MlaPlanCu: a plan's kv lanes on neighbouring blocks).
__device__ __forceinline__ int PlanCu(const MlaDecodeParams& p) {
  return MlaPlanCu(static_cast<int>(blockIdx.x), p.num_cu, p.cu_lanes);
}

// Walks block PlanCu's work items (work_indptr[cu] .. work_indptr[cu+1]-1): decodes and
// checks each (tiles of at most max_rows rows), records the trace, reports bad items and
// calls run_item(item, cu) for the valid ones; then clears the rows of empty requests.
// Every path's kernel is this walk around its own item routine; the block's first
// `record_threads` threads (0: all) run it with kRecord = true. kRecord = false: the walk of
// the other threads (the sm90 producer), which only runs the items: no trace, status or
// clearing, so it keeps no trace state in registers.
template <bool kRecord = true, class RunItem>
__device__ void WalkItems(const MlaDecodeParams& p, int max_rows, RunItem&& run_item,
                          int record_threads = 0) {
  const int cu = PlanCu(p);
  const int64_t w0 = p.work_indptr[cu], w1 = p.work_indptr[cu + 1];
  int order = 0;
  if (w0 < 0 || w1 < w0 || w1 > p.work_info_capacity) {
    if (threadIdx.x == 0) Report(p.status, kMlaBadWorkIndptr, cu, -1, w1);
  } else {
    for (int64_t w = w0; w < w1; ++w, ++order) {
      int32_t info[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) info[k] = p.work_info[w * 8 + k];
      Item it;
      int64_t value = 0;
      const int code = DecodeItem(p, info, &it, &value, max_rows);
      MlaTraceEntry* entry = nullptr;
      if (kRecord && p.trace != nullptr && threadIdx.x == 0) {
        if (w0 + order < p.trace_capacity) {
          entry = p.trace + w0 + order;
          entry->cu = cu;
          entry->order = order;
          entry->work = static_cast<int>(w);
          entry->ran = code == kMlaOk;
#pragma unroll
          for (int k = 0; k < 8; ++k) entry->info[k] = info[k];
          entry->clock_begin = p.trace_clocks ? clock64() : 0;
        } else {
          Report(p.status, kMlaBadTrace, cu, static_cast<int>(w), w0 + order);
        }
      }
      if (code != kMlaOk) {
        if (kRecord && threadIdx.x == 0) Report(p.status, code, cu, static_cast<int>(w), value);
        continue;
      }
      run_item(it, cu);
      if (kRecord && entry != nullptr) entry->clock_end = p.trace_clocks ? clock64() : 0;
    }
  }
  if (!kRecord) return;
  if (p.trace_counts != nullptr && threadIdx.x == 0) p.trace_counts[cu] = order;
  ClearEmptyRequests(p, record_threads > 0 ? record_threads : static_cast<int>(blockDim.x));
}

template <bool kFp8, int kW, int kRg>
__device__ void DecodeBlock(const MlaDecodeParams& p) {
  WalkItems(p, 16 * kRg, [&](const Item& it, int cu) {
#if MLAPS_MLA_MMA
    RunItemMma<kFp8, kW, kRg>(p, it, DynamicSmem(), cu);
#else
    RunItemGeneric<kFp8>(p, it, cu);
#endif
  });
}

// kW warps (8 or 16) a block; kRg row groups in the Q tile (4: one block per SM, its shared
// memory takes the SM; 1: the compact layout, two blocks per SM, so <= 128 registers).
template <bool kFp8, int kW, int kRg>
__global__ void __launch_bounds__(kW * 32, kRg == 1 ? 2 : 1)
    MlaDecodeKernel(const MlaDecodeParams p) {
  mlapsTriggerDependents();  // the reduce may launch (it waits for this grid: LaunchMlaReduce)
  DecodeBlock<kFp8, kW, kRg>(p);
}

// Whether the compact layout (MmaLayout<., 1>) can run a launch: 256 threads and a plan whose
// tiles use <= 16 rows ((H / head_fold) x tokens_per_tile). The sm90 registry's
// cost entry with blocks_per_cu: 2 marks the same tiles (a test keeps the two in step).
__host__ __device__ inline bool CompactLayoutFits(const MlaDecodeParams& p) {
  const int threads = p.block_threads != 0 ? p.block_threads : kThreads;
  return threads == 256 && p.head_fold >= 1 && p.num_heads / p.head_fold * p.tokens_per_tile <= 16;
}

// Whether the tensor-core path runs it with the compact layout on a device of `sms` SMs: it
// fits and the grid has more than one block an SM (two compact blocks share an SM; a grid
// of at most one block per SM keeps the 64-row layout's deeper ring).
__host__ __device__ inline bool UseCompactLayout(const MlaDecodeParams& p, int sms) {
  return CompactLayoutFits(p) && p.num_cu > sms;
}

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_MLA_DECODE_DEVICE_H_
