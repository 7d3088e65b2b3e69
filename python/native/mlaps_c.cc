// The CPU half of the mlaps C ABI (mlaps_c.h): planner, capacity, registry, checker and
// simulator behind extern "C" functions with explicit lengths and code + message errors.
#include "python/native/mlaps_c.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "metadata/batch.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "metadata/registry.h"
#include "metadata/types.h"
#include "metadata/work_plan.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"

namespace {

using mlaps::Arch;
using mlaps::DType;

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

template <typename F>
int32_t Guarded(char* err, int64_t err_len, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Fail(MLAPS_INTERNAL, std::string("internal error: ") + e.what(), err, err_len);
  } catch (...) {
    return Fail(MLAPS_INTERNAL, "internal error: unknown exception", err, err_len);
  }
}

int32_t FromStatus(const absl::Status& s, char* err, int64_t err_len) {
  int32_t code = MLAPS_INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return MLAPS_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      code = MLAPS_INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kNotFound:
      code = MLAPS_NOT_FOUND;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = MLAPS_RESOURCE_EXHAUSTED;
      break;
    default:
      break;
  }
  return Fail(code, std::string(s.message()), err, err_len);
}

absl::Status ParseArch(int32_t v, Arch* out) {
  switch (v) {
    case 0:
      *out = Arch::kGfx942;
      return absl::OkStatus();
    case 1:
      *out = Arch::kGfx950;
      return absl::OkStatus();
    case 2:
      *out = Arch::kSm90;
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("arch = ", v, ": must be 0 (gfx942), 1 (gfx950) or 2 (sm90)"));
}

absl::Status ParseDType(const char* name, int32_t v, DType* out) {
  if (v == 0 || v == 1) {
    *out = v == 0 ? DType::kBf16 : DType::kFp8;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " = ", v, ": must be 0 (bf16) or 1 (fp8)"));
}

absl::Status CopyArray(const char* name, const int32_t* data, int64_t len,
                       std::vector<int32_t>* out) {
  if (len < 0) return absl::InvalidArgumentError(absl::StrCat(name, " length ", len, " < 0"));
  if (len > 0 && data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is NULL with length ", len));
  }
  if (len > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has ", len, " entries (> 2^31)"));
  }
  out->assign(data, data + len);
  return absl::OkStatus();
}

// The C batch as a validated mlaps::Batch.
absl::Status ToBatch(const mlaps_batch* in, mlaps::Batch* b) {
  if (in == nullptr) return absl::InvalidArgumentError("batch is NULL");
  if (absl::Status s = ParseArch(in->arch, &b->arch); !s.ok()) return s;
  if (absl::Status s = ParseDType("q_dtype", in->q_dtype, &b->q_dtype); !s.ok()) return s;
  if (absl::Status s = ParseDType("kv_dtype", in->kv_dtype, &b->kv_dtype); !s.ok()) return s;
  b->num_heads = in->num_heads;
  b->page_size = in->page_size;
  b->causal = in->causal != 0;
  b->cp_round_robin = in->cp_round_robin != 0;
  b->sparse_topk = in->sparse_topk;
  if (in->sparse_topk < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse_topk = ", in->sparse_topk, ": must be >= 0 (0: dense)"));
  }
  if (absl::Status s = CopyArray("qo_indptr", in->qo_indptr, in->qo_indptr_len, &b->qo_indptr);
      !s.ok())
    return s;
  if (absl::Status s = CopyArray("kv_indptr", in->kv_indptr, in->kv_indptr_len, &b->kv_indptr);
      !s.ok())
    return s;
  if (absl::Status s = CopyArray("kv_last_page_lens", in->kv_last_page_lens,
                                 in->kv_last_page_lens_len, &b->kv_last_page_lens);
      !s.ok())
    return s;
  return mlaps::ValidateBatch(*b);
}

