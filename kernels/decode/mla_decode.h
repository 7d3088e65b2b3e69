// The persistent MLA decode kernel and its reduce, driven by a WorkPlan (metadata/work_plan.h).
//
// What runs (sim/executor.h states the execution model; the kernels follow it):
//   * Decode: a persistent grid of num_cu blocks, one a plan CU (PlanCu: block b runs CU b, or
//     with cu_lanes the lanes of a plan side by side). CU c's block walks work items
//     work_indptr[c] .. work_indptr[c+1]-1 in order. An item is one qo tile (q tokens
//     [qo_start, qo_end) of virtual request v = b * head_fold + g, i.e. heads
//     [g*H/r, (g+1)*H/r) of request b) against the kv pages [kv_start, kv_end) of request b:
//     fp32 online softmax over kv blocks, then either final O (bf16; fp32 with o_fp32) + LSE
//     (partial_qo_loc == -1) or normalized fp32 partial O + LSE (rows partial_qo_loc + t).
//     All LSEs are natural log (m + ln(l)).
//   * Reduce: one entry per split qo tile merges its pieces' partial rows (logsumexp;
//     NaN / +inf / -inf pieces count as -inf; no live piece -> O = 0, LSE = -inf).
// Rows that no item and no reduce entry writes are those of requests without kv pages
// (sparse graph padding): the decode kernel writes O = 0, LSE = -inf for them.
//
// Paths: on NVIDIA (sm_90a) tiles of 64 q rows run on the tensor cores (mma.sync
// m16n8k16, bf16; fp8 e4m3fn inputs are widened exactly to f16 and run as f16 MMAs), with
// the Q tile and a cp.async ring of 32-token kv blocks (3 bf16 / 5 fp8 slots) in shared
// memory (mla_decode_device.h; measurements in notes.md). On AMD
// (gfx90a / gfx940) a generic scalar path (one wavefront per q row, fp32 FMAs) computes
// the same function; it is a portability path, not tuned. CP round-robin (one rank's shard,
// kMlaMaskCpRoundRobin) masks by global positions. Final O is bf16 by default; a CP rank
// sets o_fp32 instead of o, so its O stays fp32 (the same values before the one rounding)
// until kernels/cp/lse_merge.h merges the ranks: rounding each rank's O to bf16 first fails
// docs/design.md's elementwise gate where ranks cancel (sim::ExecutorOptions::final_o_bf16).
//
// Plain C++ (no GPU headers): usable from .cc files. Launches take the stream as void*
// (hipStream_t / cudaStream_t) and return a hipError_t value as int.
#ifndef MLAPS_KERNELS_MLA_DECODE_H_
#define MLAPS_KERNELS_MLA_DECODE_H_

#include <cstdint>

