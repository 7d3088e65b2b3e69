/* mlaps C ABI: the few functions the Python package (python/mlaps, over ctypes) calls.
 *
 * Why a C ABI and not a CPython extension: one built library must load under Debian 12's
 * Python 3.11 (here, CI) and the GPU machine's Python 3.12 (its torch environment). A C ABI
 * shared library does not depend on any CPython header or ABI, so the same .so (and the same
 * pure-Python wheel around it) serves every Python 3 with numpy; an extension module would
 * need one build per CPython version.
 *
 * Conventions:
 *   - Every function returns an mlaps_code; on error it writes a NUL-terminated message (the
 *     C++ status message, naming the argument and value) into err[0 .. err_len) (truncated to
 *     fit; err may be NULL when err_len == 0).
 *   - Every buffer comes with its length in elements (int32 entries, float elements, rows
 *     where said). Nothing is read or written past a given length; outputs are written only
 *     on success (a failed call leaves them unmodified).
 *   - Enumerations: arch 0 gfx942, 1 gfx950, 2 sm90; dtype 0 bf16, 1 fp8; policy 0
 *     greedy_payload, 1 longest_first.
 *   - Thread safety: every function is reentrant (no global state beyond the registries,
 *     parsed once under a lock by the C++ library).
 *
 * Library: libmlaps_c.so (CPU: planner, capacity, checker, simulator). The GPU functions
 * (mlaps_cuda_*) live in libmlaps_cuda.so, declared at the end of this header; that library
 * is built with --config=cuda only.
 */
#ifndef MLAPS_PYTHON_NATIVE_MLAPS_C_H_
#define MLAPS_PYTHON_NATIVE_MLAPS_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLAPS_C_ABI_VERSION 5

enum mlaps_code {
  MLAPS_OK = 0,
  MLAPS_INVALID_ARGUMENT = 1,   /* bad batch, option or buffer (Python: ValueError) */
  MLAPS_NOT_FOUND = 2,          /* unsupported shape: no kernel variant (Python: ValueError) */
  MLAPS_RESOURCE_EXHAUSTED = 3, /* a caller buffer is too small (Python: ValueError) */
  MLAPS_INTERNAL = 4,           /* anything else (Python: RuntimeError) */
  MLAPS_CUDA_ERROR = 5,         /* a CUDA runtime / launch error (Python: RuntimeError) */
};

/* A decode batch (metadata/batch.h). Request b has q tokens [qo_indptr[b], qo_indptr[b+1])
 * and kv pages [kv_indptr[b], kv_indptr[b+1]); its kv length is
 * (pages - 1) * page_size + kv_last_page_lens[b]. */
typedef struct {
  int32_t arch;
  int32_t q_dtype;
  int32_t kv_dtype;
  int32_t num_heads;
  int32_t page_size;
  int32_t causal;         /* bottom-right MTP causal rule */
  int32_t cp_round_robin; /* the batch is one CP round-robin rank's shard */
  int32_t sparse_topk;    /* > 0: sparse per-token batch (one q token per request) */
  const int32_t* qo_indptr;
  int64_t qo_indptr_len; /* B + 1 */
  const int32_t* kv_indptr;
  int64_t kv_indptr_len; /* B + 1 */
  const int32_t* kv_last_page_lens;
  int64_t kv_last_page_lens_len; /* B */
} mlaps_batch;

/* Planner options (metadata/planner.h PlanOptions); 0 / -1 mean the planner's default. */
typedef struct {
  int32_t num_cu;              /* persistent blocks; 0: arch default x blocks_per_cu */
  int32_t kv_granularity;      /* 0: max(16, page_size) */
  int32_t fixed_overhead;      /* -1: the batch's choice (BatchFixedOverhead) */
  int32_t max_split_per_batch; /* 0: no limit */
  int32_t policy;
  int32_t lse;           /* the caller needs LSE (restricts the variant) */
  int32_t max_seqlen_qo; /* > 0: every request's qlen must be <= this (AITER's argument) */
  int32_t uni_seqlen_qo; /* > 0: every request's qlen must equal this */
} mlaps_plan_options;