absl::Status ToPlan(const mlaps_plan_buffers* in, int head_fold, mlaps::WorkPlan* plan) {
  if (in == nullptr) return absl::InvalidArgumentError("plan is NULL");
  if (head_fold < 1) {
    return absl::InvalidArgumentError(absl::StrCat("head_fold = ", head_fold, ": must be >= 1"));
  }
  plan->head_fold = head_fold;
  if (absl::Status s =
          CopyArray("work_indptr", in->work_indptr, in->work_indptr_len, &plan->work_indptr);
      !s.ok())
    return s;
  if (plan->work_indptr.empty()) return absl::InvalidArgumentError("work_indptr is empty");
  plan->num_cu = static_cast<int>(plan->work_indptr.size()) - 1;
  if (in->work_info_rows < 0 || in->work_info_rows > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("work_info_set rows = ", in->work_info_rows, ": out of range"));
  }
  if (in->work_info_rows > 0 && in->work_info == nullptr) {
    return absl::InvalidArgumentError("work_info_set is NULL");
  }
  plan->work_info.resize(in->work_info_rows);
  if (in->work_info_rows > 0) {
    std::memcpy(plan->work_info.data(), in->work_info, in->work_info_rows * 8 * sizeof(int32_t));
  }
  if (absl::Status s = CopyArray("reduce_indptr", in->reduce_indptr, in->reduce_indptr_len,
                                 &plan->reduce_indptr);
      !s.ok())
    return s;
  if (absl::Status s = CopyArray("reduce_final_map", in->reduce_final_map, in->reduce_final_map_len,
                                 &plan->reduce_final_map);
      !s.ok())
    return s;
  if (absl::Status s = CopyArray("reduce_partial_map", in->reduce_partial_map,
                                 in->reduce_partial_map_len, &plan->reduce_partial_map);
      !s.ok())
    return s;
  if (in->qo_indptr != nullptr) {
    if (absl::Status s =
            CopyArray("qo_indptr (folded)", in->qo_indptr, in->qo_indptr_len, &plan->qo_indptr);
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

template <typename T>
absl::Span<T> SpanOf(const char* name, T* data, int64_t len, absl::Status* s) {
  if (len < 0 || (len > 0 && data == nullptr)) {
    *s = absl::InvalidArgumentError(absl::StrCat(name, ": NULL or negative length ", len));
    return {};
  }
  return absl::Span<T>(data, static_cast<size_t>(len));
}

}  // namespace

extern "C" {

int32_t mlaps_abi_version(void) { return MLAPS_C_ABI_VERSION; }

int32_t mlaps_struct_size(const char* name, int64_t* out, char* err, int64_t err_len) {
  if (name == nullptr || out == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "name or out is NULL", err, err_len);
  }
  struct Entry {
    const char* name;
    int64_t size;
  };
#define MLAPS_STRUCT_SIZE(s) \
  Entry { #s, static_cast < int64_t>(sizeof(s)) }
  static constexpr Entry kSizes[] = {
      MLAPS_STRUCT_SIZE(mlaps_batch),          MLAPS_STRUCT_SIZE(mlaps_plan_options),
      MLAPS_STRUCT_SIZE(mlaps_plan_buffers),   MLAPS_STRUCT_SIZE(mlaps_plan_sizes),
      MLAPS_STRUCT_SIZE(mlaps_capacity_query), MLAPS_STRUCT_SIZE(mlaps_capacity),
      MLAPS_STRUCT_SIZE(mlaps_variant_query),  MLAPS_STRUCT_SIZE(mlaps_variant),
      MLAPS_STRUCT_SIZE(mlaps_check_options),  MLAPS_STRUCT_SIZE(mlaps_sim_inputs),
      MLAPS_STRUCT_SIZE(mlaps_sim_result),     MLAPS_STRUCT_SIZE(mlaps_gpu_plan_args),
      MLAPS_STRUCT_SIZE(mlaps_decode_args),    MLAPS_STRUCT_SIZE(mlaps_sparse_gather_args),
      MLAPS_STRUCT_SIZE(mlaps_lse_merge_args),
  };
#undef MLAPS_STRUCT_SIZE
  for (const Entry& e : kSizes) {
    if (std::strcmp(e.name, name) == 0) {
      *out = e.size;
      return MLAPS_OK;
    }
  }
  return Fail(MLAPS_NOT_FOUND, absl::StrCat("no struct '", name, "' in mlaps_c.h"), err, err_len);
}

static int32_t mlaps_validate_batch_impl(const mlaps_batch* batch, char* err, int64_t err_len) {
  mlaps::Batch b;
  return FromStatus(ToBatch(batch, &b), err, err_len);
}

static absl::Status ParseVariantQuery(const mlaps_variant_query* query, mlaps::VariantQuery* q) {
  absl::Status s = ParseArch(query->arch, &q->arch);
  if (s.ok()) s = ParseDType("q_dtype", query->q_dtype, &q->q_dtype);
  if (s.ok()) s = ParseDType("kv_dtype", query->kv_dtype, &q->kv_dtype);
  q->num_heads = query->num_heads;
  q->qlen = query->qlen;
  q->cp_round_robin = query->cp_round_robin != 0;
  q->lse = query->lse != 0;
  return s;
}

static int32_t mlaps_resolve_variant_impl(const mlaps_variant_query* query, mlaps_variant* out,
                                          char* err, int64_t err_len) {
  if (query == nullptr || out == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "query or out is NULL", err, err_len);
  }
  mlaps::VariantQuery q;
  if (absl::Status s = ParseVariantQuery(query, &q); !s.ok()) return FromStatus(s, err, err_len);
  absl::StatusOr<mlaps::ResolvedVariant> v = mlaps::ResolveVariant(q);
  if (!v.ok()) return FromStatus(v.status(), err, err_len);
  mlaps_variant r;
  std::memset(&r, 0, sizeof r);
  CopyText(v->name, r.name, sizeof r.name);
  r.rows_per_tile = v->rows_per_tile;
  r.q_seq_len = v->q_seq_len;
  r.head_fold = v->head_fold;
  r.heads_per_group = v->heads_per_group;
  r.tokens_per_tile = v->tokens_per_tile;
  r.blocks_per_cu = v->blocks_per_cu;
  r.default_num_cu = mlaps::DefaultNumCu(q.arch) * std::max(1, v->blocks_per_cu);
  r.default_kv_lanes = mlaps::DefaultKvLanes(q.arch);
  *out = r;
  return MLAPS_OK;
}

static int32_t mlaps_default_fixed_overhead_impl(const mlaps_variant_query* query,
                                                 int32_t page_size, int32_t kv_granularity,
                                                 int32_t num_cu, int32_t* out, char* err,
                                                 int64_t err_len) {
  if (query == nullptr || out == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "query or out is NULL", err, err_len);
  }
  if (page_size < 1 || kv_granularity < 0 || num_cu < 0) {
    return Fail(MLAPS_INVALID_ARGUMENT,
                absl::StrCat("page_size = ", page_size, ", kv_granularity = ", kv_granularity,
                             ", num_cu = ", num_cu, ": need page_size >= 1, the others >= 0"),
                err, err_len);
  }
  mlaps::VariantQuery q;
  if (absl::Status s = ParseVariantQuery(query, &q); !s.ok()) return FromStatus(s, err, err_len);
  absl::StatusOr<mlaps::ResolvedVariant> v = mlaps::ResolveVariant(q);
  if (!v.ok()) return FromStatus(v.status(), err, err_len);
  *out = mlaps::DefaultFixedOverhead(
      *v, q.arch, page_size, kv_granularity > 0 ? kv_granularity : std::max(16, page_size), num_cu);
  return MLAPS_OK;
}