namespace mlaps {

// Element type of Q and of the KV cache (both the same).
enum MlaDType : int32_t {
  kMlaBf16 = 0,
  kMlaFp8E4m3fn = 1,  // OCP e4m3fn (sm_90, gfx950); e4m3fnuz (gfx942) is not supported here
};

// Which kv tokens a q token sees (sim::KvVisibility).
enum MlaMask : int32_t {
  // Dense MTP, bottom-right: token i of request b sees request-local kv positions
  // j < (E + kv_offset) - qlen_b + i + 1, where E is the item's kv end (reconstructed from
  // the plan: the mask uses what the item carries, exactly as the simulator does).
  kMlaMaskCausal = 0,
  // Every kv token of the item: sparse per-token batches (kv_indices are the gathered
  // slots, page_size 1) and non-causal batches.
  kMlaMaskNone = 1,
  // CP round-robin, causal by global positions (docs/design.md "CP round-robin"): the batch is
  // rank cp_rank's shard (metadata/cp_shard.h) and request-local kv token j is global
  // position g = (j / I) * I * W + cp_rank * I + j % I; token i of request b sees j iff
  // g < cp_global_kv_len[b] - qlen_b + i + 1 (no local trim; kv_offset is ignored). g grows
  // with j, so what a token sees is still a prefix of the local tokens. A token that sees
  // none of the rank's tokens gets O = 0, LSE = -inf.
  kMlaMaskCpRoundRobin = 2,
};

// NVIDIA decode kernels (MlaDecodeParams::path). Auto, 256 threads, one block an SM (not the
// compact layout of two 16-row blocks an SM): tiles of at most 16 rows on the narrow-tile
// wgmma kernel (mla_decode_sm90_narrow.h, bf16 and fp8); wider tiles on the wgmma kernel of
// the dtype, bf16 hi + lo P on bf16 tiles for bf16 (mla_decode_sm90_bf16.h) and f16 tiles for
// fp8 (mla_decode_sm90.h). The mma.sync kernel (mla_decode_device.h) runs the rest (the
// compact layout, 512 threads). The same function every way.
enum MlaDecodePath : int32_t {
  kMlaPathAuto = 0,
  kMlaPathMmaSync = 1,      // the mma.sync kernel for every launch
  kMlaPathWgmma = 2,        // the 64-row wgmma kernel of the dtype, whatever the tile's rows
  kMlaPathWgmmaF16 = 3,     // the f16-tile wgmma kernel for bf16 as well (mla_decode_sm90.h)
  kMlaPathWgmmaNarrow = 4,  // the narrow-tile kernel (tiles of at most 16 rows only)
  kMlaPathWgmmaF16Pv = 5,   // the 64-row kernel with f16 P V from registers, bf16 and fp8
                            // (mla_decode_sm90_f16pv.h; bf16 V beyond f16's range reported)
};

// The status word. The first error any block meets wins (atomic compare-and-swap on code);
// the block that set it fills in the rest. Bad items are skipped, never run out of bounds.
enum MlaStatusCode : int32_t {
  kMlaOk = 0,
  kMlaBadWorkIndptr = 1,      // work_indptr[cu] > work_indptr[cu+1] or past work_info_capacity
                              // (value: work_indptr[cu+1])
  kMlaBadBatchIdx = 2,        // batch_idx outside [0, num_requests * head_fold) (value)
  kMlaBadQoIndptr = 3,        // qo_indptr of the item's request decreasing or past num_q_tokens
  kMlaBadKvIndptr = 4,        // kv_indptr of the request decreasing or past num_kv_indices
  kMlaBadLastPageLen = 5,     // kv_last_page_lens[b] outside [1, page_size] (value)
  kMlaBadQoRange = 6,         // [qo_start, qo_end) empty or outside virtual request v's tokens,
                              // or more rows than a tile holds (value: qo_end)
  kMlaBadKvRange = 7,         // [kv_start, kv_end) outside request b's pages (value: kv_end)
  kMlaBadPartialLoc = 8,      // partial rows outside [0, partial_rows_capacity) or < -1 (value)
  kMlaBadPageId = 9,          // kv_indices[value_index] outside [0, num_pages) (value: page id);
                              // the page reads as zeros, the rest of the item still runs
  kMlaBadReduceIndptr = 10,   // reduce_indptr decreasing, not from 0 or past the partial map
  kMlaBadReduceTile = 11,     // reduce_final_map[k] outside the folded q tokens or one request
  kMlaBadReducePartial = 12,  // a reduce_partial_map row outside the partial buffers
  kMlaBadReduceCount = 13,    // the number of reduce tiles exceeds reduce_tiles_capacity
  kMlaBadTrace = 14,          // a trace slot past trace_capacity (the trace entry is dropped)
  kMlaF16Range = 15,          // sm90 kernel, bf16 inputs: a Q or kv value of magnitude >= 65520
                              // or an infinity (value: its bf16 bits without the sign). The
                              // kernel computes in f16, which cannot hold it; that O is inf/NaN
                              // (the f16 P V kernel widens V only, scaled by 2^-8: Q and K keep
                              // bf16's range, V up to a finite magnitude of 2^24)
  kMlaBadMergePiece = 16,     // merge in the decode: an item's partial rows are no piece of a
                              // split tile (value: its partial_qo_loc; index: the tile, -1 when
                              // none has its q tokens), or a tile's pieces ran more often than
                              // it has them (value: the tile's counter); that tile is not merged
};

struct MlaStatus {
  int32_t code;   // MlaStatusCode
  int32_t cu;     // plan CU whose block found it (reduce: the reduce tile); -1 when none
  int32_t index;  // work item (reduce: partial map entry, page index, ...); -1 when none
  int32_t pad;
  int64_t value;  // the offending value
};
static_assert(sizeof(MlaStatus) == 24, "MlaStatus is 24 bytes");

// One executed work item (trace mode): the block of plan CU `cu` ran item `work` (its 8
// work_info words as the kernel read them) as its `order`-th item. Written at
// trace[work_indptr[cu] + order].
struct MlaTraceEntry {
  int32_t cu;
  int32_t order;
  int32_t work;
  int32_t ran;          // 1: computed; 0: skipped as invalid (see the status word)
  int32_t info[8];      // batch_idx, partial_qo_loc, qo_start, qo_end, kv_start, kv_end,
                        // kv_offset, pad
  int64_t clock_begin;  // clock64() (SM cycles) at the item's start and end; 0 when
  int64_t clock_end;    // MlaDecodeParams::trace_clocks is false
};
static_assert(sizeof(MlaTraceEntry) == 64, "MlaTraceEntry is 64 bytes");

// The plan's split tiles for the decode to merge itself (MlaDecodeParams::merge): with
// `counters` set, the block that completes the last piece of a split tile merges the tile's
// pieces into final O / LSE itself (the reduce kernel's arithmetic, so the same bits), and no
// reduce launch is needed. The sm90 kernels find their pieces' tiles (the entry of
// reduce_final_map with a piece's q tokens; any order) before their items run and count each
// piece on counters[k] after them; the block whose count completes tile k merges it and sets
// counters[k] back to 0. So the counters must be 0 before the first launch (the caller zeroes
// them once) and every launch leaves them 0; a launch that was cut short (a reported plan
// error) may not, so re-zero them after a status error. Measured on the H200 (notes.md, session
// 25): faster than decode + reduce on 16-row tiles, slower on 64-row tiles.
struct MlaSplitMerge {
  const int32_t* reduce_indptr = nullptr;  // as MlaReduceParams
  const int32_t* reduce_final_map = nullptr;
  const int32_t* reduce_partial_map = nullptr;
  int64_t reduce_partial_map_capacity = 0;
  int num_reduce_tiles = 0;
  const int32_t* num_reduce_tiles_device = nullptr;
  int reduce_tiles_capacity = 0;
  int32_t* counters = nullptr;  // [reduce_tiles_capacity]; nullptr: the decode merges nothing
};

// The plan CU that decode block `block` runs with MlaDecodeParams::cu_lanes = L (which divides
// num_cu): (block % L) * (num_cu / L) + block / L, so the L kv lanes of one walk position (plan
// CUs num_cu / L apart) run on neighbouring blocks; `block` itself when L is 1. A bijection on
// [0, num_cu). Host and device (constexpr).
constexpr int MlaPlanCu(int block, int num_cu, int cu_lanes) {
  return cu_lanes > 1 ? (block % cu_lanes) * (num_cu / cu_lanes) + block / cu_lanes : block;
}

// Everything the decode kernel reads and writes. Device pointers unless noted; all ranges
// are half-open [begin, end); sizes are element counts.
struct MlaDecodeParams {
  // ---- Inputs --------------------------------------------------------------------------
  const void* q = nullptr;              // [num_q_tokens, num_heads, 576] (dtype), 16-byte aligned
  const void* kv_cache = nullptr;       // [num_pages, page_size, 576] (dtype), one KV head;
                                        // V = the first 512 of a row; 16-byte aligned
  const int32_t* kv_indices = nullptr;  // [num_kv_indices] page ids (sparse: slot ids)
  const int32_t* qo_indptr = nullptr;   // [num_requests + 1] the batch's (unfolded) q tokens
  const int32_t* kv_indptr = nullptr;   // [num_requests + 1] into kv_indices
  const int32_t* kv_last_page_lens = nullptr;  // [num_requests] in [1, page_size]
  int num_requests = 0;                        // B
  int64_t num_q_tokens = 0;    // rows of Q / O (every qo_indptr entry must be <= this)
  int64_t num_pages = 0;       // pages in kv_cache (every page id must be < this)
  int64_t num_kv_indices = 0;  // entries of kv_indices (every kv_indptr entry <= this)
  int num_heads = 16;          // H
  int page_size = 64;          // tokens per page, a power of two in [1, 4096]
  MlaDType dtype = kMlaBf16;   // of Q and of the KV cache
  MlaMask mask = kMlaMaskCausal;
  float sm_scale = 1.0f / 24.0f;  // logits = q.k * sm_scale * q_scale * kv_scale
  float q_scale = 1.0f;           // per-tensor descales (1 for bf16)
  float kv_scale = 1.0f;          // O = softmax . V * kv_scale
  // ---- CP round-robin (read only when mask == kMlaMaskCpRoundRobin) --------------------
  int cp_world_size = 1;  // W >= 1: ranks the KV is interleaved over
  int cp_interleave = 1;  // I, a power of two: consecutive global positions per run (1: token)
  int cp_rank = 0;        // this rank, in [0, W)
  const int32_t* cp_global_kv_len = nullptr;  // [num_requests] each request's GLOBAL kv length
                                              // (all ranks' tokens); required for CP
  // ---- The plan (device memory) and its variant (host values, from the plan) -----------
  const int32_t* work_indptr = nullptr;  // [num_cu + 1]
  const int32_t* work_info = nullptr;    // [work_info_capacity][8] int32 (WorkInfo rows)
  int64_t work_info_capacity = 0;        // rows of work_info
  int num_cu = 0;                        // grid size: one persistent block per CU
  // WorkPlan::kv_lanes (1: any plan): block b runs plan CU MlaPlanCu(b, num_cu, cu_lanes), so
  // that a request's tiles in the L kv lanes (CUs num_cu / L apart in the plan) run on
  // neighbouring blocks, which the hardware places close in practice: the second read of a kv
  // block then hits the L2 (bf16 (32,3) on the H100: 1.82 -> 1.55 GB from DRAM, 7% faster, as
  // measured by renumbering the plan's CUs the same way; notes.md, sessions 32-33). Placement
  // only: O, LSE and the trace (plan CUs) do not depend on it. Must divide num_cu. Staging sets
  // it (DecodeParamsFor); the C API takes it from its caller (Python passes UniformKvLanes,
  // metadata/planner.h), and the CP rank runner passes UniformKvLanes of its shape.
  int cu_lanes = 1;
  int head_fold = 1;        // r (WorkPlan::head_fold): H / r heads per virtual request
  int tokens_per_tile = 1;  // WorkPlan::tokens_per_tile: most q tokens in one item
  int rows_per_tile = 64;   // WorkPlan::rows_per_tile: must be 64 (the sm90 registry's tiles);
                            // (H / r) * tokens_per_tile <= rows_per_tile
  // ---- Outputs ---------------------------------------------------------------------------
  uint16_t* o = nullptr;              // [num_q_tokens, H, 512] bf16 bits (final O)
  float* o_fp32 = nullptr;            // [num_q_tokens, H, 512] fp32 final O, set instead of o
                                      // (exactly one of the two): CP ranks, merged before
                                      // the one bf16 rounding; 16-byte aligned
  float* lse = nullptr;               // [num_q_tokens, H] natural log
  float* partial_o = nullptr;         // [partial_rows_capacity, H / r, 512] fp32, normalized
  float* partial_lse = nullptr;       // [partial_rows_capacity, H / r] fp32, m + ln(l)
  int64_t partial_rows_capacity = 0;  // rows (folded q tokens) of the partial buffers
  MlaStatus* status = nullptr;        // required; the caller zeroes it before the launch
  // ---- Trace mode (optional) ------------------------------------------------------------
  MlaTraceEntry* trace = nullptr;  // [trace_capacity]: entry work_indptr[cu] + order
  int64_t trace_capacity = 0;
  int32_t* trace_counts = nullptr;  // [num_cu]: items each plan CU ran (written when trace)
  bool trace_clocks = false;        // also record clock64() around each item
  // ---- Tuning -----------------------------------------------------------------------------
  // Threads of a decode block: 256 (8 warps) or 512 (16 warps: twice the warps per
  // scheduler, 64 instead of 128 accumulator registers a thread); 0: the default, 256. On
  // the H200 512 measured 25-50% slower (spills at the 128-register cap, twice the P
  // fragment traffic; kernels/decode/notes.md). Same function either way.
  int block_threads = 0;
  // Which NVIDIA kernel runs the launch (MlaDecodePath); the AMD build has one path.
  int32_t path = 0;
  // ---- Split tiles merged by the decode (optional) --------------------------------------
  // merge.counters set: O / LSE are final when the launch completes, split tiles included
  // (the sm90 kernels merge them in the kernel; on the other paths LaunchMlaDecode enqueues
  // the reduce kernel after the decode). Unset: the caller runs LaunchMlaReduce.
  MlaSplitMerge merge;
};

// Everything the reduce kernel reads and writes (device pointers unless noted).
struct MlaReduceParams {
  const int32_t* reduce_indptr = nullptr;       // [tiles + 1] into reduce_partial_map
  const int32_t* reduce_final_map = nullptr;    // [tiles][2]: folded qo_start, qo_end
  const int32_t* reduce_partial_map = nullptr;  // [pieces]: first partial row of each piece
  int64_t reduce_partial_map_capacity = 0;      // entries of reduce_partial_map
  // The number of split tiles: *num_reduce_tiles_device when set (e.g. the GPU planner's
  // GpuPlanStatus::num_reduce_tiles, so a graph replays any plan), else num_reduce_tiles.
  int num_reduce_tiles = 0;
  const int32_t* num_reduce_tiles_device = nullptr;
  int reduce_tiles_capacity = 0;       // grid size; >= every plan's split tiles (<= num_cu)
  const int32_t* qo_indptr = nullptr;  // [num_requests + 1], the batch's (unfolded)
  int num_requests = 0;
  int64_t num_q_tokens = 0;
  int num_heads = 16;
  int head_fold = 1;
  const float* partial_o = nullptr;  // as MlaDecodeParams
  const float* partial_lse = nullptr;
  int64_t partial_rows_capacity = 0;
  uint16_t* o = nullptr;    // final O (bf16 bits) and LSE rows of the split tiles
  float* o_fp32 = nullptr;  // fp32 final O instead of o (exactly one), as MlaDecodeParams
  float* lse = nullptr;
  MlaStatus* status = nullptr;  // required; shared with the decode launch is fine
};

// nullptr when `params` can be launched, else a static message naming the bad field.
const char* MlaDecodeParamsError(const MlaDecodeParams& params);
const char* MlaReduceParamsError(const MlaReduceParams& params);

// Dynamic shared memory of one decode block of this launch on this build's path. Tiles of
// <= 16 rows ((H / head_fold) x tokens_per_tile, e.g. H = 16 and qlen 1) with 256-thread
// blocks run a compact 16-row layout (~111 KB, <= 128 registers, two blocks an SM) when the
// grid (num_cu) exceeds the SM count; otherwise (sm90) the narrow-tile kernel on the 64-row
// kernels' layout (~219 KB, one block an SM). The planner's default grid is one block an SM
// (the sm90 registry's first 16-row cost entry), so default plans run the narrow kernel
// (faster from b = 64 ctx 8192 up on the H200); the registry's second 16-row entry
// (blocks_per_cu: 2) costs a grid of two blocks an SM on the compact layout.
int64_t MlaDecodeSharedBytes(const MlaDecodeParams& params);

// The kernel LaunchMlaDecode runs for these params on this build and device: "generic" (AMD),
// "mma" (mma.sync), "bf16" (sm90 bf16 hi + lo), "f16" (sm90 f16 tiles) or "narrow" (sm90
// narrow tiles). For benchmarks and logs; the params must be valid.
const char* MlaDecodeKernelName(const MlaDecodeParams& params);

// Enqueue on `stream` (nullptr: the default stream); capturable into a graph. Return 0
// (hipSuccess), hipErrorInvalidValue (1) when the params error is not nullptr (nothing is
// enqueued), or the launch's error.
int LaunchMlaDecode(const MlaDecodeParams& params, void* stream);
// The reduce is a programmatic dependent launch of the kernel enqueued just before it (sm_90;
// AMD: a plain launch): its blocks may start while that kernel (normally LaunchMlaDecode's)
// finishes, read the plan's reduce arrays at once and the partials only after that kernel
// completed. So the reduce arrays (and num_reduce_tiles_device) must be written before that
// previous kernel is launched, as the GPU planner and host uploads are.
int LaunchMlaReduce(const MlaReduceParams& params, void* stream);

namespace mla {
struct TmaMap;  // mla_decode_sm90_block.h
}  // namespace mla
// The sm90 kernels' TMA map over params.kv_cache (num_pages * page_size rows of 576 elements of
// params.dtype, 64 x 64 boxes, swizzled as mla::KvMapSwizzleBytes says; raw_e4m3: e4m3 rows kept
// unwidened) into *map; 0 (hipSuccess) or hipErrorInvalidValue (the driver's encoder missing or
// refusing). AMD: an empty map. The launches use it, and so does sm90_kv_stream (the same loads
// without the kernels).
int EncodeKvTmaMap(const MlaDecodeParams& params, bool raw_e4m3, mla::TmaMap* map);

// Probe builds only (MLAPS_SM90_TRACE: the `mla_decode_traced` library): write the sm90
// kernels' timeline probe (mla_decode_sm90_probe.h) of the last launch to `path` as raw uint32
// [block][warpgroup][kv block][event]; true when written. False on every other build.
bool DumpSm90Trace(const char* path);

}  // namespace mlaps

#endif  // MLAPS_KERNELS_MLA_DECODE_H_