/* A plan's arrays in AITER's layout. Outputs for mlaps_plan (each at least the capacity's
 * entries); inputs for mlaps_check_plan / mlaps_simulate (the used prefix of each). */
typedef struct {
  int32_t* qo_indptr; /* folded [B * head_fold + 1]; check/simulate: may be NULL */
  int64_t qo_indptr_len;
  int32_t* work_indptr; /* [num_cu + 1] */
  int64_t work_indptr_len;
  int32_t* work_info; /* [rows][8] */
  int64_t work_info_rows;
  int32_t* reduce_indptr; /* [split tiles + 1] */
  int64_t reduce_indptr_len;
  int32_t* reduce_final_map;    /* [split tiles][2] */
  int64_t reduce_final_map_len; /* int32 entries */
  int32_t* reduce_partial_map;  /* [pieces] */
  int64_t reduce_partial_map_len;
} mlaps_plan_buffers;

/* What a plan call resolved and wrote. */
typedef struct {
  char variant[96];
  int32_t num_cu;
  int32_t head_fold;
  int32_t tokens_per_tile;
  int32_t rows_per_tile;
  int32_t heads_per_group;
  int32_t blocks_per_cu;
  int32_t kv_granularity; /* resolved options */
  int32_t fixed_overhead;
  int32_t num_virtual_requests; /* B * head_fold: qo_indptr holds this + 1 */
  int32_t num_works;
  int32_t num_reduce_tiles;
  int32_t num_reduce_pieces;
  int32_t num_partial_rows;
  int32_t max_qlen; /* the batch's largest qlen (the variant was resolved for it) */
  int32_t kv_lanes; /* the plan's kv lanes (KvLanes): mlaps_decode_args.cu_lanes for it */
} mlaps_plan_sizes;

/* Buffer sizing from maxima (metadata/capacity.h). */
typedef struct {
  int32_t arch;
  int32_t q_dtype;
  int32_t kv_dtype;
  int32_t num_heads;
  int32_t max_batch; /* requests (sparse: tokens) */
  int32_t max_qlen;
  int32_t num_cu; /* 0: the planner's default */
  int32_t cp_round_robin;
  int32_t lse;
} mlaps_capacity_query;

typedef struct {
  int64_t qo_indptr;
  int64_t work_indptr;
  int64_t work_info; /* rows */
  int64_t reduce_indptr;
  int64_t reduce_final_map; /* int32 entries (2 per split tile) */
  int64_t reduce_partial_map;
  int64_t partial_rows;
  int64_t partial_o_bytes;
  int64_t partial_lse_bytes;
} mlaps_capacity;

/* The kernel variant of a shape (metadata/registry.h), and the planner's default grid. */
typedef struct {
  int32_t arch;
  int32_t q_dtype;
  int32_t kv_dtype;
  int32_t num_heads;
  int32_t qlen;
  int32_t cp_round_robin;
  int32_t lse;
} mlaps_variant_query;

typedef struct {
  char name[96];
  int32_t rows_per_tile;
  int32_t q_seq_len;
  int32_t head_fold;
  int32_t heads_per_group;
  int32_t tokens_per_tile;
  int32_t blocks_per_cu;
  int32_t default_num_cu;   /* DefaultNumCu(arch) x blocks_per_cu */
  int32_t default_kv_lanes; /* DefaultKvLanes(arch): the planner's kv lanes when unset */
} mlaps_variant;

/* ABI version (MLAPS_C_ABI_VERSION) of the loaded library. */
int32_t mlaps_abi_version(void);

/* sizeof of this header's struct `name` (e.g. "mlaps_decode_args"), so that a binding can check
 * its mirror of the layout (python/tests: every ctypes structure against it). NOT_FOUND for a
 * name the header does not declare. */
int32_t mlaps_struct_size(const char* name, int64_t* out, char* err, int64_t err_len);

/* ValidateBatch alone. */
int32_t mlaps_validate_batch(const mlaps_batch* batch, char* err, int64_t err_len);