static int32_t mlaps_kv_lanes_impl(const mlaps_variant_query* query, int32_t num_cu,
                                   int32_t max_lanes, int32_t* out, char* err, int64_t err_len) {
  if (query == nullptr || out == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "query or out is NULL", err, err_len);
  }
  if (num_cu < 1 || max_lanes < 0 || max_lanes > 64) {
    return Fail(MLAPS_INVALID_ARGUMENT,
                absl::StrCat("num_cu = ", num_cu, ", max_lanes = ", max_lanes,
                             ": need num_cu >= 1 and max_lanes in [0, 64] (0: the arch's "
                             "default), as PlanOptions::kv_lanes"),
                err, err_len);
  }
  mlaps::VariantQuery q;
  if (absl::Status s = ParseVariantQuery(query, &q); !s.ok()) return FromStatus(s, err, err_len);
  absl::StatusOr<mlaps::ResolvedVariant> v = mlaps::ResolveVariant(q);
  if (!v.ok()) return FromStatus(v.status(), err, err_len);
  *out = mlaps::UniformKvLanes(*v, q.qlen, num_cu,
                               max_lanes > 0 ? max_lanes : mlaps::DefaultKvLanes(q.arch));
  return MLAPS_OK;
}

static int32_t mlaps_capacity_of_impl(const mlaps_capacity_query* query, mlaps_capacity* out,
                                      char* err, int64_t err_len) {
  if (query == nullptr || out == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "query or out is NULL", err, err_len);
  }
  mlaps::CapacityQuery q;
  absl::Status s = ParseArch(query->arch, &q.arch);
  if (s.ok()) s = ParseDType("q_dtype", query->q_dtype, &q.q_dtype);
  if (s.ok()) s = ParseDType("kv_dtype", query->kv_dtype, &q.kv_dtype);
  if (!s.ok()) return FromStatus(s, err, err_len);
  q.num_heads = query->num_heads;
  q.max_batch = query->max_batch;
  q.max_qlen = query->max_qlen;
  q.num_cu = query->num_cu;
  q.cp_round_robin = query->cp_round_robin != 0;
  q.lse = query->lse != 0;
  absl::StatusOr<mlaps::PlanCapacity> c = mlaps::ComputePlanCapacity(q);
  if (!c.ok()) return FromStatus(c.status(), err, err_len);
  out->qo_indptr = c->qo_indptr;
  out->work_indptr = c->work_indptr;
  out->work_info = c->work_info;
  out->reduce_indptr = c->reduce_indptr;
  out->reduce_final_map = c->reduce_final_map;
  out->reduce_partial_map = c->reduce_partial_map;
  out->partial_rows = c->partial_rows;
  out->partial_o_bytes = c->partial_o_bytes;
  out->partial_lse_bytes = c->partial_lse_bytes;
  return MLAPS_OK;
}

