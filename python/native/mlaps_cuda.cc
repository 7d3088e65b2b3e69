// The GPU half of the mlaps C ABI (mlaps_c.h, mlaps_cuda_*): fills the kernels' params from
// the flat C structs and enqueues; no allocation, no synchronization (graph-capturable).
// Built with --config=cuda only (libmlaps_cuda.so).
#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/planner/planner_kernel.h"
#include "kernels/platform/hip_runtime.h"
#include "kernels/sparse_gather/sparse_gather.h"
#include "python/native/mlaps_c.h"

namespace {

void CopyText(const std::string& s, char* dst, int64_t len) {
  if (dst == nullptr || len <= 0) return;
  const size_t n = std::min<size_t>(s.size(), static_cast<size_t>(len - 1));
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

int32_t Fail(int32_t code, const std::string& message, char* err, int64_t err_len) {
  CopyText(message, err, err_len);
  return code;
}

int32_t LaunchError(const char* what, int rc, char* err, int64_t err_len) {
  return Fail(
      MLAPS_CUDA_ERROR,
      absl::StrCat(what, ": ", hipGetErrorString(static_cast<hipError_t>(rc)), " (", rc, ")"), err,
      err_len);
}

}  // namespace

extern "C" {

int32_t mlaps_cuda_plan(const mlaps_gpu_plan_args* a, void* stream, char* err, int64_t err_len) {
  if (a == nullptr) return Fail(MLAPS_INVALID_ARGUMENT, "args is NULL", err, err_len);
  mlaps::GpuPlannerParams p;
  p.qo_indptr = a->qo_indptr;
  p.kv_indptr = a->kv_indptr;
  p.kv_last_page_lens = a->kv_last_page_lens;
  p.num_requests = a->num_requests;
  p.max_qlen = a->max_qlen;
  p.num_heads = a->num_heads;
  p.page_size = a->page_size;
  p.causal_trim = a->causal_trim != 0;
  p.sparse_topk = a->sparse_topk;
  p.head_fold = a->head_fold;
  p.tokens_per_tile = a->tokens_per_tile;
  p.num_cu = a->num_cu;
  p.kv_granularity = a->kv_granularity;
  p.fixed_overhead = a->fixed_overhead;
  p.max_split_per_batch = a->max_split_per_batch;
  p.policy = a->policy;
  p.kv_lanes = a->kv_lanes;
  p.out_qo_indptr = a->out_qo_indptr;
  p.out_qo_indptr_capacity = a->out_qo_indptr_capacity;
  p.work_indptr = a->work_indptr;
  p.work_indptr_capacity = a->work_indptr_capacity;
  p.work_info = a->work_info;
  p.work_info_capacity = a->work_info_capacity;
  p.reduce_indptr = a->reduce_indptr;
  p.reduce_indptr_capacity = a->reduce_indptr_capacity;
  p.reduce_final_map = a->reduce_final_map;
  p.reduce_final_map_capacity = a->reduce_final_map_capacity;
  p.reduce_partial_map = a->reduce_partial_map;
  p.reduce_partial_map_capacity = a->reduce_partial_map_capacity;
  p.status = static_cast<mlaps::GpuPlanStatus*>(a->status);
  if (const char* e = mlaps::GpuPlannerParamsError(p); e != nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, absl::StrCat("GPU planner: ", e), err, err_len);
  }
  if (int rc = mlaps::LaunchGpuPlanner(p, stream); rc != 0) {
    return LaunchError("GPU planner launch", rc, err, err_len);
  }
  return MLAPS_OK;
}

int32_t mlaps_cuda_decode(const mlaps_decode_args* a, void* stream, char* err, int64_t err_len) {
  if (a == nullptr) return Fail(MLAPS_INVALID_ARGUMENT, "args is NULL", err, err_len);
  mlaps::MlaDecodeParams d;
  d.q = a->q;
  d.kv_cache = a->kv_cache;
  d.kv_indices = a->kv_indices;
  d.qo_indptr = a->qo_indptr;
  d.kv_indptr = a->kv_indptr;
  d.kv_last_page_lens = a->kv_last_page_lens;
  d.num_requests = a->num_requests;
  d.num_q_tokens = a->num_q_tokens;
  d.num_pages = a->num_pages;
  d.num_kv_indices = a->num_kv_indices;
  d.num_heads = a->num_heads;
  d.page_size = a->page_size;
  d.dtype = a->dtype == 1 ? mlaps::kMlaFp8E4m3fn : mlaps::kMlaBf16;
  d.mask = static_cast<mlaps::MlaMask>(a->mask);
  d.sm_scale = a->sm_scale;
  d.q_scale = a->q_scale;
  d.kv_scale = a->kv_scale;
  d.cp_world_size = a->cp_world_size;
  d.cp_interleave = a->cp_interleave;
  d.cp_rank = a->cp_rank;
  d.cp_global_kv_len = a->cp_global_kv_len;
  d.work_indptr = a->work_indptr;
  d.work_info = a->work_info;
  d.work_info_capacity = a->work_info_capacity;
  d.num_cu = a->num_cu;
  d.head_fold = a->head_fold;
  d.tokens_per_tile = a->tokens_per_tile;
  d.rows_per_tile = a->rows_per_tile;
  d.cu_lanes = a->cu_lanes == 0 ? 1 : a->cu_lanes;  // others: MlaDecodeParamsError
  if (a->o_fp32 != 0) {
    d.o_fp32 = static_cast<float*>(a->o);
  } else {
    d.o = static_cast<uint16_t*>(a->o);
  }
  d.lse = a->lse;
  d.partial_o = a->partial_o;
  d.partial_lse = a->partial_lse;
  d.partial_rows_capacity = a->partial_rows_capacity;
  d.status = static_cast<mlaps::MlaStatus*>(a->status);
  if (const char* e = mlaps::MlaDecodeParamsError(d); e != nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, absl::StrCat("decode: ", e), err, err_len);
  }
  mlaps::MlaReduceParams r;
  const bool reduce = a->reduce_tiles_capacity > 0;
  if (reduce) {
    r.reduce_indptr = a->reduce_indptr;
    r.reduce_final_map = a->reduce_final_map;
    r.reduce_partial_map = a->reduce_partial_map;
    r.reduce_partial_map_capacity = a->reduce_partial_map_capacity;
    r.num_reduce_tiles_device = a->num_reduce_tiles_device;
    r.reduce_tiles_capacity = a->reduce_tiles_capacity;
    r.qo_indptr = a->qo_indptr;
    r.num_requests = a->num_requests;
    r.num_q_tokens = a->num_q_tokens;
    r.num_heads = a->num_heads;
    r.head_fold = a->head_fold;
    r.partial_o = a->partial_o;
    r.partial_lse = a->partial_lse;
    r.partial_rows_capacity = a->partial_rows_capacity;
    r.o = d.o;
    r.o_fp32 = d.o_fp32;
    r.lse = a->lse;
    r.status = d.status;
    if (const char* e = mlaps::MlaReduceParamsError(r); e != nullptr) {
      return Fail(MLAPS_INVALID_ARGUMENT, absl::StrCat("reduce: ", e), err, err_len);
    }
  }
  hipStream_t s = static_cast<hipStream_t>(stream);
  if (hipError_t rc = hipMemsetAsync(a->status, 0, sizeof(mlaps::MlaStatus), s); rc != hipSuccess) {
    return LaunchError("status memset", rc, err, err_len);
  }
  if (int rc = mlaps::LaunchMlaDecode(d, stream); rc != 0) {
    return LaunchError("decode launch", rc, err, err_len);
  }
  if (reduce) {
    if (int rc = mlaps::LaunchMlaReduce(r, stream); rc != 0) {
      return LaunchError("reduce launch", rc, err, err_len);
    }
  }
  return MLAPS_OK;
}

