// Host-side staging of an MLA decode launch: the batch's and the plan's int32 arrays packed
// into two arenas (one upload each), and MlaDecodeParams / MlaReduceParams filled from a
// batch, its plan and where the buffers live. Shared by the GPU tests, the CPU emulation
// tests and the benchmarks. Plain C++: no GPU headers, no allocation beyond the arenas.
#ifndef MLAPS_KERNELS_MLA_DECODE_STAGING_H_
#define MLAPS_KERNELS_MLA_DECODE_STAGING_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/decode/mla_decode.h"
#include "metadata/batch.h"
#include "metadata/types.h"
#include "metadata/work_plan.h"

namespace mlaps::staging {

// The plan's arrays back to back in one int32 arena (one upload), at these offsets.
struct PlanArena {
  std::vector<int32_t> words;
  int64_t work_indptr = 0, work_info = 0, reduce_indptr = 0, reduce_final_map = 0,
          reduce_partial_map = 0;
};

inline PlanArena PackPlan(const WorkPlan& plan) {
  PlanArena a;
  auto append = [&a](const int32_t* data, size_t n) {
    const int64_t at = static_cast<int64_t>(a.words.size());
    a.words.insert(a.words.end(), data, data + n);
    while (a.words.size() % 4 != 0) a.words.push_back(0);  // 16-byte aligned sections
    return at;
  };
  a.work_indptr = append(plan.work_indptr.data(), plan.work_indptr.size());
  a.work_info =
      append(reinterpret_cast<const int32_t*>(plan.work_info.data()), 8 * plan.work_info.size());
  const int32_t zero = 0;
  a.reduce_indptr = plan.reduce_indptr.empty()
                        ? append(&zero, 1)
                        : append(plan.reduce_indptr.data(), plan.reduce_indptr.size());
  a.reduce_final_map = append(plan.reduce_final_map.data(), plan.reduce_final_map.size());
  a.reduce_partial_map = append(plan.reduce_partial_map.data(), plan.reduce_partial_map.size());
  return a;
}

// A CP round-robin rank (kMlaMaskCpRoundRobin): its sharding and the requests' global kv
// lengths (metadata/cp_shard.h's CpShardView::global_kv_len).
struct CpRank {
  int world_size = 1, interleave = 1, rank = 0;
  std::vector<int32_t> global_kv_len;  // [B]
};

// Batch arrays back to back: qo_indptr | kv_indptr | kv_last_page_lens | kv_indices
// [| CP global kv lengths].
struct BatchArena {
  std::vector<int32_t> words;
  int64_t qo_indptr = 0, kv_indptr = 0, last_page_lens = 0, kv_indices = 0;
  int64_t num_kv_indices = 0;
  int64_t cp_global_kv_len = -1;  // -1: not CP
  int cp_world_size = 1, cp_interleave = 1, cp_rank = 0;
};

inline BatchArena PackBatch(const Batch& batch, const std::vector<int32_t>& kv_indices,
                            const CpRank* cp = nullptr) {
  BatchArena a;
  auto append = [&a](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(a.words.size());
    a.words.insert(a.words.end(), v.begin(), v.end());
    return at;
  };
  a.qo_indptr = append(batch.qo_indptr);
  a.kv_indptr = append(batch.kv_indptr);
  a.last_page_lens = append(batch.kv_last_page_lens);
  a.kv_indices = append(kv_indices);
  a.num_kv_indices = static_cast<int64_t>(kv_indices.size());
  if (cp != nullptr) {
    a.cp_global_kv_len = append(cp->global_kv_len);
    a.cp_world_size = cp->world_size;
    a.cp_interleave = cp->interleave;
    a.cp_rank = cp->rank;
  }
  return a;
}

// Where the buffers live (device memory on a GPU, host memory in the emulation).
struct DecodePointers {
  const void* q = nullptr;
  const void* kv = nullptr;
  const int32_t* batch = nullptr;  // BatchArena words
  const int32_t* plan = nullptr;   // PlanArena words
  uint16_t* o = nullptr;           // bf16 final O, or
  float* o_fp32 = nullptr;         // fp32 final O (CP ranks): exactly one of the two is set
  float* lse = nullptr;
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  MlaStatus* status = nullptr;
  MlaTraceEntry* trace = nullptr;
  int32_t* trace_counts = nullptr;
  // Set: the decode merges the plan's split tiles itself (MlaDecodeParams::merge); one
  // counter a split tile, zero before the first launch.
  int32_t* merge_counters = nullptr;
};

inline MlaMask MaskOf(const Batch& batch) {
  if (batch.sparse_topk > 0 || !batch.causal) return kMlaMaskNone;
  return batch.cp_round_robin ? kMlaMaskCpRoundRobin : kMlaMaskCausal;
}

inline MlaDecodeParams DecodeParamsFor(const Batch& batch, const WorkPlan& plan,
                                       const BatchArena& ba, const PlanArena& pa, int64_t num_pages,
                                       double q_scale, double kv_scale, int64_t partial_rows,
                                       const DecodePointers& d) {
  MlaDecodeParams p;
  p.q = d.q;
  p.kv_cache = d.kv;
  p.qo_indptr = d.batch + ba.qo_indptr;
  p.kv_indptr = d.batch + ba.kv_indptr;
  p.kv_last_page_lens = d.batch + ba.last_page_lens;
  p.kv_indices = d.batch + ba.kv_indices;
  p.num_requests = batch.num_requests();
  p.num_q_tokens = batch.total_q_tokens();
  p.num_pages = num_pages;
  p.num_kv_indices = ba.num_kv_indices;
  p.num_heads = batch.num_heads;
  p.page_size = batch.page_size;
  p.dtype = batch.q_dtype == DType::kFp8 ? kMlaFp8E4m3fn : kMlaBf16;
  p.mask = MaskOf(batch);
  p.cp_world_size = ba.cp_world_size;
  p.cp_interleave = ba.cp_interleave;
  p.cp_rank = ba.cp_rank;
  if (ba.cp_global_kv_len >= 0) p.cp_global_kv_len = d.batch + ba.cp_global_kv_len;
  p.q_scale = static_cast<float>(q_scale);
  p.kv_scale = static_cast<float>(kv_scale);
  p.work_indptr = d.plan + pa.work_indptr;
  p.work_info = d.plan + pa.work_info;
  p.work_info_capacity = plan.num_works();
  p.num_cu = plan.num_cu;
  p.cu_lanes = plan.kv_lanes;  // the lanes of a request on neighbouring blocks (PlanCu)
  p.head_fold = plan.head_fold;
  p.tokens_per_tile = plan.tokens_per_tile;
  p.rows_per_tile = plan.rows_per_tile;
  p.o = d.o;
  p.o_fp32 = d.o_fp32;
  p.lse = d.lse;
  p.partial_o = d.partial_o;
  p.partial_lse = d.partial_lse;
  p.partial_rows_capacity = partial_rows;
  p.status = d.status;
  p.trace = d.trace;
  p.trace_capacity = d.trace != nullptr ? plan.num_works() : 0;
  p.trace_counts = d.trace_counts;
  if (d.merge_counters != nullptr) {
    p.merge.reduce_indptr = d.plan + pa.reduce_indptr;
    p.merge.reduce_final_map = d.plan + pa.reduce_final_map;
    p.merge.reduce_partial_map = d.plan + pa.reduce_partial_map;
    p.merge.reduce_partial_map_capacity = static_cast<int64_t>(plan.reduce_partial_map.size());
    p.merge.num_reduce_tiles = plan.num_reduce_tiles();
    p.merge.reduce_tiles_capacity = plan.num_reduce_tiles();
    p.merge.counters = d.merge_counters;
  }
  return p;
}

inline MlaReduceParams ReduceParamsFor(const Batch& batch, const WorkPlan& plan,
                                       const BatchArena& ba, const PlanArena& pa,
                                       int64_t partial_rows, const DecodePointers& d) {
  MlaReduceParams r;
  r.reduce_indptr = d.plan + pa.reduce_indptr;
  r.reduce_final_map = d.plan + pa.reduce_final_map;
  r.reduce_partial_map = d.plan + pa.reduce_partial_map;
  r.reduce_partial_map_capacity = static_cast<int64_t>(plan.reduce_partial_map.size());
  r.num_reduce_tiles = plan.num_reduce_tiles();
  r.reduce_tiles_capacity = plan.num_reduce_tiles();
  r.qo_indptr = d.batch + ba.qo_indptr;
  r.num_requests = batch.num_requests();
  r.num_q_tokens = batch.total_q_tokens();
  r.num_heads = batch.num_heads;
  r.head_fold = plan.head_fold;
  r.partial_o = d.partial_o;
  r.partial_lse = d.partial_lse;
  r.partial_rows_capacity = partial_rows;
  r.o = d.o;
  r.o_fp32 = d.o_fp32;
  r.lse = d.lse;
  r.status = d.status;
  return r;
}

// The decode path named by `text` ("auto", "mma", "wgmma", "f16", "narrow" or "f16pv"; nullptr:
// auto), e.g. the MLAPS_MLA_PATH variable the GPU tests and the benchmark read; -1 for anything
// else.
inline int32_t ParseDecodePath(const char* text) {
  if (text == nullptr || std::strcmp(text, "auto") == 0) return kMlaPathAuto;
  if (std::strcmp(text, "mma") == 0) return kMlaPathMmaSync;
  if (std::strcmp(text, "wgmma") == 0) return kMlaPathWgmma;
  if (std::strcmp(text, "f16") == 0) return kMlaPathWgmmaF16;
  if (std::strcmp(text, "narrow") == 0) return kMlaPathWgmmaNarrow;
  if (std::strcmp(text, "f16pv") == 0) return kMlaPathWgmmaF16Pv;
  return -1;
}

// Rows of the partial buffers the kernels may use for `plan` (at least 1, so that the
// buffers exist).
inline int64_t PartialRowsFor(const WorkPlan& plan) {
  int64_t needed = plan.num_partial_rows;
  for (const WorkInfo& w : plan.work_info) {
    if (w.partial_qo_loc >= 0)
      needed = std::max<int64_t>(needed, w.partial_qo_loc + w.qo_end - w.qo_start);
  }
  return std::max<int64_t>(1, needed);
}

}  // namespace mlaps::staging

#endif  // MLAPS_KERNELS_MLA_DECODE_STAGING_H_