static int32_t mlaps_plan_impl(const mlaps_batch* batch, const mlaps_plan_options* options,
                               const mlaps_plan_buffers* buffers, mlaps_plan_sizes* sizes,
                               char* err, int64_t err_len) {
  if (options == nullptr || buffers == nullptr || sizes == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "options, buffers or sizes is NULL", err, err_len);
  }
  mlaps::Batch b;
  if (absl::Status s = ToBatch(batch, &b); !s.ok()) return FromStatus(s, err, err_len);
  mlaps::PlanOptions o;
  o.num_cu = options->num_cu;
  o.kv_granularity = options->kv_granularity;
  o.fixed_overhead = options->fixed_overhead;
  o.max_split_per_batch = options->max_split_per_batch;
  if (options->policy != 0 && options->policy != 1) {
    return Fail(MLAPS_INVALID_ARGUMENT,
                absl::StrCat("policy = ", options->policy,
                             ": must be 0 (greedy_payload) or 1 (longest_first)"),
                err, err_len);
  }
  o.policy =
      options->policy == 0 ? mlaps::PlanPolicy::kGreedyPayload : mlaps::PlanPolicy::kLongestFirst;
  o.lse = options->lse != 0;
  absl::Status s;
  mlaps::PlanBuffers pb;
  pb.qo_indptr = SpanOf("qo_indptr", buffers->qo_indptr, buffers->qo_indptr_len, &s);
  pb.work_indptr = SpanOf("work_indptr", buffers->work_indptr, buffers->work_indptr_len, &s);
  pb.work_info = SpanOf("work_info_set", reinterpret_cast<mlaps::WorkInfo*>(buffers->work_info),
                        buffers->work_info_rows, &s);
  pb.reduce_indptr =
      SpanOf("reduce_indptr", buffers->reduce_indptr, buffers->reduce_indptr_len, &s);
  pb.reduce_final_map =
      SpanOf("reduce_final_map", buffers->reduce_final_map, buffers->reduce_final_map_len, &s);
  pb.reduce_partial_map = SpanOf("reduce_partial_map", buffers->reduce_partial_map,
                                 buffers->reduce_partial_map_len, &s);
  if (!s.ok()) return FromStatus(s, err, err_len);
  for (int i = 0; i < b.num_requests(); ++i) {
    const int qlen = b.qlen(i);
    if (options->max_seqlen_qo > 0 && qlen > options->max_seqlen_qo) {
      return Fail(MLAPS_INVALID_ARGUMENT,
                  absl::StrCat("seqlens_qo_indptr: request ", i, " has ", qlen,
                               " q tokens > max_seqlen_qo = ", options->max_seqlen_qo),
                  err, err_len);
    }
    if (options->uni_seqlen_qo > 0 && qlen != options->uni_seqlen_qo) {
      return Fail(MLAPS_INVALID_ARGUMENT,
                  absl::StrCat("seqlens_qo_indptr: request ", i, " has ", qlen,
                               " q tokens != uni_seqlen_qo = ", options->uni_seqlen_qo),
                  err, err_len);
    }
  }
  absl::StatusOr<mlaps::PlanOptions> resolved = mlaps::ResolveOptions(b, o);
  if (!resolved.ok()) return FromStatus(resolved.status(), err, err_len);
  absl::StatusOr<mlaps::PlanSizes> r = mlaps::PlanDecodeInto(b, o, pb);
  if (!r.ok()) return FromStatus(r.status(), err, err_len);
  mlaps_plan_sizes out;
  std::memset(&out, 0, sizeof out);
  CopyText(r->variant.name, out.variant, sizeof out.variant);
  out.num_cu = r->num_cu;
  out.head_fold = r->variant.head_fold;
  out.tokens_per_tile = r->variant.tokens_per_tile;
  out.rows_per_tile = r->variant.rows_per_tile;
  out.heads_per_group = r->variant.heads_per_group;
  out.blocks_per_cu = r->variant.blocks_per_cu;
  out.kv_granularity = resolved->kv_granularity;
  out.fixed_overhead = resolved->fixed_overhead;
  out.num_virtual_requests = r->num_virtual_requests;
  out.num_works = r->num_works;
  out.num_reduce_tiles = r->num_reduce_tiles;
  out.num_reduce_pieces = r->num_reduce_pieces;
  out.num_partial_rows = r->num_partial_rows;
  out.max_qlen = b.max_qlen();
  out.kv_lanes = r->kv_lanes;
  *sizes = out;
  return MLAPS_OK;
}

