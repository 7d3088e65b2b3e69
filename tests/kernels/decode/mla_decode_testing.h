// Host-side helpers shared by the MLA decode kernel tests (the GPU test and the CPU
// emulation test): inputs in the kernels' byte formats, the plan packed into one int32
// arena, params from a batch + plan + buffer pointers, and the kernel's trace as a
// sim::Trace. No GPU headers.
#ifndef MLAPS_TESTS_KERNELS_MLA_DECODE_TESTING_H_
#define MLAPS_TESTS_KERNELS_MLA_DECODE_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_staging.h"
#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/types.h"
#include "metadata/work_plan.h"
#include "sim/decode_case.h"
#include "sim/numerics.h"
#include "sim/trace.h"

namespace mlaps::testing {

// The launch staging lives in kernels/decode/mla_decode_staging.h (the benchmarks use it too).
using staging::BatchArena;
using staging::CpRank;
using staging::DecodePointers;
using staging::MaskOf;
using staging::PackBatch;
using staging::PackPlan;
using staging::PartialRowsFor;
using staging::PlanArena;
using staging::ReduceParamsFor;

// staging::DecodeParamsFor, plus MLAPS_MLA_BLOCK_THREADS=256|512 and MLAPS_MLA_PATH=auto|mma|
// wgmma|f16|narrow|f16pv from the environment to run the GPU tests on one decode block shape or
// kernel (default: the launcher's choice).
inline MlaDecodeParams DecodeParamsFor(const Batch& batch, const WorkPlan& plan,
                                       const BatchArena& ba, const PlanArena& pa, int64_t num_pages,
                                       double q_scale, double kv_scale, int64_t partial_rows,
                                       const DecodePointers& d) {
  MlaDecodeParams p =
      staging::DecodeParamsFor(batch, plan, ba, pa, num_pages, q_scale, kv_scale, partial_rows, d);
  if (const char* env = std::getenv("MLAPS_MLA_BLOCK_THREADS")) p.block_threads = std::atoi(env);
  p.path = staging::ParseDecodePath(std::getenv("MLAPS_MLA_PATH"));
  return p;
}

// Q / KV values (floats holding exact bf16 or fp8 values) as the kernel's bytes.
inline std::vector<uint8_t> ToDeviceBytes(const std::vector<float>& x, DType dtype) {
  std::vector<uint8_t> out;
  if (dtype == DType::kFp8) {
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = sim::FloatToFp8Bits(x[i], Fp8Format::kE4m3fn);
  } else {
    out.resize(2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t b = sim::FloatToBf16Bits(x[i]);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

inline std::vector<float> Bf16ToFloats(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = sim::Bf16BitsToFloat(bits[i]);
  return out;
}

inline CpRank MakeCpRank(const CpShardView& view, const CpSharding& s, int rank) {
  CpRank cp;
  cp.world_size = s.world_size;
  cp.interleave = s.interleave;
  cp.rank = rank;
  cp.global_kv_len.assign(view.global_kv_len.begin(), view.global_kv_len.end());
  return cp;
}

// Rank `view`'s case: the global case's Q and KV cache (viewed as the shard's sub-pages of
// I tokens: the same floats), the shard's batch and sub-page ids.
inline sim::DecodeCase MakeCpRankCase(const sim::DecodeCase& global, const CpShardView& view) {
  sim::DecodeCase c;
  c.batch = view.batch;
  c.q = global.q;
  c.kv_cache = global.kv_cache;
  c.kv_indices = view.kv_indices;
  c.q_scale = global.q_scale;
  c.kv_scale = global.kv_scale;
  return c;
}

// The kernel's trace (entries at work_indptr[cu] + order, counts per cu) as a sim::Trace.
inline sim::Trace TraceFromKernel(const WorkPlan& plan, const std::vector<MlaTraceEntry>& entries,
                                  const std::vector<int32_t>& counts) {
  sim::Trace trace;
  trace.cus.resize(plan.num_cu);
  for (int c = 0; c < plan.num_cu; ++c) {
    for (int k = 0; k < counts[c]; ++k) {
      const int64_t at = plan.work_indptr[c] + k;
      if (at < 0 || at >= static_cast<int64_t>(entries.size())) break;
      const MlaTraceEntry& e = entries[at];
      sim::TraceItem item;
      item.work = e.work;
      std::memcpy(&item.info, e.info, sizeof(item.info));
      trace.cus[c].push_back(item);
    }
  }
  return trace;
}

// Poison for outputs: NaN in fp32 and bf16, so an element no kernel wrote cannot pass.
constexpr uint32_t kPoisonF32 = 0xffffffffu;
constexpr uint16_t kPoisonBf16 = 0xffff;
inline float PoisonFloat() {
  float f;
  std::memcpy(&f, &kPoisonF32, 4);
  return f;
}

// One decode + reduce run of `c` under `plan` in host memory (the CPU emulation): the inputs
// in the kernels' formats, every output poisoned, and the params pointing at them. Holds the
// buffers the params point into, so it is neither copied nor moved. `mutate` may break the
// batch / plan words before the params are made (status tests).
class HostDecodeRun {
 public:
  using Mutate = void (*)(std::vector<int32_t>& batch_words, const BatchArena&,
                          std::vector<int32_t>& plan_words, const PlanArena&);
  // merge: the decode merges the plan's split tiles itself (MlaDecodeParams::merge, counters
  // zeroed here), so no reduce follows.
  HostDecodeRun(const sim::DecodeCase& c, const WorkPlan& plan, const CpRank* cp, bool o_fp32,
                Mutate mutate = nullptr, bool merge = false)
      : plan_(plan),
        o_fp32_(o_fp32),
        q_(ToDeviceBytes(c.q, c.batch.q_dtype)),
        kv_(ToDeviceBytes(c.kv_cache, c.batch.kv_dtype)),
        ba_(PackBatch(c.batch, c.kv_indices, cp)),
        pa_(PackPlan(plan)) {
    const Batch& batch = c.batch;
    if (mutate != nullptr) mutate(ba_.words, ba_, pa_.words, pa_);
    const int64_t partial_rows = PartialRowsFor(plan);
    const int64_t hg = batch.num_heads / plan.head_fold;
    const int64_t o_elems = batch.total_q_tokens() * batch.num_heads * kHeadDimV;
    o_.assign(o_fp32 ? 0 : o_elems, kPoisonBf16);
    o32_.assign(o_fp32 ? o_elems : 0, PoisonFloat());
    lse_.assign(batch.total_q_tokens() * batch.num_heads, PoisonFloat());
    partial_o_.assign(partial_rows * hg * kHeadDimV, PoisonFloat());
    partial_lse_.assign(partial_rows * hg, PoisonFloat());
    trace_.resize(std::max(1, plan.num_works()));
    counts_.assign(plan.num_cu, -1);
    DecodePointers d;
    d.q = q_.data();
    d.kv = kv_.data();
    d.batch = ba_.words.data();
    d.plan = pa_.words.data();
    d.o = o_fp32 ? nullptr : o_.data();
    d.o_fp32 = o_fp32 ? o32_.data() : nullptr;
    d.lse = lse_.data();
    d.partial_o = partial_o_.data();
    d.partial_lse = partial_lse_.data();
    d.status = &status_;
    d.trace = trace_.data();
    d.trace_counts = counts_.data();
    if (merge) {
      merge_counters_.assign(std::max(1, plan.num_reduce_tiles()), 0);
      d.merge_counters = merge_counters_.data();
    }
    const int64_t num_pages =
        static_cast<int64_t>(c.kv_cache.size()) / (int64_t{batch.page_size} * kHeadDimQk);
    decode = ::mlaps::testing::DecodeParamsFor(batch, plan, ba_, pa_, num_pages, c.q_scale,
                                               c.kv_scale, partial_rows, d);
    decode.trace_clocks = true;
    reduce = ReduceParamsFor(batch, plan, ba_, pa_, partial_rows, d);
  }
  HostDecodeRun(const HostDecodeRun&) = delete;
  HostDecodeRun& operator=(const HostDecodeRun&) = delete;

  MlaDecodeParams decode;  // adjust (block shape, path) before the launch
  MlaReduceParams reduce;

  // After the launches: final O as floats (bf16 values, or fp32 with o_fp32), LSE, status and
  // the kernel's trace.
  std::vector<float> O() const { return o_fp32_ ? o32_ : Bf16ToFloats(o_); }
  const std::vector<float>& Lse() const { return lse_; }
  const MlaStatus& Status() const { return status_; }
  sim::Trace Trace() const { return TraceFromKernel(plan_, trace_, counts_); }
  const std::vector<int32_t>& MergeCounters() const { return merge_counters_; }

 private:
  const WorkPlan& plan_;
  bool o_fp32_;
  std::vector<uint8_t> q_, kv_;
  BatchArena ba_;
  PlanArena pa_;
  std::vector<uint16_t> o_;
  std::vector<float> o32_, lse_, partial_o_, partial_lse_;
  std::vector<MlaTraceEntry> trace_;
  std::vector<int32_t> counts_;
  std::vector<int32_t> merge_counters_;
  MlaStatus status_{};
};

}  // namespace mlaps::testing

#endif  // MLAPS_TESTS_KERNELS_MLA_DECODE_TESTING_H_