int32_t mlaps_resolve_variant(const mlaps_variant_query* query, mlaps_variant* out, char* err,
                              int64_t err_len);

int32_t mlaps_capacity_of(const mlaps_capacity_query* query, mlaps_capacity* out, char* err,
                          int64_t err_len);

/* DefaultFixedOverhead (metadata/planner.h): the batch-independent blocks a work item is
 * charged, for the variant of `query` with pages of page_size tokens, cost blocks of
 * kv_granularity tokens (0: max(16, page_size)) and a grid of num_cu blocks (0: the default
 * grid). A host plan with fixed_overhead -1 starts from it and takes a larger charge where the
 * registry's costs predict its plan of the batch faster (BatchFixedOverhead: uniform batches
 * whose tiles then run whole); the GPU planner, which does not see the batch's lengths on the
 * host, plans with this one, as the host planner does when given it. */
int32_t mlaps_default_fixed_overhead(const mlaps_variant_query* query, int32_t page_size,
                                     int32_t kv_granularity, int32_t num_cu, int32_t* out,
                                     char* err, int64_t err_len);

/* UniformKvLanes (metadata/planner.h): the kv lanes of a plan of `query`'s variant whose requests
 * all have query->qlen q tokens, on a grid of num_cu blocks, at most max_lanes (0: the arch's
 * default, mlaps_variant.default_kv_lanes). The value a decode of such a plan passes as
 * mlaps_decode_args.cu_lanes when it did not see the plan's own (mlaps_plan_sizes.kv_lanes:
 * e.g. a plan made by the GPU planner). */
int32_t mlaps_kv_lanes(const mlaps_variant_query* query, int32_t num_cu, int32_t max_lanes,
                       int32_t* out, char* err, int64_t err_len);

/* PlanDecodeInto: plans `batch` into `buffers`. On success `sizes` says the used prefix of
 * each buffer; the rest of each buffer is left as it was. */
int32_t mlaps_plan(const mlaps_batch* batch, const mlaps_plan_options* options,
                   const mlaps_plan_buffers* buffers, mlaps_plan_sizes* sizes, char* err,
                   int64_t err_len);

/* CheckPlan (sim/plan_checker.h) after ValidateBatch (a bad batch is an error, not a
 * violation). The plan is read only (the used prefixes; num_cu = work_indptr_len - 1).
 * Violations go to text[0 .. text_len) as lines "defect\twork\tfield\tmessage\n" (NUL
 * terminated); *num_violations gets their count and *text_needed the bytes the whole text
 * needs with its NUL. When text_len < *text_needed the call returns MLAPS_RESOURCE_EXHAUSTED
 * with the counts set and text untouched (call again with a larger buffer). */
typedef struct {
  int32_t head_fold;             /* the plan's r (>= 1) */
  int32_t num_cu;                /* expected CUs; -1: work_indptr_len - 1 */
  int64_t partial_rows_capacity; /* -1: unbounded */
  int32_t max_violations;        /* stop after this many (>= 1) */
} mlaps_check_options;

int32_t mlaps_check_plan(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                         const mlaps_check_options* options, int32_t* num_violations, char* text,
                         int64_t text_len, int64_t* text_needed, char* err, int64_t err_len);

/* The numeric simulator: ExecutePlan (sim/executor.h) and ReferenceDecode (sim/reference.h)
 * on the same inputs, compared under GatesFor(kv_dtype). */
typedef struct {
  /* Values already in the batch's dtype (bf16 values, or fp8 code values as floats). q and
   * kv_cache NULL: deterministic random inputs from `seed` (sim::MakeDecodeCase, with three
   * spare pages and shuffled kv_indices). */
  const float* q; /* [total_q, H, 576] */
  int64_t q_len;
  const float* kv_cache; /* [pages, page_size, 576] */
  int64_t kv_cache_len;
  const int32_t* kv_indices; /* [kv_indptr[B]]; NULL: identity */
  int64_t kv_indices_len;
  double sm_scale; /* <= 0: 1/sqrt(576) */
  double q_scale;  /* fp8 descales (1 for bf16) */
  double kv_scale;
  uint64_t seed;
  int32_t head_fold;             /* the plan's r */
  int32_t kv_block;              /* executor's online-softmax step; <= 0: 64 */
  int32_t final_o_bf16;          /* round final O to bf16 (1) or keep fp32 (0) */
  int64_t partial_rows_capacity; /* -1: what the plan needs */
} mlaps_sim_inputs;