static int32_t mlaps_check_plan_impl(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                                     const mlaps_check_options* options, int32_t* num_violations,
                                     char* text, int64_t text_len, int64_t* text_needed, char* err,
                                     int64_t err_len) {
  if (options == nullptr || num_violations == nullptr || text_needed == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "options, num_violations or text_needed is NULL", err,
                err_len);
  }
  mlaps::Batch b;
  if (absl::Status s = ToBatch(batch, &b); !s.ok()) return FromStatus(s, err, err_len);
  mlaps::WorkPlan p;
  if (absl::Status s = ToPlan(plan, options->head_fold, &p); !s.ok()) {
    return FromStatus(s, err, err_len);
  }
  mlaps::sim::CheckOptions co;
  co.num_cu = options->num_cu;
  co.head_fold = options->head_fold;
  co.partial_rows_capacity = options->partial_rows_capacity;
  co.max_violations = std::max(1, options->max_violations);
  const std::vector<mlaps::sim::Violation> v = mlaps::sim::CheckPlan(b, p, co);
  std::string out;
  for (const mlaps::sim::Violation& x : v) {
    std::string msg = x.message;
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::replace(msg.begin(), msg.end(), '\t', ' ');
    absl::StrAppend(&out, mlaps::sim::DefectName(x.defect), "\t", x.work, "\t", x.field, "\t", msg,
                    "\n");
  }
  *num_violations = static_cast<int32_t>(v.size());
  *text_needed = static_cast<int64_t>(out.size()) + 1;
  if (text == nullptr || text_len < *text_needed) {
    return Fail(MLAPS_RESOURCE_EXHAUSTED,
                absl::StrCat("violation text needs ", *text_needed, " bytes, got ", text_len), err,
                err_len);
  }
  std::memcpy(text, out.c_str(), out.size() + 1);
  return MLAPS_OK;
}

