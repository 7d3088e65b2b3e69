#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cp/cp_rank_runner.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/planner/planner_params.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/planner.h"
#include "metadata/types.h"

namespace mlaps::cp {
namespace {

std::string HipError(const char* what, hipError_t e) {
  return std::string(what) + ": " + hipGetErrorString(e);
}

#define CP_HIP(expr, what)                             \
  do {                                                 \
    const hipError_t e_ = (expr);                      \
    if (e_ != hipSuccess) return HipError((what), e_); \
  } while (0)

int64_t Align4(int64_t words) { return (words + 3) / 4 * 4; }

int64_t PlanCapacityEntries(const PlanCapacity& c, int i) {
  const int64_t entries[6] = {c.qo_indptr,     c.work_indptr,      c.work_info,
                              c.reduce_indptr, c.reduce_final_map, c.reduce_partial_map};
  return entries[i];
}
int64_t PlanCapacityWords(const PlanCapacity& c, int i) {
  return i == kGpuPlanBufWorkInfo ? 8 * PlanCapacityEntries(c, i) : PlanCapacityEntries(c, i);
}

int ReduceTilesCapacity(const CpRankSetup& s) {
  return static_cast<int>(std::max<int64_t>(0, s.capacity.reduce_indptr - 1));
}

GpuPlannerParams PlannerParams(const CpRankSetup& s, const CpRankBuffers& b) {
  GpuPlannerParams p = StaticPlannerParams(s.view.batch, s.options, s.variant, s.max_qlen);
  p.qo_indptr = b.batch + b.qo_indptr;
  p.kv_indptr = b.batch + b.kv_indptr;
  p.kv_last_page_lens = b.batch + b.last_page_lens;
  int32_t** outs[6] = {&p.out_qo_indptr, &p.work_indptr,      &p.work_info,
                       &p.reduce_indptr, &p.reduce_final_map, &p.reduce_partial_map};
  int64_t* caps[6] = {&p.out_qo_indptr_capacity,    &p.work_indptr_capacity,
                      &p.work_info_capacity,        &p.reduce_indptr_capacity,
                      &p.reduce_final_map_capacity, &p.reduce_partial_map_capacity};
  for (int i = 0; i < 6; ++i) {
    *outs[i] = b.plan + b.plan_off[i];
    *caps[i] = PlanCapacityEntries(s.capacity, i);
  }
  p.status = b.plan_status;
  return p;
}

MlaDecodeParams DecodeParams(const CpRankSetup& s, const CpRankBuffers& b) {
  const Batch& batch = s.view.batch;
  MlaDecodeParams p;
  p.q = b.q;
  p.kv_cache = b.kv;
  p.kv_indices = b.batch + b.kv_indices;
  p.qo_indptr = b.batch + b.qo_indptr;
  p.kv_indptr = b.batch + b.kv_indptr;
  p.kv_last_page_lens = b.batch + b.last_page_lens;
  p.num_requests = batch.num_requests();
  p.num_q_tokens = batch.total_q_tokens();
  p.num_pages = b.num_pages;
  p.num_kv_indices = static_cast<int64_t>(s.local_kv_indices.size());
  p.num_heads = batch.num_heads;
  p.page_size = batch.page_size;
  p.dtype = batch.q_dtype == DType::kFp8 ? kMlaFp8E4m3fn : kMlaBf16;
  p.mask = batch.causal ? kMlaMaskCpRoundRobin : kMlaMaskNone;
  p.q_scale = b.q_scale;
  p.kv_scale = b.kv_scale;
  p.cp_world_size = s.sharding.world_size;
  p.cp_interleave = s.sharding.interleave;
  p.cp_rank = s.rank;
  p.cp_global_kv_len = b.batch + b.global_kv_len;
  p.work_indptr = b.plan + b.plan_off[kGpuPlanBufWorkIndptr];
  p.work_info = b.plan + b.plan_off[kGpuPlanBufWorkInfo];
  p.work_info_capacity = s.capacity.work_info;
  p.num_cu = s.options.num_cu;
  p.head_fold = s.variant.head_fold;
  p.tokens_per_tile = s.variant.tokens_per_tile;
  p.rows_per_tile = s.variant.rows_per_tile;
  // The GPU planner's lanes for this shape (its plan stays on the device): a request's lanes on
  // neighbouring blocks. Placement only: any divisor of num_cu gives the same output.
  p.cu_lanes = UniformKvLanes(s.variant, s.max_qlen, s.options.num_cu, s.options.kv_lanes);
  p.o_fp32 = b.o;
  p.lse = b.lse;
  p.partial_o = b.partial_o;
  p.partial_lse = b.partial_lse;
  p.partial_rows_capacity = s.capacity.partial_rows;
  p.status = b.decode_status;
  return p;
}

MlaReduceParams ReduceParams(const CpRankSetup& s, const CpRankBuffers& b) {
  const Batch& batch = s.view.batch;
  MlaReduceParams r;
  r.reduce_indptr = b.plan + b.plan_off[kGpuPlanBufReduceIndptr];
  r.reduce_final_map = b.plan + b.plan_off[kGpuPlanBufReduceFinalMap];
  r.reduce_partial_map = b.plan + b.plan_off[kGpuPlanBufReducePartialMap];
  r.reduce_partial_map_capacity = s.capacity.reduce_partial_map;
  r.num_reduce_tiles_device = &b.plan_status->num_reduce_tiles;
  r.reduce_tiles_capacity = ReduceTilesCapacity(s);
  r.qo_indptr = b.batch + b.qo_indptr;
  r.num_requests = batch.num_requests();
  r.num_q_tokens = batch.total_q_tokens();
  r.num_heads = batch.num_heads;
  r.head_fold = s.variant.head_fold;
  r.partial_o = b.partial_o;
  r.partial_lse = b.partial_lse;
  r.partial_rows_capacity = s.capacity.partial_rows;
  r.o_fp32 = b.o;
  r.lse = b.lse;
  r.status = b.decode_status;
  return r;
}

template <typename T>
std::string Alloc(T** p, int64_t elements, const char* what) {
  CP_HIP(hipMalloc(p, std::max<int64_t>(1, elements) * sizeof(T)), what);
  return "";
}

}  // namespace

std::string AllocateCpRank(const CpRankSetup& s, const CpRankInputs& in, CpRankBuffers* b) {
  *b = CpRankBuffers{};
  const Batch& batch = s.view.batch;
  const int world = s.sharding.world_size;
  std::string err;
#define CP_TRY(x)                 \
  do {                            \
    err = (x);                    \
    if (!err.empty()) return err; \
  } while (0)
  CP_TRY(Alloc(reinterpret_cast<uint8_t**>(&b->q), in.q_bytes, "alloc q"));
  CP_TRY(Alloc(reinterpret_cast<uint8_t**>(&b->kv), in.kv_bytes, "alloc kv shard"));
  if (in.q != nullptr) {
    CP_HIP(hipMemcpy(b->q, in.q, in.q_bytes, hipMemcpyHostToDevice), "upload q");
  }
  if (in.kv != nullptr) {
    CP_HIP(hipMemcpy(b->kv, in.kv, in.kv_bytes, hipMemcpyHostToDevice), "upload kv shard");
  }
  b->num_pages = in.num_pages;
  b->q_scale = in.q_scale;
  b->kv_scale = in.kv_scale;
  // The batch arrays, back to back.
  std::vector<int32_t> words;
  auto append = [&words](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(words.size());
    words.insert(words.end(), v.begin(), v.end());
    return at;
  };
  b->qo_indptr = append(batch.qo_indptr);
  b->kv_indptr = append(batch.kv_indptr);
  b->last_page_lens = append(batch.kv_last_page_lens);
  b->kv_indices = append(s.local_kv_indices);
  b->global_kv_len = append(s.global_kv_len);
  CP_TRY(Alloc(&b->batch, static_cast<int64_t>(words.size()), "alloc batch"));
  CP_HIP(hipMemcpy(b->batch, words.data(), words.size() * 4, hipMemcpyHostToDevice),
         "upload batch");
  // The planner's outputs, each section 16-byte aligned (work_info rows are 16-byte stores).
  int64_t at = 0;
  for (int i = 0; i < 6; ++i) {
    b->plan_off[i] = at;
    at += Align4(PlanCapacityWords(s.capacity, i));
  }
  b->plan_words = at;
  CP_TRY(Alloc(&b->plan, at, "alloc plan"));
  CP_TRY(Alloc(&b->plan_status, 1, "alloc plan status"));
  CP_TRY(Alloc(&b->decode_status, 1, "alloc decode status"));
  b->partial_o_floats = s.capacity.partial_o_bytes / 4;
  b->partial_lse_floats = s.capacity.partial_lse_bytes / 4;
  CP_TRY(Alloc(&b->partial_o, b->partial_o_floats, "alloc partial O"));
  CP_TRY(Alloc(&b->partial_lse, b->partial_lse_floats, "alloc partial LSE"));
  CP_TRY(Alloc(&b->o, s.rows * kHeadDimV, "alloc O"));
  CP_TRY(Alloc(&b->lse, s.rows, "alloc LSE"));
  CP_TRY(Alloc(&b->gather_o, world * s.rows * kHeadDimV, "alloc gather O"));
  CP_TRY(Alloc(&b->gather_lse, world * s.rows, "alloc gather LSE"));
  CP_TRY(Alloc(&b->out_o, s.rows * kHeadDimV, "alloc merged O"));
  CP_TRY(Alloc(&b->out_lse, s.rows, "alloc merged LSE"));
#undef CP_TRY
  return "";
}

void FreeCpRank(CpRankBuffers* b) {
  void* ptrs[] = {b->q,         b->kv,          b->batch, b->plan, b->plan_status, b->decode_status,
                  b->partial_o, b->partial_lse, b->o,     b->lse,  b->gather_o,    b->gather_lse,
                  b->out_o,     b->out_lse};
  for (void* p : ptrs) {
    if (p != nullptr) (void)hipFree(p);
  }
  *b = CpRankBuffers{};
}

std::string EnqueueCpRankAttention(const CpRankSetup& s, const CpRankBuffers& b, void* stream) {
  hipStream_t st = static_cast<hipStream_t>(stream);
  const int world = s.sharding.world_size;
  // Poison: NaN floats, 0xffff bf16, -1 plan words and planner status; the decode status
  // must start at 0 (the kernel's contract).
  CP_HIP(hipMemsetAsync(b.plan, 0xff, b.plan_words * 4, st), "poison plan");
  CP_HIP(hipMemsetAsync(b.plan_status, 0xff, sizeof(GpuPlanStatus), st), "poison plan status");
  CP_HIP(hipMemsetAsync(b.decode_status, 0, sizeof(MlaStatus), st), "zero decode status");
  CP_HIP(hipMemsetAsync(b.partial_o, 0xff, std::max<int64_t>(1, b.partial_o_floats) * 4, st),
         "poison partial O");
  CP_HIP(hipMemsetAsync(b.partial_lse, 0xff, std::max<int64_t>(1, b.partial_lse_floats) * 4, st),
         "poison partial LSE");
  CP_HIP(hipMemsetAsync(b.o, 0xff, s.rows * kHeadDimV * 4, st), "poison O");
  CP_HIP(hipMemsetAsync(b.lse, 0xff, s.rows * 4, st), "poison LSE");
  CP_HIP(hipMemsetAsync(b.gather_o, 0xff, world * s.rows * kHeadDimV * 4, st), "poison gather O");
  CP_HIP(hipMemsetAsync(b.gather_lse, 0xff, world * s.rows * 4, st), "poison gather LSE");
  CP_HIP(hipMemsetAsync(b.out_o, 0xff, s.rows * kHeadDimV * 2, st), "poison merged O");
  CP_HIP(hipMemsetAsync(b.out_lse, 0xff, s.rows * 4, st), "poison merged LSE");
  const GpuPlannerParams pp = PlannerParams(s, b);
  if (const char* e = GpuPlannerParamsError(pp)) return std::string("GPU planner params: ") + e;
  if (int rc = LaunchGpuPlanner(pp, stream); rc != 0) {
    return HipError("GPU planner launch", static_cast<hipError_t>(rc));
  }
  const MlaDecodeParams dp = DecodeParams(s, b);
  if (const char* e = MlaDecodeParamsError(dp)) return std::string("decode params: ") + e;
  if (int rc = LaunchMlaDecode(dp, stream); rc != 0) {
    return HipError("decode launch", static_cast<hipError_t>(rc));
  }
  if (ReduceTilesCapacity(s) > 0) {
    const MlaReduceParams rp = ReduceParams(s, b);
    if (const char* e = MlaReduceParamsError(rp)) return std::string("reduce params: ") + e;
    if (int rc = LaunchMlaReduce(rp, stream); rc != 0) {
      return HipError("reduce launch", static_cast<hipError_t>(rc));
    }
  }
  return "";
}

std::string EnqueueCpRankMerge(const CpRankSetup& s, const CpRankBuffers& b, void* stream) {
  kernels::LseMergeParams p;
  p.o_ranks = b.gather_o;
  p.lse_ranks = b.gather_lse;
  p.world_size = s.sharding.world_size;
  p.rows = s.rows;
  p.dim = kHeadDimV;
  p.o_out = b.out_o;
  p.lse_out = b.out_lse;
  p.out_bf16 = true;
  int runtime_error = 0;
  const kernels::LseMergeError e = kernels::LaunchLseMerge(p, stream, &runtime_error);
  if (e != kernels::LseMergeError::kOk) {
    return "merge launch refused: code " + std::to_string(static_cast<int>(e)) + ", runtime " +
           std::to_string(runtime_error);
  }
  return "";
}

std::string EnqueueOneDeviceExchange(const std::vector<const CpRankSetup*>& setups,
                                     const std::vector<CpRankBuffers*>& ranks,
                                     const std::vector<void*>& streams) {
  const int world = static_cast<int>(ranks.size());
  if (static_cast<int>(setups.size()) != world || static_cast<int>(streams.size()) != world) {
    return "one setup, buffers and stream per rank";
  }
  std::vector<hipEvent_t> done(world, nullptr);
  std::string err;
  for (int r = 0; r < world && err.empty(); ++r) {
    hipError_t e = hipEventCreate(&done[r]);
    if (e == hipSuccess) e = hipEventRecord(done[r], static_cast<hipStream_t>(streams[r]));
    if (e != hipSuccess) err = HipError("exchange event", e);
  }
  for (int r = 0; r < world && err.empty(); ++r) {
    hipStream_t st = static_cast<hipStream_t>(streams[r]);
    const int64_t rows = setups[r]->rows;
    for (int src = 0; src < world && err.empty(); ++src) {
      hipError_t e = hipStreamWaitEvent(st, done[src], 0);
      if (e == hipSuccess) {
        e = hipMemcpyAsync(ranks[r]->gather_o + GatherOffsetO(src, rows), ranks[src]->o,
                           rows * kHeadDimV * 4, hipMemcpyDeviceToDevice, st);
      }
      if (e == hipSuccess) {
        e = hipMemcpyAsync(ranks[r]->gather_lse + GatherOffsetLse(src, rows), ranks[src]->lse,
                           rows * 4, hipMemcpyDeviceToDevice, st);
      }
      if (e != hipSuccess) err = HipError("exchange copy", e);
    }
  }
  // Destroying a recorded event is fine: the waits already enqueued keep their dependency.
  for (hipEvent_t e : done) {
    if (e != nullptr) (void)hipEventDestroy(e);
  }
  return err;
}

std::string RunCpRanksOnOneDevice(const std::vector<const CpRankSetup*>& setups,
                                  const std::vector<CpRankBuffers*>& ranks,
                                  const std::vector<void*>& streams) {
  const int world = static_cast<int>(ranks.size());
  for (int r = 0; r < world; ++r) {
    if (setups[r]->rank != r || setups[r]->sharding.world_size != world) {
      return "setups must be ranks 0..W-1 of one sharding, in order";
    }
    std::string err = EnqueueCpRankAttention(*setups[r], *ranks[r], streams[r]);
    if (!err.empty()) return "rank " + std::to_string(r) + ": " + err;
  }
  std::string err = EnqueueOneDeviceExchange(setups, ranks, streams);
  if (!err.empty()) return err;
  for (int r = 0; r < world; ++r) {
    err = EnqueueCpRankMerge(*setups[r], *ranks[r], streams[r]);
    if (!err.empty()) return "rank " + std::to_string(r) + ": " + err;
  }
  for (int r = 0; r < world; ++r) {
    CP_HIP(hipStreamSynchronize(static_cast<hipStream_t>(streams[r])), "sync rank stream");
  }
  return "";
}

std::string DownloadCpRank(const CpRankSetup& s, const CpRankBuffers& b, void* stream,
                           CpRankResult* out) {
  hipStream_t st = static_cast<hipStream_t>(stream);
  CP_HIP(hipStreamSynchronize(st), "sync");
  CP_HIP(hipMemcpy(&out->plan_status, b.plan_status, sizeof(GpuPlanStatus), hipMemcpyDeviceToHost),
         "download plan status");
  CP_HIP(hipMemcpy(&out->decode_status, b.decode_status, sizeof(MlaStatus), hipMemcpyDeviceToHost),
         "download decode status");
  out->o.resize(s.rows * kHeadDimV);
  out->lse.resize(s.rows);
  CP_HIP(hipMemcpy(out->o.data(), b.out_o, out->o.size() * 2, hipMemcpyDeviceToHost),
         "download merged O");
  CP_HIP(hipMemcpy(out->lse.data(), b.out_lse, out->lse.size() * 4, hipMemcpyDeviceToHost),
         "download merged LSE");
  std::vector<int32_t> plan(b.plan_words);
  CP_HIP(hipMemcpy(plan.data(), b.plan, plan.size() * 4, hipMemcpyDeviceToHost), "download plan");
  const GpuPlanStatus& ps = out->plan_status;
  int64_t used[6] = {0, 0, 0, 0, 0, 0};
  if (ps.code == kGpuPlanOk) {
    used[kGpuPlanBufQoIndptr] = int64_t{ps.num_virtual_requests} + 1;
    used[kGpuPlanBufWorkIndptr] = int64_t{s.options.num_cu} + 1;
    used[kGpuPlanBufWorkInfo] = int64_t{8} * ps.num_works;
    used[kGpuPlanBufReduceIndptr] = int64_t{ps.num_reduce_tiles} + 1;
    used[kGpuPlanBufReduceFinalMap] = int64_t{2} * ps.num_reduce_tiles;
    used[kGpuPlanBufReducePartialMap] = ps.num_reduce_pieces;
  }
  for (int i = 0; i < 6; ++i) {
    const int64_t n = std::clamp<int64_t>(used[i], 0, PlanCapacityWords(s.capacity, i));
    out->plan_buffers[i].assign(plan.begin() + b.plan_off[i], plan.begin() + b.plan_off[i] + n);
  }
  return "";
}

}  // namespace mlaps::cp
