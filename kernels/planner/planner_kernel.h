// The GPU planner: PlanDecodeInto's greedy-payload plan (metadata/planner.h), computed on the
// device from device-resident batch arrays, so that a decode step plans without a host round
// trip and the whole step (plan + attention + reduce) fits in one CUDA/HIP graph.
//
// Contract: for a batch that ValidateBatch accepts, with the variant and options resolved on
// the host exactly as PlanDecodeInto resolves them (ResolveVariant at the batch's max qlen,
// ResolveOptions), the kernel writes the same bytes as PlanDecodeInto into the same buffers:
// qo_indptr (folded), work_indptr, work_info, reduce_indptr, reduce_final_map,
// reduce_partial_map; and nothing beyond the used prefix of each. On a bad batch or a buffer
// that is too small it writes only the status word (GpuPlanStatus) and leaves every output
// buffer unmodified, like the host planner. It never reads or writes out of bounds.
//
// Plain C++ (no GPU headers): usable from .cc files. The launch takes the stream as void*
// (a hipStream_t / cudaStream_t) and returns a hipError_t value as int.
//
// What is static per CUDA graph (host-resolved, passed by value in GpuPlannerParams): the
// variant (head_fold, tokens_per_tile), the resolved options, page size, mode flags, the
// number of requests and the buffer capacities. What changes per step (read from device
// memory at run time): qo_indptr, kv_indptr, kv_last_page_lens.
//
// Limits of this implementation: the greedy_payload policy only. longest_first (policy 1) is
// refused before anything is enqueued: GpuPlannerParamsError names the policy and
// LaunchGpuPlanner returns hipErrorInvalidValue (no status word is written); plan it on the
// host. One thread block holds the batch in shared memory (GpuPlannerSharedBytes: about 20
// bytes per qo tile, 24 per request, 24 per CU), which must fit the device: 227 KiB on H200,
// about 10k tiles (batch 1024 x qlen 4 x H 128 = 8192 tiles takes 192 KB); 64 KiB on gfx90a /
// gfx942. Larger plans are refused at launch (the launch's error), never planned out of bounds.
#ifndef MLAPS_KERNELS_PLANNER_KERNEL_H_
#define MLAPS_KERNELS_PLANNER_KERNEL_H_

#include <cstdint>