typedef struct {
  float* o; /* [total_q, H, 512] (required) */
  int64_t o_len;
  float* lse; /* [total_q, H] (required) */
  int64_t lse_len;
  double* ref_o; /* may be NULL */
  int64_t ref_o_len;
  double* ref_lse; /* may be NULL */
  int64_t ref_lse_len;
  /* Comparison (sim::Comparison) */
  double cos_diff;
  double max_abs_err;
  double fail_fraction;
  double lse_max_abs_err;
  int64_t num_elements;
  int64_t num_failing;
  int64_t o_mask_mismatches;
  int64_t lse_mask_mismatches;
  int64_t worst_index;
  int32_t passed;
  /* Executor stats */
  int64_t final_items;
  int64_t partial_items;
  int64_t reduce_tiles;
  int64_t unwritten_tokens;
  int64_t rewritten_tokens;
  char summary[640];
} mlaps_sim_result;

int32_t mlaps_simulate(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                       const mlaps_sim_inputs* inputs, mlaps_sim_result* result, char* err,
                       int64_t err_len);

/* ---- GPU (libmlaps_cuda.so, --config=cuda) ------------------------------------------------
 * Every pointer below is device memory unless noted; `stream` is a cudaStream_t (NULL: the
 * legacy default stream). The functions only enqueue (no allocation, no synchronization), so
 * they can be captured into a CUDA graph; errors found on the host (bad params) enqueue
 * nothing. Device-side findings go to the status words (GpuPlanStatus, MlaStatus). */

/* The GPU planner (kernels/planner/planner_kernel.h): the variant and options are resolved on
 * the host (mlaps_resolve_variant + the planner's option defaults) and passed as values. */
typedef struct {
  const int32_t* qo_indptr; /* [num_requests + 1] */
  const int32_t* kv_indptr;
  const int32_t* kv_last_page_lens;
  int32_t num_requests;
  int32_t max_qlen;
  int32_t num_heads;
  int32_t page_size;
  int32_t causal_trim;
  int32_t sparse_topk;
  int32_t head_fold;
  int32_t tokens_per_tile;
  int32_t num_cu;
  int32_t kv_granularity;
  int32_t fixed_overhead;
  int32_t max_split_per_batch;
  int32_t policy;   /* 0 only */
  int32_t kv_lanes; /* most kv lanes, resolved: the host planner's (default_kv_lanes) */
  int32_t* out_qo_indptr;
  int64_t out_qo_indptr_capacity;
  int32_t* work_indptr;
  int64_t work_indptr_capacity;
  int32_t* work_info;
  int64_t work_info_capacity; /* rows */
  int32_t* reduce_indptr;
  int64_t reduce_indptr_capacity;
  int32_t* reduce_final_map;
  int64_t reduce_final_map_capacity; /* int32 entries */
  int32_t* reduce_partial_map;
  int64_t reduce_partial_map_capacity;
  void* status; /* 48-byte GpuPlanStatus */
} mlaps_gpu_plan_args;

int32_t mlaps_cuda_plan(const mlaps_gpu_plan_args* args, void* stream, char* err, int64_t err_len);

/* Decode + reduce (kernels/decode/mla_decode.h): zeroes the status word, launches the
 * persistent decode, then the reduce (when reduce_tiles_capacity > 0). */