int32_t mlaps_cuda_sparse_gather(const mlaps_sparse_gather_args* a, void* stream, char* err,
                                 int64_t err_len) {
  if (a == nullptr) return Fail(MLAPS_INVALID_ARGUMENT, "args is NULL", err, err_len);
  mlaps::GpuSparseGatherParams p;
  p.dims.num_tokens = a->num_tokens;
  p.dims.topk = a->topk;
  p.dims.num_requests = a->num_requests;
  p.dims.map_form =
      a->map_form == 1 ? mlaps::SparseMapForm::kFlat : mlaps::SparseMapForm::kBlockTable;
  p.dims.page_size = a->page_size;
  p.dims.max_blocks = a->max_blocks;
  p.dims.num_kv_indices = a->num_kv_indices;
  p.dims.packed_capacity = a->packed_capacity;
  p.topk_indices = a->topk_indices;
  p.token_to_seq = a->token_to_seq;
  p.token_bound = a->token_bound;
  p.sparse_kv_indptr = a->sparse_kv_indptr;
  p.block_table = a->block_table;
  p.kv_indptr = a->kv_indptr;
  p.kv_indices = a->kv_indices;
  p.packed = a->packed;
  p.counts = a->counts;
  p.dense = a->dense;
  p.status = a->status;
  absl::Status s = mlaps::LaunchGpuSparseGather(p, stream);
  if (!s.ok()) {
    return Fail(
        s.code() == absl::StatusCode::kInvalidArgument ? MLAPS_INVALID_ARGUMENT : MLAPS_CUDA_ERROR,
        absl::StrCat("sparse gather: ", s.message()), err, err_len);
  }
  return MLAPS_OK;
}