namespace mlaps {

// The status word (GpuPlanStatus::code). Input errors come in ValidateBatch's order, so the
// code names the same first error the host planner reports; `index` is the entry or request
// it names ("qo_indptr[3] = ..." -> index 3), `value` the offending value.
enum GpuPlanCode : int32_t {
  kGpuPlanOk = 0,
  kGpuPlanQoIndptrStart = 1,        // qo_indptr[0] != 0 (index 0)
  kGpuPlanQoIndptrNegative = 2,     // qo_indptr[index] < 0
  kGpuPlanQoIndptrDecreasing = 3,   // qo_indptr[index] < qo_indptr[index - 1]
  kGpuPlanKvIndptrStart = 4,        // kv_indptr[0] != 0 (index 0)
  kGpuPlanKvIndptrNegative = 5,     // kv_indptr[index] < 0
  kGpuPlanKvIndptrDecreasing = 6,   // kv_indptr[index] < kv_indptr[index - 1]
  kGpuPlanQTokensOverflow = 7,      // qo_indptr[B] * num_heads * 2 > INT32_MAX (index B)
  kGpuPlanQlenInvalid = 8,          // request index: qlen < 1 (dense) or qlen != 1 (sparse)
  kGpuPlanQlenAboveMax = 9,         // request index: qlen > params.max_qlen (GPU only: the
                                    // shared memory and the variant were sized for max_qlen)
  kGpuPlanLastPageLenInvalid = 10,  // not in [1, page_size] ([0, page_size] with no pages)
  kGpuPlanKvLenOverflow = 11,       // the request's kv length overflows int32
  kGpuPlanKvTotalOverflow = 12,     // the batch's total kv tokens overflow int32 at `index`
  kGpuPlanKvLenAboveTopk = 13,      // sparse: kv length > sparse_topk
  kGpuPlanKvLenBelowQlen = 14,      // causal trim: kv length < qlen
  kGpuPlanBufferTooSmall = 20,      // index: GpuPlanBuffer; value: entries needed;
                                    // capacity: entries given (checked in the host's order)
};

// Which output buffer a kGpuPlanBufferTooSmall refers to (GpuPlanStatus::index).
enum GpuPlanBuffer : int32_t {
  kGpuPlanBufQoIndptr = 0,
  kGpuPlanBufWorkIndptr = 1,
  kGpuPlanBufWorkInfo = 2,
  kGpuPlanBufReduceIndptr = 3,
  kGpuPlanBufReduceFinalMap = 4,
  kGpuPlanBufReducePartialMap = 5,
};

// Written by every launch (device memory, 48 bytes). `code` is the status word; the rest
// details it. On kGpuPlanOk the sizes say what was written (PlanSizes).
struct GpuPlanStatus {
  int32_t code;                  // GpuPlanCode
  int32_t index;                 // entry / request index, or GpuPlanBuffer; -1 when none
  int64_t value;                 // the offending value, or the entries a buffer needs
  int64_t capacity;              // kGpuPlanBufferTooSmall: the entries the buffer holds
  int32_t num_virtual_requests;  // B * head_fold: qo_indptr holds this + 1 entries
  int32_t num_works;             // work_info rows; work_indptr holds num_cu + 1 entries
  int32_t num_reduce_tiles;      // reduce_indptr: + 1 entries; reduce_final_map: 2 x this
  int32_t num_reduce_pieces;     // reduce_partial_map entries
  int32_t num_partial_rows;      // rows of the fp32 partial buffers in use
  int32_t scan_iterations;       // diagnostics: rounds of the parallel CU walk (a converged
                                 // walk checks out in one); +1000 when one warp finished it
                                 // window by window; +2000 when the jump tables finished it;
                                 // -1: one thread walked it (max_split_per_batch >= 2)
};
static_assert(sizeof(GpuPlanStatus) == 48, "GpuPlanStatus is 48 bytes");

// Everything the kernel needs. Device pointers unless noted; ranges are half-open.
struct GpuPlannerParams {
  // ---- The batch (device memory, read only; change per step) ----------------------------
  const int32_t* qo_indptr = nullptr;          // [num_requests + 1] q tokens per request
  const int32_t* kv_indptr = nullptr;          // [num_requests + 1] pages (into kv_indices)
  const int32_t* kv_last_page_lens = nullptr;  // [num_requests], tokens in each last page
  int num_requests = 0;  // B >= 1 (sparse per-token mode: the T = B * qlen tokens)
  int max_qlen = 1;      // >= every request's qlen; sizes shared memory. The variant below
                         // must be ResolveVariant's at the batch's max qlen for the plan to
                         // match PlanDecode (an engine's MTP steps all have the same qlen)
  // ---- Batch constants (Batch fields; static per graph) ----------------------------------
  int num_heads = 16;       // H in {16, 32, 48, 64, 128}: the int32 row-overflow check
  int page_size = 1;        // tokens per KV page, a power of two in [1, 2^20]
  bool causal_trim = true;  // causal && !cp_round_robin && sparse_topk == 0: tiles see
                            // kv [0, L - qlen + last token + 1), and kv_len >= qlen is checked
  int sparse_topk = 0;      // > 0: sparse per-token batch (qlen == 1, kv_len <= topk)
  // ---- The kernel variant (ResolveVariant) -----------------------------------------------
  int head_fold = 1;        // r >= 1: request b runs as virtual requests b * r + g
  int tokens_per_tile = 1;  // q tokens per qo tile, >= 1
  // ---- Resolved options (ResolveOptions: defaults already filled in) ---------------------
  int num_cu = 0;               // CUs / SMs of the persistent kernel, >= 1
  int kv_granularity = 16;      // kv tokens per cost block, a power of two in [1, 65536]
  int fixed_overhead = 1;       // blocks per work item, in [0, 2^20] (not -1: resolved)
  int max_split_per_batch = 0;  // most pieces per qo tile, >= 0 (0: no limit)
  int policy = 0;               // PlanPolicy: 0 = kGreedyPayload (the only one on GPU)
  int kv_lanes = 1;             // most kv lanes (PlanOptions::kv_lanes resolved), in [1, 64]
  // ---- Outputs (device memory) and their capacities in entries ---------------------------
  // Left unmodified unless the status is kGpuPlanOk; then only the used prefix is written.
  int32_t* out_qo_indptr = nullptr;  // folded qo_indptr: B * head_fold + 1 entries
  int64_t out_qo_indptr_capacity = 0;
  int32_t* work_indptr = nullptr;  // num_cu + 1 entries
  int64_t work_indptr_capacity = 0;
  int32_t* work_info = nullptr;      // [works][8] int32 rows (WorkInfo), 16-byte aligned;
  int64_t work_info_capacity = 0;    // capacity in rows
  int32_t* reduce_indptr = nullptr;  // split tiles + 1 entries
  int64_t reduce_indptr_capacity = 0;
  int32_t* reduce_final_map = nullptr;  // 2 entries per split tile (qo_start, qo_end)
  int64_t reduce_final_map_capacity = 0;
  int32_t* reduce_partial_map = nullptr;  // one entry per piece of a split tile
  int64_t reduce_partial_map_capacity = 0;
  GpuPlanStatus* status = nullptr;  // always written
  // ---- Tuning -----------------------------------------------------------------------------
  // Rounds of the parallel CU walk before one warp finishes it window by window (see
  // planner_kernel.hip); 0: that warp walks from the start. The plan is the same for every
  // value.
  int max_scan_iterations = 8;
  // Positions of the walk's jump tables (two 16-bit tables in shared memory, 4 bytes a
  // position), in [0, 65536]. A batch whose cost axis has at most this many positions (its
  // total cost + 1: kv blocks plus one overhead a tile) and whose parallel rounds have not
  // settled (after 2 of them on small tables) is walked by pointer doubling instead of the
  // warp windows: every position's step, then log2(num_cu) squarings, a cost that does not
  // depend on how the guesses go wrong (a uniform batch's tile-end resets defeat the rounds;
  // see planner_kernel_device.h). 0: no tables (less shared memory). The plan is the same
  // for every value.
  int jump_positions = 8192;
  int threads = 0;  // threads of the one block: a multiple of 64 in [64, 512]; 0: the
                    // smallest multiple of 64 >= max(num_requests, num_cu + 1), at most 256
  // Diagnostics (the benchmark): when set, thread 0 writes kGpuPlanProfileSlots values:
  // clock64() at the start and at the end of each phase, then wall_clock64() at start and end.
  long long* profile = nullptr;
};

// Phases the profile brackets: [0] start, [1] batch validated and tiles laid out, [2] CU
// walk done, [3] every CU's pieces counted and scanned, [4] capacities checked and qo_indptr
// written, [5] work_info, work_indptr and reduce maps written, [6] the walk's first round
// evaluated; [7], [8] wall clock at start and end.
inline constexpr int kGpuPlanProfileSlots = 9;

// nullptr when `params` can be launched, else a static message naming the bad field (a
// static batch constant out of range, a missing pointer, a misaligned work_info, ...).
const char* GpuPlannerParamsError(const GpuPlannerParams& params);

// Dynamic shared memory bytes the kernel needs for these params' maxima (num_requests,
// max_qlen, head_fold, tokens_per_tile, num_cu) with their jump tables. LaunchGpuPlanner
// shrinks the tables (down to none) when the device holds less, so the least a launch
// needs is this with jump_positions = 0.
int64_t GpuPlannerSharedBytes(const GpuPlannerParams& params);

// The most dynamic shared memory a planner launch may use on `device`: the device's opt-in
// per-block limit on NVIDIA (its per-block limit on AMD) less the kernel's static part; 0
// when the device's properties cannot be read. Read once per device.
int64_t GpuPlannerSharedLimit(int device);

// Enqueues the planner (one thread block) on `stream` (hipStream_t; nullptr: the default
// stream); capturable into a graph. Returns 0 (hipSuccess), hipErrorInvalidValue (1) when
// GpuPlannerParamsError(params) != nullptr (nothing is enqueued), or the launch's error (for
// example when the shared memory does not fit the device). The result is the status word
// and the buffers, once the stream reaches them.
int LaunchGpuPlanner(const GpuPlannerParams& params, void* stream);

}  // namespace mlaps

#endif  // MLAPS_KERNELS_PLANNER_KERNEL_H_