typedef struct {
  const void* q;        /* [num_q_tokens, H, 576] bf16 / fp8 e4m3fn */
  const void* kv_cache; /* [num_pages, page_size, 576], same dtype */
  const int32_t* kv_indices;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int32_t* kv_last_page_lens;
  int32_t num_requests;
  int32_t num_heads;
  int64_t num_q_tokens;
  int64_t num_pages;
  int64_t num_kv_indices;
  int32_t page_size;
  int32_t dtype; /* 0 bf16, 1 fp8 e4m3fn */
  int32_t mask;  /* MlaMask: 0 causal, 1 none, 2 CP round-robin */
  float sm_scale;
  float q_scale;
  float kv_scale;
  int32_t cp_world_size;
  int32_t cp_interleave;
  int32_t cp_rank;
  const int32_t* cp_global_kv_len;
  const int32_t* work_indptr;
  const int32_t* work_info;
  int64_t work_info_capacity;
  int32_t num_cu;
  int32_t head_fold;
  int32_t tokens_per_tile;
  int32_t rows_per_tile;
  const int32_t* reduce_indptr;
  const int32_t* reduce_final_map;
  const int32_t* reduce_partial_map;
  int64_t reduce_partial_map_capacity;
  const int32_t* num_reduce_tiles_device; /* the plan status' num_reduce_tiles */
  int32_t reduce_tiles_capacity;
  int32_t o_fp32; /* o is fp32 (CP ranks) instead of bf16 */
  void* o;        /* [num_q_tokens, H, 512] */
  float* lse;     /* [num_q_tokens, H] */
  float* partial_o;
  float* partial_lse;
  int64_t partial_rows_capacity;
  void* status; /* 24-byte MlaStatus */
  /* The plan's kv lanes (mlaps_plan_sizes.kv_lanes, or mlaps_kv_lanes where the plan was made
   * on the GPU): a request's lanes then run on neighbouring blocks, which keeps their shared kv
   * reads in step (MlaDecodeParams::cu_lanes). 0 or 1: blocks run the plan's CUs in order. Any
   * value that divides num_cu gives the same output; others are refused. */
  int32_t cu_lanes;
} mlaps_decode_args;

int32_t mlaps_cuda_decode(const mlaps_decode_args* args, void* stream, char* err, int64_t err_len);

/* The sparse KV index gather (kernels/sparse_gather/sparse_gather.h). */
typedef struct {
  int64_t num_tokens;
  int64_t topk;
  int64_t num_requests;
  int32_t map_form; /* 0 block table, 1 flat */
  int64_t page_size;
  int64_t max_blocks;
  int64_t num_kv_indices;
  int64_t packed_capacity;
  const int32_t* topk_indices;
  const int32_t* token_to_seq;
  const int32_t* token_bound;
  const int32_t* sparse_kv_indptr;
  const int32_t* block_table;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  int32_t* packed;
  int32_t* counts;
  int32_t* dense;
  int32_t* status;
} mlaps_sparse_gather_args;

int32_t mlaps_cuda_sparse_gather(const mlaps_sparse_gather_args* args, void* stream, char* err,
                                 int64_t err_len);

/* The CP merge of W ranks' (O, LSE) (kernels/cp/lse_merge.h). */
typedef struct {
  const float* o_ranks;   /* [W][rows][dim] */
  const float* lse_ranks; /* [W][rows] */
  int32_t world_size;
  int64_t rows;
  int32_t dim;
  void* o_out; /* [rows][dim] bf16 (out_bf16) or fp32 */
  float* lse_out;
  int32_t out_bf16;
} mlaps_lse_merge_args;

int32_t mlaps_cuda_lse_merge(const mlaps_lse_merge_args* args, void* stream, char* err,
                             int64_t err_len);

/* Makes `device` this library's current CUDA device (its CUDA runtime is linked statically,
 * so its current device is its own: the Python layer sets it to the arrays' device). */
int32_t mlaps_cuda_set_device(int32_t device, char* err, int64_t err_len);

/* Copies `bytes` from device to host memory and waits (check_plan on device arrays without
 * torch; never in a decode path). */
int32_t mlaps_cuda_copy_to_host(void* dst, const void* src, int64_t bytes, char* err,
                                int64_t err_len);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // MLAPS_PYTHON_NATIVE_MLAPS_C_H_