static int32_t mlaps_simulate_impl(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                                   const mlaps_sim_inputs* inputs, mlaps_sim_result* result,
                                   char* err, int64_t err_len) {
  if (inputs == nullptr || result == nullptr) {
    return Fail(MLAPS_INVALID_ARGUMENT, "inputs or result is NULL", err, err_len);
  }
  mlaps::Batch b;
  if (absl::Status s = ToBatch(batch, &b); !s.ok()) return FromStatus(s, err, err_len);
  mlaps::WorkPlan p;
  if (absl::Status s = ToPlan(plan, inputs->head_fold, &p); !s.ok()) {
    return FromStatus(s, err, err_len);
  }
  const int64_t rows = b.total_q_tokens() * b.num_heads;
  if (result->o == nullptr || result->o_len != rows * mlaps::kHeadDimV) {
    return Fail(MLAPS_INVALID_ARGUMENT,
                absl::StrCat("o has ", result->o_len,
                             " floats, needs total_q * H * 512 = ", rows * mlaps::kHeadDimV),
                err, err_len);
  }
  if (result->lse == nullptr || result->lse_len != rows) {
    return Fail(MLAPS_INVALID_ARGUMENT,
                absl::StrCat("lse has ", result->lse_len, " floats, needs total_q * H = ", rows),
                err, err_len);
  }
  if ((result->ref_o != nullptr && result->ref_o_len != rows * mlaps::kHeadDimV) ||
      (result->ref_lse != nullptr && result->ref_lse_len != rows)) {
    return Fail(MLAPS_INVALID_ARGUMENT, "ref_o / ref_lse lengths differ from o / lse", err,
                err_len);
  }
  mlaps::sim::DecodeCase generated;
  mlaps::sim::DecodeInputs in;
  if (inputs->q == nullptr && inputs->kv_cache == nullptr) {
    generated = mlaps::sim::MakeDecodeCase(b, inputs->seed, inputs->q_scale, inputs->kv_scale);
    in = generated.Inputs();
  } else {
    if (inputs->q == nullptr || inputs->kv_cache == nullptr) {
      return Fail(MLAPS_INVALID_ARGUMENT, "give both q and kv_cache, or neither (seeded inputs)",
                  err, err_len);
    }
    if (inputs->q_len < 0 || inputs->kv_cache_len < 0 || inputs->kv_indices_len < 0) {
      return Fail(MLAPS_INVALID_ARGUMENT, "negative input length", err, err_len);
    }
    in.q = absl::Span<const float>(inputs->q, inputs->q_len);
    in.kv_cache = absl::Span<const float>(inputs->kv_cache, inputs->kv_cache_len);
    if (inputs->kv_indices != nullptr) {
      in.kv_indices = absl::Span<const int32_t>(inputs->kv_indices, inputs->kv_indices_len);
    }
    in.q_scale = inputs->q_scale;
    in.kv_scale = inputs->kv_scale;
  }
  if (inputs->sm_scale > 0) in.sm_scale = inputs->sm_scale;
  mlaps::sim::ExecutorOptions eo;
  if (inputs->kv_block > 0) eo.kv_block = inputs->kv_block;
  eo.final_o_bf16 = inputs->final_o_bf16 != 0;
  eo.partial_rows_capacity = inputs->partial_rows_capacity;
  absl::StatusOr<mlaps::sim::ExecutorOutput> out = mlaps::sim::ExecutePlan(b, p, in, eo);
  if (!out.ok()) return FromStatus(out.status(), err, err_len);
  absl::StatusOr<mlaps::sim::ReferenceOutput> ref = mlaps::sim::ReferenceDecode(b, in);
  if (!ref.ok()) return FromStatus(ref.status(), err, err_len);
  absl::StatusOr<mlaps::sim::Comparison> cmp = mlaps::sim::CompareOutputs(
      out->o, out->lse, ref->o, ref->lse, mlaps::sim::GatesFor(b.kv_dtype));
  if (!cmp.ok()) return FromStatus(cmp.status(), err, err_len);
  std::copy(out->o.begin(), out->o.end(), result->o);
  std::copy(out->lse.begin(), out->lse.end(), result->lse);
  if (result->ref_o != nullptr) std::copy(ref->o.begin(), ref->o.end(), result->ref_o);
  if (result->ref_lse != nullptr) std::copy(ref->lse.begin(), ref->lse.end(), result->ref_lse);
  result->cos_diff = cmp->cos_diff;
  result->max_abs_err = cmp->max_abs_err;
  result->fail_fraction = cmp->fail_fraction;
  result->lse_max_abs_err = cmp->lse_max_abs_err;
  result->num_elements = cmp->num_elements;
  result->num_failing = cmp->num_failing;
  result->o_mask_mismatches = cmp->o_mask_mismatches;
  result->lse_mask_mismatches = cmp->lse_mask_mismatches;
  result->worst_index = cmp->worst_index;
  result->passed = cmp->passed ? 1 : 0;
  result->final_items = out->stats.final_items;
  result->partial_items = out->stats.partial_items;
  result->reduce_tiles = out->stats.reduce_tiles;
  result->unwritten_tokens = out->stats.unwritten_tokens;
  result->rewritten_tokens = out->stats.rewritten_tokens;
  CopyText(cmp->Summary(), result->summary, sizeof result->summary);
  return MLAPS_OK;
}