int32_t mlaps_cuda_lse_merge(const mlaps_lse_merge_args* a, void* stream, char* err,
                             int64_t err_len) {
  if (a == nullptr) return Fail(MLAPS_INVALID_ARGUMENT, "args is NULL", err, err_len);
  mlaps::kernels::LseMergeParams p;
  p.o_ranks = a->o_ranks;
  p.lse_ranks = a->lse_ranks;
  p.world_size = a->world_size;
  p.rows = a->rows;
  p.dim = a->dim;
  p.o_out = a->o_out;
  p.lse_out = a->lse_out;
  p.out_bf16 = a->out_bf16 != 0;
  int runtime = 0;
  const mlaps::kernels::LseMergeError e = mlaps::kernels::LaunchLseMerge(p, stream, &runtime);
  switch (e) {
    case mlaps::kernels::LseMergeError::kOk:
      return MLAPS_OK;
    case mlaps::kernels::LseMergeError::kBadWorld:
      return Fail(MLAPS_INVALID_ARGUMENT,
                  absl::StrCat("cp merge: world_size = ", a->world_size, ": must be in [1, ",
                               mlaps::kernels::kMaxWorld, "]"),
                  err, err_len);
    case mlaps::kernels::LseMergeError::kBadShape:
      return Fail(MLAPS_INVALID_ARGUMENT,
                  absl::StrCat("cp merge: rows = ", a->rows, ", dim = ", a->dim,
                               ": rows >= 0 and dim a multiple of 128 (512 on MLA)"),
                  err, err_len);
    case mlaps::kernels::LseMergeError::kNullPointer:
      return Fail(MLAPS_INVALID_ARGUMENT, "cp merge: a required pointer is NULL", err, err_len);
    default:
      return LaunchError("cp merge launch", runtime, err, err_len);
  }
}

int32_t mlaps_cuda_set_device(int32_t device, char* err, int64_t err_len) {
  if (hipError_t rc = hipSetDevice(device); rc != hipSuccess) {
    return LaunchError(absl::StrCat("set device ", device).c_str(), rc, err, err_len);
  }
  return MLAPS_OK;
}

int32_t mlaps_cuda_copy_to_host(void* dst, const void* src, int64_t bytes, char* err,
                                int64_t err_len) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr))) {
    return Fail(MLAPS_INVALID_ARGUMENT, "copy_to_host: NULL pointer or negative size", err,
                err_len);
  }
  if (bytes == 0) return MLAPS_OK;
  if (hipError_t rc = hipMemcpy(dst, src, static_cast<size_t>(bytes), hipMemcpyDeviceToHost);
      rc != hipSuccess) {
    return LaunchError("copy_to_host", rc, err, err_len);
  }
  return MLAPS_OK;
}

}  // extern "C"