// The exported functions: no C++ exception crosses the C ABI (it becomes MLAPS_INTERNAL).
int32_t mlaps_validate_batch(const mlaps_batch* batch, char* err, int64_t err_len) {
  return Guarded(err, err_len, [&] { return mlaps_validate_batch_impl(batch, err, err_len); });
}

int32_t mlaps_resolve_variant(const mlaps_variant_query* query, mlaps_variant* out, char* err,
                              int64_t err_len) {
  return Guarded(err, err_len,
                 [&] { return mlaps_resolve_variant_impl(query, out, err, err_len); });
}

int32_t mlaps_default_fixed_overhead(const mlaps_variant_query* query, int32_t page_size,
                                     int32_t kv_granularity, int32_t num_cu, int32_t* out,
                                     char* err, int64_t err_len) {
  return Guarded(err, err_len, [&] {
    return mlaps_default_fixed_overhead_impl(query, page_size, kv_granularity, num_cu, out, err,
                                             err_len);
  });
}

int32_t mlaps_kv_lanes(const mlaps_variant_query* query, int32_t num_cu, int32_t max_lanes,
                       int32_t* out, char* err, int64_t err_len) {
  return Guarded(err, err_len,
                 [&] { return mlaps_kv_lanes_impl(query, num_cu, max_lanes, out, err, err_len); });
}

int32_t mlaps_capacity_of(const mlaps_capacity_query* query, mlaps_capacity* out, char* err,
                          int64_t err_len) {
  return Guarded(err, err_len, [&] { return mlaps_capacity_of_impl(query, out, err, err_len); });
}

int32_t mlaps_plan(const mlaps_batch* batch, const mlaps_plan_options* options,
                   const mlaps_plan_buffers* buffers, mlaps_plan_sizes* sizes, char* err,
                   int64_t err_len) {
  return Guarded(err, err_len,
                 [&] { return mlaps_plan_impl(batch, options, buffers, sizes, err, err_len); });
}

int32_t mlaps_check_plan(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                         const mlaps_check_options* options, int32_t* num_violations, char* text,
                         int64_t text_len, int64_t* text_needed, char* err, int64_t err_len) {
  return Guarded(err, err_len, [&] {
    return mlaps_check_plan_impl(batch, plan, options, num_violations, text, text_len, text_needed,
                                 err, err_len);
  });
}

int32_t mlaps_simulate(const mlaps_batch* batch, const mlaps_plan_buffers* plan,
                       const mlaps_sim_inputs* inputs, mlaps_sim_result* result, char* err,
                       int64_t err_len) {
  return Guarded(err, err_len,
                 [&] { return mlaps_simulate_impl(batch, plan, inputs, result, err, err_len); });
}

}  // extern "C"
