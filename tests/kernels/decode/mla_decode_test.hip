// The persistent MLA decode + reduce kernels (kernels/decode/mla_decode.h) on the GPU.
//
// What is compared with what (the host reference must stay affordable):
//   * Executor: small and medium batches with host-made inputs (sim::MakeDecodeCase) run
//     through the plan on the GPU and through sim::ExecutePlan on the CPU; every O / LSE
//     element is compared under docs/design.md's gates (sim::CompareOutputs, sim::GatesFor), and
//     against the fp64 sim::ReferenceDecode too. Also sparse per-token batches at topk 2048
//     (qlen 2 and 4, graph-padded rows) and many-split plans.
//   * Grid: every (nhead, qlen) in {16,1 16,3 16,4 16,6 32,2 32,3 32,4 64,1 64,2 64,3 128,1
//     128,2} x batch {1, 32, 64, 128} x ctx {21, 1024, 5000, 8192, 16384}, bf16 and fp8
//     (q_scale 0.5, kv_scale 2), uniform kv with page 64; and varlen kv with page 1 on
//     batch {1, 32, 128} x ctx {1024, 8192}. Inputs are made on the GPU; every output
//     element must be written (outputs are poisoned with NaN before each run) and finite;
//     sampled (request, token, head) rows are compared with an fp64 host reference of the
//     same formula as sim::ReferenceDecode (a few rows per config: the reference costs
//     ctx x 2176 flops a row) under the same gates.
//   * Trace: the kernel's executed items, per CU in order, byte for byte against
//     sim::FormatTrace(sim::TraceOfPlan(plan)).
//   * Status word, reduce edge cases (-inf / NaN / +inf pieces, no live piece, many pieces),
//     graph replay.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "metadata/sparse_layout.h"
#include "metadata/work_plan.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"
#include "sim/trace.h"
#include "tests/kernels/decode/mla_decode_testing.h"

namespace mlaps {
namespace {

using testing::BatchArena;
using testing::DecodePointers;
using testing::PlanArena;

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

// ---- Device helpers ---------------------------------------------------------------------------

__device__ inline unsigned long long SplitMix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// RNE float -> OCP e4m3fn code with saturation (sim::FloatToFp8Bits, finite inputs).
__device__ inline uint8_t ToE4m3fn(float x) {
  const uint8_t sign = x < 0.0f ? 0x80 : 0x00;
  const float a = fabsf(x);
  if (a >= 896.0f) return sign | 0x7e;
  int e2 = 0;
  frexpf(a, &e2);
  int e = e2 - 1;
  if (a == 0.0f || e < -6) e = -6;
  const float n = rintf(ldexpf(a, 3 - e));
  const float code = (e + 6) * 8.0f + n;
  return sign | static_cast<uint8_t>(code > 126.0f ? 126.0f : code);
}

// n elements of N(0, std^2) / scale, stored as bf16 (scale ignored) or e4m3fn codes.
__global__ void FillNormal(void* dst, long long n, unsigned long long seed, float stddev,
                           float scale, int fp8) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const unsigned long long h = SplitMix(seed ^ SplitMix(static_cast<unsigned long long>(i)));
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2) * stddev;
    if (fp8) {
      static_cast<uint8_t*>(dst)[i] = ToE4m3fn(z / scale);
    } else {
      const unsigned u = __float_as_uint(z);
      static_cast<uint16_t*>(dst)[i] =
          static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
}

// counts[0]: NaN O elements (bf16), counts[1]: NaN LSEs, counts[2]: infinite LSEs.
__global__ void CountBad(const uint16_t* o, long long n_o, const float* lse, long long n_lse,
                         unsigned long long* counts) {
  unsigned long long nan_o = 0, nan_l = 0, inf_l = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n_o;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    nan_o += (o[i] & 0x7fff) > 0x7f80;
  }
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n_lse;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const unsigned u = __float_as_uint(lse[i]) & 0x7fffffffu;
    nan_l += u > 0x7f800000u;
    inf_l += u == 0x7f800000u;
  }
  if (nan_o) atomicAdd(&counts[0], nan_o);
  if (nan_l) atomicAdd(&counts[1], nan_l);
  if (inf_l) atomicAdd(&counts[2], inf_l);
}

// Rows [0, len) of request-local kv tokens through a page table, 16 bytes a thread.
__global__ void GatherRows(const uint8_t* kv, const int32_t* page_ids, int page_size, long long len,
                           int row_bytes, uint8_t* out) {
  const int parts = row_bytes / 16;
  for (long long u = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; u < len * parts;
       u += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = u / parts;
    const int part = static_cast<int>(u - j * parts);
    const long long slot =
        static_cast<long long>(page_ids[j / page_size]) * page_size + j % page_size;
    *reinterpret_cast<uint4*>(out + j * row_bytes + part * 16) =
        *reinterpret_cast<const uint4*>(kv + slot * row_bytes + part * 16);
  }
}

// ---- Host helpers -----------------------------------------------------------------------------

WorkPlan Plan(const Batch& batch, int num_cu = 0, int fixed_overhead = -1) {
  PlanOptions options;
  options.num_cu = num_cu;
  options.fixed_overhead = fixed_overhead;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

// The device's SM count (plans of one block an SM).
int SmCount() {
  int device = 0, sms = 0;
  EXPECT_EQ(hipGetDevice(&device), hipSuccess);
  EXPECT_EQ(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device), hipSuccess);
  return sms;
}

float ElemToFloat(const uint8_t* bytes, int64_t i, bool fp8) {
  if (fp8) return sim::Fp8BitsToFloat(bytes[i], Fp8Format::kE4m3fn);
  uint16_t b;
  std::memcpy(&b, bytes + 2 * i, 2);
  return sim::Bf16BitsToFloat(b);
}

// The fp64 reference of one (token, head) row (sim::ReferenceDecode's formula): q [576],
// kv [vis][576] floats.
void ReferenceRow(const std::vector<float>& q, const float* kv, int64_t vis, double logit_scale,
                  double kv_scale, double* o, double* lse) {
  std::fill(o, o + kHeadDimV, 0.0);
  if (vis <= 0) {
    *lse = kNegInfD;
    return;
  }
  std::vector<double> x(vis);
  double m = kNegInfD;
  for (int64_t j = 0; j < vis; ++j) {
    const float* k = kv + j * kHeadDimQk;
    double dot = 0;
    for (int d = 0; d < kHeadDimQk; ++d) dot += static_cast<double>(q[d]) * k[d];
    x[j] = dot * logit_scale;
    m = std::max(m, x[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < vis; ++j) {
    const double p = std::exp(x[j] - m);
    sum += p;
    const float* v = kv + j * kHeadDimQk;
    for (int d = 0; d < kHeadDimV; ++d) o[d] += p * v[d];
  }
  for (int d = 0; d < kHeadDimV; ++d) o[d] = o[d] / sum * kv_scale;
  *lse = m + std::log(sum);
}

// Device buffers reused by every run (sized for the largest grid shape).
class MlaDecodeGpu : public ::testing::Test {
 protected:
  static constexpr int64_t kKvBytes = int64_t{128} * 16384 * 576 * 2 + (int64_t{4} << 20);
  static constexpr int64_t kQBytes = int64_t{64} << 20;
  static constexpr int64_t kOBytes = int64_t{64} << 20;
  static constexpr int64_t kPartialBytes = int64_t{160} << 20;
  static constexpr int64_t kWords = int64_t{8} << 20;  // batch + plan arenas (int32)

  void SetUp() override {
    ASSERT_HIP_OK(hipMalloc(&kv_, kKvBytes));
    ASSERT_HIP_OK(hipMalloc(&q_, kQBytes));
    ASSERT_HIP_OK(hipMalloc(&o_, kOBytes));
    ASSERT_HIP_OK(hipMalloc(&lse_, kOBytes / 64));
    ASSERT_HIP_OK(hipMalloc(&partial_o_, kPartialBytes));
    ASSERT_HIP_OK(hipMalloc(&partial_lse_, kPartialBytes / 256));
    ASSERT_HIP_OK(hipMalloc(&batch_words_, kWords * 4));
    ASSERT_HIP_OK(hipMalloc(&plan_words_, kWords * 4));
    ASSERT_HIP_OK(hipMalloc(&status_, sizeof(MlaStatus)));
    ASSERT_HIP_OK(hipMalloc(&trace_, int64_t{1} << 20));
    ASSERT_HIP_OK(hipMalloc(&trace_counts_, 4096 * 4));
    ASSERT_HIP_OK(hipMalloc(&counts_, 3 * sizeof(unsigned long long)));
    ASSERT_HIP_OK(hipMalloc(&gather_, int64_t{16384} * 576 * 2));
    ASSERT_HIP_OK(hipMalloc(&merge_counters_, kMergeCounters * 4));
    ASSERT_HIP_OK(hipMemset(merge_counters_, 0, kMergeCounters * 4));
    ASSERT_HIP_OK(hipStreamCreate(&stream_));
  }
  void TearDown() override {
    for (void* p :
         {static_cast<void*>(kv_), static_cast<void*>(q_), static_cast<void*>(o_),
          static_cast<void*>(lse_), static_cast<void*>(partial_o_),
          static_cast<void*>(partial_lse_), static_cast<void*>(batch_words_),
          static_cast<void*>(plan_words_), static_cast<void*>(status_), static_cast<void*>(trace_),
          static_cast<void*>(trace_counts_), static_cast<void*>(counts_),
          static_cast<void*>(gather_), static_cast<void*>(merge_counters_)}) {
      if (p != nullptr) {
        EXPECT_EQ(hipFree(p), hipSuccess);
      }
    }
    if (stream_ != nullptr) {
      EXPECT_EQ(hipStreamDestroy(stream_), hipSuccess);
    }
  }

  // o_fp32: final O as fp32 (MlaDecodeParams::o_fp32) in the same buffer.
  DecodePointers Pointers(bool with_trace, bool o_fp32 = false) const {
    DecodePointers d;
    d.q = q_;
    d.kv = kv_;
    d.batch = batch_words_;
    d.plan = plan_words_;
    d.o = o_fp32 ? nullptr : o_;
    d.o_fp32 = o_fp32 ? reinterpret_cast<float*>(o_) : nullptr;
    d.lse = lse_;
    d.partial_o = partial_o_;
    d.partial_lse = partial_lse_;
    d.status = status_;
    d.trace = with_trace ? trace_ : nullptr;
    d.trace_counts = with_trace ? trace_counts_ : nullptr;
    d.merge_counters = merge_ ? merge_counters_ : nullptr;
    return d;
  }

  // Every merge counter of `plan`'s split tiles is back at 0 (MlaSplitMerge: each launch
  // leaves them so).
  void ExpectMergeCountersZero(const WorkPlan& plan) {
    ASSERT_LE(plan.num_reduce_tiles(), kMergeCounters);
    std::vector<int32_t> counters(plan.num_reduce_tiles());
    ASSERT_HIP_OK(
        hipMemcpy(counters.data(), merge_counters_, counters.size() * 4, hipMemcpyDeviceToHost));
    for (size_t t = 0; t < counters.size(); ++t) {
      ASSERT_EQ(counters[t], 0) << "merge counter " << t;
    }
  }

  // Uploads the batch and plan arenas, poisons the outputs, launches decode + reduce and
  // waits. The caller has Q and the KV cache in place. o_fp32: final O as fp32.
  void Launch(const Batch& batch, const WorkPlan& plan, const BatchArena& ba, const PlanArena& pa,
              int64_t num_pages, double q_scale, double kv_scale, bool with_trace,
              MlaStatus* status, bool o_fp32 = false) {
    ASSERT_LE(static_cast<int64_t>(ba.words.size()), kWords);
    ASSERT_LE(static_cast<int64_t>(pa.words.size()), kWords);
    ASSERT_HIP_OK(hipMemcpyAsync(batch_words_, ba.words.data(), ba.words.size() * 4,
                                 hipMemcpyHostToDevice, stream_));
    ASSERT_HIP_OK(hipMemcpyAsync(plan_words_, pa.words.data(), pa.words.size() * 4,
                                 hipMemcpyHostToDevice, stream_));
    const int64_t rows = batch.total_q_tokens() * batch.num_heads;
    const int64_t partial_rows =
        partial_rows_override_ >= 0 ? partial_rows_override_ : testing::PartialRowsFor(plan);
    const int64_t hg = batch.num_heads / plan.head_fold;
    const int64_t o_bytes = rows * kHeadDimV * (o_fp32 ? 4 : 2);
    ASSERT_LE(o_bytes, kOBytes);
    ASSERT_LE(partial_rows * hg * kHeadDimV * 4, kPartialBytes);
    ASSERT_HIP_OK(hipMemsetAsync(o_, 0xff, o_bytes, stream_));
    ASSERT_HIP_OK(hipMemsetAsync(lse_, 0xff, rows * 4, stream_));
    ASSERT_HIP_OK(hipMemsetAsync(partial_o_, 0xff, partial_rows * hg * kHeadDimV * 4, stream_));
    ASSERT_HIP_OK(hipMemsetAsync(partial_lse_, 0xff, partial_rows * hg * 4, stream_));
    ASSERT_HIP_OK(hipMemsetAsync(status_, 0, sizeof(MlaStatus), stream_));
    const DecodePointers d = Pointers(with_trace, o_fp32);
    MlaDecodeParams p = testing::DecodeParamsFor(batch, plan, ba, pa, num_pages, q_scale, kv_scale,
                                                 partial_rows, d);
    p.trace_clocks = with_trace;
    if (path_override_ >= 0) p.path = path_override_;
    ASSERT_EQ(MlaDecodeParamsError(p), nullptr) << MlaDecodeParamsError(p);
    ASSERT_EQ(LaunchMlaDecode(p, stream_), 0);
    if (!merge_) {  // with merge_ the decode merged the split tiles itself
      const MlaReduceParams r = testing::ReduceParamsFor(batch, plan, ba, pa, partial_rows, d);
      ASSERT_EQ(MlaReduceParamsError(r), nullptr) << MlaReduceParamsError(r);
      ASSERT_EQ(LaunchMlaReduce(r, stream_), 0);
    }
    ASSERT_HIP_OK(
        hipMemcpyAsync(status, status_, sizeof(MlaStatus), hipMemcpyDeviceToHost, stream_));
    ASSERT_HIP_OK(hipStreamSynchronize(stream_));
    if (merge_ && status->code == kMlaOk) ExpectMergeCountersZero(plan);
  }

  // Runs a host-made case; returns O (floats of the bf16 values; fp32 with o_fp32) and LSE.
  // `cp`: the case is that CP round-robin rank's shard (kMlaMaskCpRoundRobin).
  void RunCase(const sim::DecodeCase& c, const WorkPlan& plan, std::vector<float>* o,
               std::vector<float>* lse, MlaStatus* status, sim::Trace* trace = nullptr,
               const testing::CpRank* cp = nullptr, bool o_fp32 = false) {
    const std::vector<uint8_t> q = testing::ToDeviceBytes(c.q, c.batch.q_dtype);
    const std::vector<uint8_t> kv = testing::ToDeviceBytes(c.kv_cache, c.batch.kv_dtype);
    ASSERT_LE(static_cast<int64_t>(q.size()), kQBytes);
    ASSERT_LE(static_cast<int64_t>(kv.size()), kKvBytes);
    ASSERT_HIP_OK(hipMemcpy(q_, q.data(), q.size(), hipMemcpyHostToDevice));
    ASSERT_HIP_OK(hipMemcpy(kv_, kv.data(), kv.size(), hipMemcpyHostToDevice));
    const BatchArena ba = testing::PackBatch(c.batch, c.kv_indices, cp);
    const PlanArena pa = testing::PackPlan(plan);
    const int64_t num_pages =
        static_cast<int64_t>(c.kv_cache.size()) / (int64_t{c.batch.page_size} * kHeadDimQk);
    const bool with_trace = trace != nullptr;
    ASSERT_LE(int64_t{plan.num_works()} * static_cast<int64_t>(sizeof(MlaTraceEntry)),
              int64_t{1} << 20);
    if (with_trace) {
      ASSERT_HIP_OK(hipMemset(trace_counts_, 0xff, plan.num_cu * 4));
    }
    Launch(c.batch, plan, ba, pa, num_pages, c.q_scale, c.kv_scale, with_trace, status, o_fp32);
    const int64_t rows = c.batch.total_q_tokens() * c.batch.num_heads;
    lse->resize(rows);
    ASSERT_HIP_OK(hipMemcpy(lse->data(), lse_, rows * 4, hipMemcpyDeviceToHost));
    if (o_fp32) {
      o->resize(rows * kHeadDimV);
      ASSERT_HIP_OK(hipMemcpy(o->data(), o_, o->size() * 4, hipMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> bits(rows * kHeadDimV);
      ASSERT_HIP_OK(hipMemcpy(bits.data(), o_, bits.size() * 2, hipMemcpyDeviceToHost));
      *o = testing::Bf16ToFloats(bits);
    }
    if (with_trace) {
      std::vector<MlaTraceEntry> entries(plan.num_works());
      std::vector<int32_t> counts(plan.num_cu);
      ASSERT_HIP_OK(hipMemcpy(entries.data(), trace_, entries.size() * sizeof(MlaTraceEntry),
                              hipMemcpyDeviceToHost));
      ASSERT_HIP_OK(
          hipMemcpy(counts.data(), trace_counts_, counts.size() * 4, hipMemcpyDeviceToHost));
      *trace = testing::TraceFromKernel(plan, entries, counts);
      for (const MlaTraceEntry& e : entries) {
        EXPECT_EQ(e.ran, 1);
        EXPECT_GE(e.clock_end, e.clock_begin);
      }
    }
  }

  // A host-made case run on the GPU, then compared with the executor (every element) and
  // the fp64 reference. The host work of all cases runs in parallel threads after the GPU
  // runs (the device machine has cores to spare; its time is what is short).
  struct Check {
    sim::DecodeCase c;
    WorkPlan plan;
    std::string name;
    std::vector<float> o, lse;
    MlaStatus status{};
    sim::Trace trace;
    bool is_cp = false;  // a CP round-robin rank: cp describes it
    testing::CpRank cp;
    bool o_fp32 = false;  // final O as fp32 (CP ranks); the executor keeps fp32 O then
    absl::StatusOr<sim::ExecutorOutput> exec = absl::UnknownError("not run");
    absl::StatusOr<sim::ReferenceOutput> ref = absl::UnknownError("not run");
  };

  // The case's inputs; for a CP rank with the global-position hook (filled into *hook).
  static sim::DecodeInputs CaseInputs(const Check& k, sim::CpGlobalPositions* hook) {
    sim::DecodeInputs inputs = k.c.Inputs();
    if (k.is_cp) {
      const CpSharding s{k.cp.world_size, k.cp.interleave};
      const int rank = k.cp.rank;
      hook->global_position = [s, rank](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
      hook->global_kv_len.assign(k.cp.global_kv_len.begin(), k.cp.global_kv_len.end());
      inputs.cp = hook;
    }
    return inputs;
  }

  void CheckAll(std::vector<Check>& checks) {
    for (Check& k : checks) {
      SCOPED_TRACE(k.name);
      ASSERT_TRUE(sim::CheckPlan(k.c.batch, k.plan).empty());
      RunCase(k.c, k.plan, &k.o, &k.lse, &k.status, &k.trace, k.is_cp ? &k.cp : nullptr, k.o_fp32);
      if (HasFatalFailure()) return;
    }
    std::vector<std::thread> threads;
    for (Check& k : checks) {
      threads.emplace_back([&k] {
        sim::CpGlobalPositions hook;
        sim::DecodeInputs inputs = CaseInputs(k, &hook);
        sim::ExecutorOptions options;
        options.kv_block = 32;
        options.final_o_bf16 = !k.o_fp32;
        (void)(k.exec = sim::ExecutePlan(k.c.batch, k.plan, inputs, options));
      });
      threads.emplace_back([&k] {
        sim::CpGlobalPositions hook;
        (void)(k.ref = sim::ReferenceDecode(k.c.batch, CaseInputs(k, &hook)));
      });
    }
    for (std::thread& t : threads) t.join();
    for (Check& k : checks) {
      SCOPED_TRACE(k.name);
      EXPECT_EQ(k.status.code, kMlaOk) << "cu " << k.status.cu << " index " << k.status.index;
      ASSERT_TRUE(k.exec.ok()) << k.exec.status();
      ASSERT_TRUE(k.ref.ok()) << k.ref.status();
      const sim::Gates gates = sim::GatesFor(k.c.batch.q_dtype);
      absl::StatusOr<sim::Comparison> vs_exec = sim::CompareOutputs(
          k.o, k.lse, sim::ToDouble(k.exec->o), sim::ToDouble(k.exec->lse), gates);
      ASSERT_TRUE(vs_exec.ok());
      EXPECT_TRUE(vs_exec->passed) << "vs executor: " << vs_exec->Summary();
      absl::StatusOr<sim::Comparison> vs_ref =
          sim::CompareOutputs(k.o, k.lse, k.ref->o, k.ref->lse, gates);
      ASSERT_TRUE(vs_ref.ok());
      EXPECT_TRUE(vs_ref->passed) << "vs reference: " << vs_ref->Summary();
      absl::StatusOr<sim::Trace> want = sim::TraceOfPlan(k.plan);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(sim::FormatTrace(k.trace), sim::FormatTrace(*want));
      if (k.is_cp) {  // rows that see none of the rank's tokens: O = 0, LSE = -inf
        for (size_t row = 0; row < k.lse.size(); ++row) {
          if (k.ref->lse[row] != -std::numeric_limits<double>::infinity()) continue;
          EXPECT_EQ(k.lse[row], -std::numeric_limits<float>::infinity()) << "row " << row;
          for (int d = 0; d < kHeadDimV; ++d) {
            ASSERT_EQ(k.o[row * kHeadDimV + d], 0.0f) << "row " << row << " dim " << d;
          }
        }
      }
      std::printf(
          "  %-42s items %4d splits %3d | vs exec cos %.2e max_abs %.2e | vs ref cos "
          "%.2e lse %.2e\n",
          k.name.c_str(), k.plan.num_works(), k.plan.num_reduce_tiles(), vs_exec->cos_diff,
          vs_exec->max_abs_err, vs_ref->cos_diff, vs_ref->lse_max_abs_err);
    }
  }

  void AddCheck(std::vector<Check>* checks, sim::DecodeCase c, WorkPlan plan, std::string name) {
    Check k;
    k.c = std::move(c);
    k.plan = std::move(plan);
    k.name = std::move(name);
    checks->push_back(std::move(k));
  }

  // >= 0: the partial buffers' rows for the next launches (a planted bad partial_qo_loc
  // must not size the buffers).
  int64_t partial_rows_override_ = -1;
  int32_t path_override_ = -1;  // MlaDecodeParams::path for every launch when >= 0
  // The decode merges split tiles itself (MlaDecodeParams::merge) instead of the reduce:
  // MLAPS_MLA_MERGE=1 runs every test so.
  bool merge_ = std::getenv("MLAPS_MLA_MERGE") != nullptr;
  static constexpr int kMergeCounters = 4096;
  int32_t* merge_counters_ = nullptr;
  uint8_t* kv_ = nullptr;
  uint8_t* q_ = nullptr;
  uint16_t* o_ = nullptr;
  float* lse_ = nullptr;
  float* partial_o_ = nullptr;
  float* partial_lse_ = nullptr;
  int32_t* batch_words_ = nullptr;
  int32_t* plan_words_ = nullptr;
  MlaStatus* status_ = nullptr;
  MlaTraceEntry* trace_ = nullptr;
  int32_t* trace_counts_ = nullptr;
  unsigned long long* counts_ = nullptr;
  uint8_t* gather_ = nullptr;
  hipStream_t stream_ = nullptr;
};

// ---- Against the executor (every element) ---------------------------------------------------

struct ExecCase {
  int heads, qlen, batch, ctx, page;
  DType dtype;
  int num_cu;  // 0: 132
  bool varlen;
};

TEST_F(MlaDecodeGpu, MatchesExecutorOnSmallAndMediumBatches) {
  const ExecCase cases[] = {
      {16, 1, 4, 1024, 64, DType::kBf16, 0, false}, {16, 3, 3, 700, 1, DType::kFp8, 0, true},
      {16, 4, 2, 1500, 64, DType::kBf16, 7, false}, {16, 6, 3, 333, 16, DType::kFp8, 5, true},
      {32, 2, 3, 900, 64, DType::kFp8, 0, true},    {32, 3, 2, 600, 1, DType::kBf16, 9, false},
      {32, 4, 2, 500, 64, DType::kBf16, 0, true},   {48, 2, 2, 300, 64, DType::kBf16, 4, false},
      {64, 1, 5, 1000, 64, DType::kFp8, 0, true},   {64, 2, 2, 777, 1, DType::kBf16, 11, true},
      {64, 3, 2, 400, 64, DType::kFp8, 3, false},   {128, 1, 3, 800, 64, DType::kBf16, 0, true},
      {128, 2, 2, 600, 1, DType::kFp8, 6, true},    {128, 2, 1, 21, 64, DType::kBf16, 0, false},
      {16, 1, 1, 21, 1, DType::kFp8, 0, false},     {64, 2, 1, 5000, 64, DType::kBf16, 0, false},
  };
  std::mt19937 rng(11);
  std::vector<Check> checks;
  for (const ExecCase& e : cases) {
    Batch batch;
    if (e.varlen) {
      std::vector<int> lens(e.batch);
      std::uniform_int_distribution<int> len(e.qlen, e.ctx);
      for (int& l : lens) l = len(rng);
      batch = MakeVarlenBatch(Arch::kSm90, e.dtype, e.heads, lens, e.qlen, e.page);
    } else {
      batch = MakeUniformBatch(Arch::kSm90, e.dtype, e.heads, e.batch, e.qlen, e.ctx, e.page);
    }
    const bool fp8 = e.dtype == DType::kFp8;
    const sim::DecodeCase c = sim::MakeDecodeCase(batch, rng(), fp8 ? 0.6 : 1.0, fp8 ? 1.7 : 1.0);
    char name[128];
    std::snprintf(name, sizeof(name), "%s H%d q%d B%d ctx%d p%d cu%d%s", fp8 ? "fp8" : "bf16",
                  e.heads, e.qlen, e.batch, e.ctx, e.page, e.num_cu, e.varlen ? " varlen" : "");
    AddCheck(&checks, c, Plan(batch, e.num_cu), name);
  }
  CheckAll(checks);
}

// CP round-robin: every rank of W in {2, 3, 4}, I in {1, 16 (page 64)} runs its shard (the
// global cache viewed as sub-pages of I tokens) with fp32 final O (MlaDecodeParams::o_fp32)
// against the executor (final_o_bf16 = false) and the fp64 reference with the
// global-position hook; a short first request leaves ranks and tokens with no visible kv
// (O = 0, LSE = -inf). Then each (case, W, I)'s ranks are merged in fp32 (sim::MergeCpRanks),
// rounded to bf16 once and compared with the unsharded fp64 reference: no element may fail.
TEST_F(MlaDecodeGpu, CpRoundRobinEveryRank) {
  struct CpGpuCase {
    DType dtype;
    int heads, qlen;
    std::vector<int> kv_lens;
  };
  const CpGpuCase cases[] = {
      {DType::kBf16, 16, 2, {2, 900, 333}},  {DType::kFp8, 16, 2, {2, 700, 1200}},
      {DType::kBf16, 64, 1, {1, 1000, 257}}, {DType::kFp8, 64, 1, {1, 555, 2000}},
      {DType::kFp8, 16, 4, {4, 1500, 64}},   {DType::kBf16, 128, 2, {3, 800, 100}},
  };
  struct Group {  // one (case, W, I): its ranks are checks[first, first + world)
    sim::DecodeCase global;
    std::string name;
    size_t first = 0;
    int world = 0;
    absl::StatusOr<sim::ReferenceOutput> ref = absl::UnknownError("not run");
  };
  std::vector<Check> checks;
  std::vector<Group> groups;
  uint64_t seed = 300;
  for (const CpGpuCase& e : cases) {
    for (int world : {2, 3, 4}) {
      for (int interleave : {1, 16}) {
        const int page = interleave == 1 ? 16 : 64;
        const Batch global =
            MakeVarlenBatch(Arch::kSm90, e.dtype, e.heads, e.kv_lens, e.qlen, page);
        const bool fp8 = e.dtype == DType::kFp8;
        const sim::DecodeCase gc =
            sim::MakeDecodeCase(global, ++seed, fp8 ? 0.7 : 1.0, fp8 ? 1.3 : 1.0);
        const CpSharding s{world, interleave};
        Group group;
        group.global = gc;
        group.name = "cp " + std::string(DTypeName(e.dtype)) + " H" + std::to_string(e.heads) +
                     " q" + std::to_string(e.qlen) + " W" + std::to_string(world) + " I" +
                     std::to_string(interleave) + " merged";
        group.first = checks.size();
        group.world = world;
        groups.push_back(std::move(group));
        for (int rank = 0; rank < world; ++rank) {
          absl::StatusOr<CpShardView> view = MakeCpShardView(global, gc.kv_indices, s, rank);
          ASSERT_TRUE(view.ok()) << view.status();
          WorkPlan plan = Plan(view->batch, 0);
          ASSERT_NE(plan.variant.find("cprr"), std::string::npos) << plan.variant;
          Check k;
          k.c = testing::MakeCpRankCase(gc, *view);
          k.plan = std::move(plan);
          k.name = "cp " + std::string(DTypeName(e.dtype)) + " H" + std::to_string(e.heads) + " q" +
                   std::to_string(e.qlen) + " W" + std::to_string(world) + " I" +
                   std::to_string(interleave) + " r" + std::to_string(rank);
          k.is_cp = true;
          k.cp = testing::MakeCpRank(*view, s, rank);
          k.o_fp32 = true;
          checks.push_back(std::move(k));
        }
      }
    }
  }
  CheckAll(checks);
  if (HasFatalFailure()) return;
  std::vector<std::thread> threads;
  for (Group& g : groups) {
    threads.emplace_back(
        [&g] { (void)(g.ref = sim::ReferenceDecode(g.global.batch, g.global.Inputs())); });
  }
  for (std::thread& t : threads) t.join();
  for (const Group& g : groups) {
    SCOPED_TRACE(g.name);
    ASSERT_TRUE(g.ref.ok()) << g.ref.status();
    const int64_t rows = g.global.batch.total_q_tokens() * g.global.batch.num_heads;
    std::vector<absl::Span<const float>> os, ls;
    for (int rank = 0; rank < g.world; ++rank) {
      const Check& k = checks[g.first + rank];
      ASSERT_EQ(static_cast<int64_t>(k.o.size()), rows * kHeadDimV);
      ASSERT_EQ(static_cast<int64_t>(k.lse.size()), rows);
      os.push_back(k.o);
      ls.push_back(k.lse);
    }
    std::vector<float> merged_o(rows * kHeadDimV), merged_lse(rows);
    ASSERT_TRUE(sim::MergeCpRanks(os, ls, rows, kHeadDimV, absl::MakeSpan(merged_o),
                                  absl::MakeSpan(merged_lse))
                    .ok());
    for (float& x : merged_o) x = sim::RoundToBf16(x);  // the decode output's one rounding
    absl::StatusOr<sim::Comparison> cmp = sim::CompareOutputs(
        merged_o, merged_lse, g.ref->o, g.ref->lse, sim::GatesFor(g.global.batch.q_dtype));
    ASSERT_TRUE(cmp.ok());
    EXPECT_TRUE(cmp->passed) << "merged vs unsharded reference: " << cmp->Summary();
    EXPECT_EQ(cmp->num_failing, 0) << cmp->Summary();
    std::printf("  %-42s vs unsharded ref cos %.2e max_abs %.2e failing %lld lse %.2e\n",
                g.name.c_str(), cmp->cos_diff, cmp->max_abs_err,
                static_cast<long long>(cmp->num_failing), cmp->lse_max_abs_err);
  }
}

TEST_F(MlaDecodeGpu, SparsePerTokenTopk2048) {
  std::vector<Check> checks;
  for (int qlen : {2, 4}) {
    for (DType dtype : {DType::kBf16, DType::kFp8}) {
      // Context lengths below, at and above topk; one graph-padded request (no kv).
      absl::StatusOr<SparseLayout> layout = MakeSparseLayout(
          Arch::kSm90, dtype, qlen == 2 ? 32 : 16, {3000, 100, 2049, 5000}, qlen, 2048, 5);
      ASSERT_TRUE(layout.ok()) << layout.status();
      const bool fp8 = dtype == DType::kFp8;
      const sim::DecodeCase c =
          sim::MakeDecodeCase(layout->batch, 100 + qlen, fp8 ? 0.8 : 1.0, fp8 ? 1.2 : 1.0);
      char name[96];
      std::snprintf(name, sizeof(name), "sparse %s H%d qlen%d topk2048", fp8 ? "fp8" : "bf16",
                    layout->batch.num_heads, qlen);
      AddCheck(&checks, c, Plan(layout->batch), name);
    }
  }
  CheckAll(checks);
}

TEST_F(MlaDecodeGpu, ManySplitsAndLongItems) {
  // Few long requests on many CUs: tiles split into many pieces (the many-pieces reduce).
  std::vector<Check> checks;
  const Batch a = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 12000, 64);
  AddCheck(&checks, sim::MakeDecodeCase(a, 21), Plan(a), "bf16 H16 q1 B1 ctx12000 (many pieces)");
  // The same on one block an SM (the narrow-tile kernel), both dtypes.
  AddCheck(&checks, sim::MakeDecodeCase(a, 24), Plan(a, SmCount()),
           "bf16 H16 q1 B1 ctx12000 one block an SM (many pieces)");
  const Batch a8 = MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 3, 1, 7000, 1);
  AddCheck(&checks, sim::MakeDecodeCase(a8, 25, 0.6, 1.7), Plan(a8, SmCount()),
           "fp8 H16 q1 B3 ctx7000 page1 one block an SM");
  const Batch b = MakeUniformBatch(Arch::kSm90, DType::kFp8, 32, 2, 3, 4000, 1);
  AddCheck(&checks, sim::MakeDecodeCase(b, 22, 0.4, 2.5), Plan(b, 20),
           "fp8 H32 q3 B2 ctx4000 cu20");
  // One CU: a single item streams the whole request through the copy ring.
  const Batch d = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 2, 3000, 64);
  AddCheck(&checks, sim::MakeDecodeCase(d, 23), Plan(d, 1), "bf16 H64 q2 B1 ctx3000 cu1");
  CheckAll(checks);
}

// ---- The grid: device inputs, every element written, sampled rows vs fp64 -------------------

struct GridStats {
  int configs = 0, failures = 0;
  double worst_cos = 0, worst_abs = 0, worst_lse = 0;
};

// one_block_an_sm: planned for one block an SM (the default plan of 16-row tiles has two, the
// compact mma.sync layout; one an SM runs them on the narrow-tile sm90 kernel).
struct GridShape {
  int heads, qlen;
  bool one_block_an_sm = false;
};
constexpr GridShape kGridShapes[] = {{16, 1}, {16, 1, true}, {16, 3}, {16, 4}, {16, 6},
                                     {32, 2}, {32, 3},       {32, 4}, {64, 1}, {64, 2},
                                     {64, 3}, {128, 1},      {128, 2}};

class MlaDecodeGrid : public MlaDecodeGpu {
 protected:
  // One (dtype, page, kv lengths) group: the KV cache and page table are made once, then
  // every (nhead, qlen) runs on them.
  void RunGroup(DType dtype, int page_size, const std::vector<int>& kv_lens, uint64_t seed,
                GridStats* stats) {
    const bool fp8 = dtype == DType::kFp8;
    const double q_scale = fp8 ? 0.5 : 1.0, kv_scale = fp8 ? 2.0 : 1.0;
    const int batch_size = static_cast<int>(kv_lens.size());
    // Pages: contiguous per request in the batch, shuffled in the cache (as MakeDecodeCase).
    const Batch layout = MakeVarlenBatch(Arch::kSm90, dtype, 16, kv_lens, 1, page_size);
    const int32_t used = layout.kv_indptr.back();
    const int64_t num_pages = used + 3;
    std::vector<int32_t> perm(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) perm[i] = static_cast<int32_t>(i);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(used);
    const int elem = fp8 ? 1 : 2;
    const int64_t kv_elems = num_pages * page_size * int64_t{kHeadDimQk};
    ASSERT_LE(kv_elems * elem, kKvBytes);
    hipLaunchKernelGGL(FillNormal, dim3(4096), dim3(256), 0, stream_, kv_, kv_elems, seed, 1.0f,
                       static_cast<float>(kv_scale), fp8 ? 1 : 0);
    ASSERT_HIP_OK(hipGetLastError());
    // Sampled requests: first, last and one in between; their kv rows come back once.
    std::vector<int> sampled = {0};
    if (batch_size > 2) sampled.push_back(static_cast<int>(rng() % (batch_size - 1)) + 1);
    if (batch_size > 1) sampled.push_back(batch_size - 1);
    std::vector<std::vector<float>> kv_rows(sampled.size());
    ASSERT_HIP_OK(
        hipMemcpyAsync(batch_words_, perm.data(), perm.size() * 4, hipMemcpyHostToDevice, stream_));
    for (size_t s = 0; s < sampled.size(); ++s) {
      const int b = sampled[s];
      const int64_t len = kv_lens[b];
      hipLaunchKernelGGL(GatherRows, dim3(1024), dim3(256), 0, stream_, kv_,
                         batch_words_ + layout.kv_indptr[b], page_size, len, kHeadDimQk * elem,
                         gather_);
      ASSERT_HIP_OK(hipGetLastError());
      std::vector<uint8_t> bytes(len * kHeadDimQk * elem);
      ASSERT_HIP_OK(
          hipMemcpyAsync(bytes.data(), gather_, bytes.size(), hipMemcpyDeviceToHost, stream_));
      ASSERT_HIP_OK(hipStreamSynchronize(stream_));
      kv_rows[s].resize(len * kHeadDimQk);
      for (int64_t i = 0; i < len * kHeadDimQk; ++i)
        kv_rows[s][i] = ElemToFloat(bytes.data(), i, fp8);
    }
    for (const GridShape& shape : kGridShapes) {
      RunConfig(dtype, page_size, kv_lens, perm, num_pages, q_scale, kv_scale, shape, sampled,
                kv_rows, rng(), stats);
      if (HasFatalFailure()) return;
    }
  }

  void RunConfig(DType dtype, int page_size, const std::vector<int>& kv_lens,
                 const std::vector<int32_t>& perm, int64_t num_pages, double q_scale,
                 double kv_scale, const GridShape& shape, const std::vector<int>& sampled,
                 const std::vector<std::vector<float>>& kv_rows, uint64_t seed, GridStats* stats) {
    const bool fp8 = dtype == DType::kFp8;
    const int elem = fp8 ? 1 : 2;
    std::vector<int> lens = kv_lens;
    for (int& l : lens) l = std::max(l, shape.qlen);  // causal decode needs kv >= qlen
    const Batch batch =
        MakeVarlenBatch(Arch::kSm90, dtype, shape.heads, lens, shape.qlen, page_size);
    // The group's page table holds every page of the original lengths; raising a length to
    // qlen never adds a page (21 >= 6 >= qlen), so the tables agree.
    ASSERT_EQ(batch.kv_indptr.back(), static_cast<int32_t>(perm.size()));
    const WorkPlan plan = Plan(batch, shape.one_block_an_sm ? SmCount() : 0);
    const int64_t q_elems = batch.total_q_tokens() * shape.heads * int64_t{kHeadDimQk};
    ASSERT_LE(q_elems * elem, kQBytes);
    hipLaunchKernelGGL(FillNormal, dim3(1024), dim3(256), 0, stream_, q_, q_elems, seed, 2.0f,
                       static_cast<float>(q_scale), fp8 ? 1 : 0);
    ASSERT_HIP_OK(hipGetLastError());
    const BatchArena ba = testing::PackBatch(batch, perm);
    const PlanArena pa = testing::PackPlan(plan);
    MlaStatus status{};
    Launch(batch, plan, ba, pa, num_pages, q_scale, kv_scale, false, &status);
    char name[128];
    std::snprintf(name, sizeof(name), "%s H%d q%d B%d ctx%d page%d%s", fp8 ? "fp8" : "bf16",
                  shape.heads, shape.qlen, batch.num_requests(), kv_lens.back(), page_size,
                  shape.one_block_an_sm ? " one block an SM" : "");
    SCOPED_TRACE(name);
    EXPECT_EQ(status.code, kMlaOk) << "cu " << status.cu << " index " << status.index;
    // Every element written (no NaN poison left) and every LSE finite.
    const int64_t rows = batch.total_q_tokens() * shape.heads;
    ASSERT_HIP_OK(hipMemsetAsync(counts_, 0, 3 * sizeof(unsigned long long), stream_));
    hipLaunchKernelGGL(CountBad, dim3(1024), dim3(256), 0, stream_, o_,
                       static_cast<long long>(rows * kHeadDimV), lse_, static_cast<long long>(rows),
                       counts_);
    ASSERT_HIP_OK(hipGetLastError());
    unsigned long long bad[3];
    ASSERT_HIP_OK(hipMemcpyAsync(bad, counts_, sizeof(bad), hipMemcpyDeviceToHost, stream_));
    ASSERT_HIP_OK(hipStreamSynchronize(stream_));
    EXPECT_EQ(bad[0], 0u) << "O elements left NaN";
    EXPECT_EQ(bad[1], 0u) << "LSEs left NaN";
    EXPECT_EQ(bad[2], 0u) << "infinite LSEs";
    // Sampled rows: 4 per sampled request (token and head drawn at random; both head groups
    // of H = 128 show up across the samples).
    std::mt19937_64 rng(seed);
    struct Sample {
      int s;
      int64_t row;  // global (token, head) row
      int64_t vis;  // visible kv
      std::vector<float> q;
      std::vector<double> o;
      double lse;
    };
    std::vector<Sample> samples;
    for (size_t s = 0; s < sampled.size(); ++s) {
      const int b = sampled[s];
      for (int k = 0; k < 4; ++k) {
        Sample x;
        x.s = static_cast<int>(s);
        const int token = static_cast<int>(rng() % shape.qlen);
        const int head =
            static_cast<int>((rng() % (shape.heads / 2)) + (k % 2) * (shape.heads / 2));
        x.row = (int64_t{batch.qo_indptr[b]} + token) * shape.heads + head;
        x.vis = lens[b] - shape.qlen + token + 1;
        x.q.resize(kHeadDimQk);
        std::vector<uint8_t> bytes(kHeadDimQk * elem);
        ASSERT_HIP_OK(hipMemcpy(bytes.data(), q_ + x.row * kHeadDimQk * elem, bytes.size(),
                                hipMemcpyDeviceToHost));
        for (int d = 0; d < kHeadDimQk; ++d) x.q[d] = ElemToFloat(bytes.data(), d, fp8);
        x.o.resize(kHeadDimV);
        samples.push_back(std::move(x));
      }
    }
    const double logit_scale =
        sim::kDefaultSmScale * static_cast<float>(q_scale) * static_cast<float>(kv_scale);
    std::vector<std::thread> threads;
    for (Sample& x : samples) {
      threads.emplace_back([&x, &kv_rows, logit_scale, kv_scale] {
        ReferenceRow(x.q, kv_rows[x.s].data(), x.vis, logit_scale, kv_scale, x.o.data(), &x.lse);
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<float> got_o, got_lse;
    std::vector<double> want_o, want_lse;
    for (const Sample& x : samples) {
      std::vector<uint16_t> bits(kHeadDimV);
      float l = 0;
      ASSERT_HIP_OK(
          hipMemcpy(bits.data(), o_ + x.row * kHeadDimV, kHeadDimV * 2, hipMemcpyDeviceToHost));
      ASSERT_HIP_OK(hipMemcpy(&l, lse_ + x.row, 4, hipMemcpyDeviceToHost));
      for (uint16_t b : bits) got_o.push_back(sim::Bf16BitsToFloat(b));
      got_lse.push_back(l);
      want_o.insert(want_o.end(), x.o.begin(), x.o.end());
      want_lse.push_back(x.lse);
    }
    absl::StatusOr<sim::Comparison> cmp =
        sim::CompareOutputs(got_o, got_lse, want_o, want_lse, sim::GatesFor(dtype));
    ASSERT_TRUE(cmp.ok());
    EXPECT_TRUE(cmp->passed) << cmp->Summary();
    ++stats->configs;
    if (!cmp->passed || status.code != kMlaOk || bad[0] || bad[1] || bad[2]) ++stats->failures;
    stats->worst_cos = std::max(stats->worst_cos, cmp->cos_diff);
    stats->worst_abs = std::max(stats->worst_abs, cmp->max_abs_err);
    stats->worst_lse = std::max(stats->worst_lse, cmp->lse_max_abs_err);
  }
};

void PrintStats(const char* what, const GridStats& s) {
  std::printf(
      "%s: %d configs, %d failed; worst sampled cos_diff %.3g, max_abs_err %.3g, LSE "
      "err %.3g\n",
      what, s.configs, s.failures, s.worst_cos, s.worst_abs, s.worst_lse);
}

TEST_F(MlaDecodeGrid, UniformPage64AllShapes) {
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    GridStats stats;
    uint64_t seed = dtype == DType::kFp8 ? 1000 : 2000;
    for (int batch : {1, 32, 64, 128}) {
      for (int ctx : {21, 1024, 5000, 8192, 16384}) {
        RunGroup(dtype, 64, std::vector<int>(batch, ctx), ++seed, &stats);
        if (HasFatalFailure()) return;
      }
    }
    PrintStats(dtype == DType::kFp8 ? "grid fp8 uniform page64" : "grid bf16 uniform page64",
               stats);
  }
}

TEST_F(MlaDecodeGrid, VarlenPage1) {
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    GridStats stats;
    std::mt19937 rng(dtype == DType::kFp8 ? 31 : 32);
    for (int batch : {1, 32, 128}) {
      for (int ctx : {1024, 8192}) {
        std::vector<int> lens(batch);
        std::uniform_int_distribution<int> len(8, ctx);
        for (int& l : lens) l = len(rng);
        lens.back() = ctx;
        RunGroup(dtype, 1, lens, rng(), &stats);
        if (HasFatalFailure()) return;
      }
    }
    PrintStats(dtype == DType::kFp8 ? "grid fp8 varlen page1" : "grid bf16 varlen page1", stats);
  }
}

// ---- Status word, reduce edge cases, graph replay ------------------------------------------

TEST_F(MlaDecodeGpu, StatusWordReportsBadPlans) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {300, 90}, 2, 64);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 5);
  const WorkPlan good = Plan(batch, 4);
  struct Planted {
    void (*plant)(WorkPlan*, sim::DecodeCase*);
    int32_t code;
  };
  const Planted cases[] = {
      {[](WorkPlan* p, sim::DecodeCase*) { p->work_info[0].batch_idx = 77; }, kMlaBadBatchIdx},
      {[](WorkPlan* p, sim::DecodeCase*) { p->work_info[0].kv_end += 50; }, kMlaBadKvRange},
      {[](WorkPlan* p, sim::DecodeCase*) { p->work_info[0].partial_qo_loc = 1 << 24; },
       kMlaBadPartialLoc},
      {[](WorkPlan*, sim::DecodeCase* c) { c->kv_indices[2] = 1 << 28; }, kMlaBadPageId},
  };
  partial_rows_override_ = testing::PartialRowsFor(good);
  for (const Planted& planted : cases) {
    WorkPlan plan = good;
    sim::DecodeCase bad = c;
    planted.plant(&plan, &bad);
    std::vector<float> o, lse;
    MlaStatus status{};
    RunCase(bad, plan, &o, &lse, &status);
    EXPECT_EQ(status.code, planted.code) << "index " << status.index << " value " << status.value;
  }
}

// The f16 P V kernel widens V to f16 in registers, scaled by 2^-8: a bf16 V value the scaled
// f16 cannot hold (>= 2^24) is found through the non-finite O it makes on the GPU's tensor cores
// (P x inf, and 0 x inf = NaN in the rows that do not see it) and reported with its bits; the
// largest bf16 it holds is not, nor are values beyond the unscaled f16 (the CPU emulation checks
// their O).
TEST_F(MlaDecodeGpu, F16PvReportsAVValueBeyondTheScaledF16) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 2, 1, 300, 64);
  const WorkPlan plan = Plan(batch, 3);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 17);
  path_override_ = kMlaPathWgmmaF16Pv;
  // Request 1, token 130 (its third page), dim 300.
  const int64_t at =
      (int64_t{c.kv_indices[c.batch.kv_indptr[1] + 2]} * batch.page_size + 2) * kHeadDimQk + 300;
  std::vector<float> o, lse;
  for (const auto& [value, code] : {std::pair<float, int32_t>{16777216.0f, kMlaF16Range},
                                    {-33554432.0f, kMlaF16Range},
                                    {-16711680.0f, kMlaOk},
                                    {70144.0f, kMlaOk}}) {
    c.kv_cache[at] = value;
    MlaStatus status{};
    RunCase(c, plan, &o, &lse, &status);
    EXPECT_EQ(status.code, code) << value;
    uint32_t bits = 0;
    const float magnitude = std::fabs(value);
    std::memcpy(&bits, &magnitude, 4);
    if (code == kMlaF16Range) EXPECT_EQ(status.value, bits >> 16);
  }
  path_override_ = -1;
}

TEST_F(MlaDecodeGpu, ReduceEdgeCases) {
  // Synthetic partial rows: tile k merges pieces with the given LSEs (row 0 of each piece),
  // O_p[d] = p + d / 512. Tiles: one live piece among NaN / +inf / -inf ones, none live,
  // two live, and 10 pieces (the many-pieces path).
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> tiles = {
      {1.5f, nan, inf, -inf},
      {-inf, nan, inf},
      {0.25f, 3.0f},
      {0.1f, 0.2f, 0.3f, -1.0f, 2.0f, nan, 5.0f, -inf, 0.0f, 1.0f}};
  Batch batch =
      MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, static_cast<int>(tiles.size()), 1, 16, 16);
  const int hg = 16;
  std::vector<int32_t> reduce_indptr = {0}, final_map, partial_map;
  std::vector<float> partial_lse, partial_o;
  int32_t row = 0;
  for (size_t k = 0; k < tiles.size(); ++k) {
    final_map.push_back(static_cast<int32_t>(k));
    final_map.push_back(static_cast<int32_t>(k) + 1);
    for (size_t p = 0; p < tiles[k].size(); ++p) {
      partial_map.push_back(row++);
      for (int h = 0; h < hg; ++h) {
        partial_lse.push_back(tiles[k][p] + (std::isfinite(tiles[k][p]) ? 0.01f * h : 0.0f));
        for (int d = 0; d < kHeadDimV; ++d) {
          partial_o.push_back(static_cast<float>(p) + d / 512.0f + h);
        }
      }
    }
    reduce_indptr.push_back(static_cast<int32_t>(partial_map.size()));
  }
  std::vector<int32_t> words;
  auto append = [&words](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(words.size());
    words.insert(words.end(), v.begin(), v.end());
    return at;
  };
  const int64_t at_qo = append(batch.qo_indptr), at_ri = append(reduce_indptr),
                at_fm = append(final_map), at_pm = append(partial_map);
  ASSERT_HIP_OK(hipMemcpy(batch_words_, words.data(), words.size() * 4, hipMemcpyHostToDevice));
  ASSERT_HIP_OK(
      hipMemcpy(partial_o_, partial_o.data(), partial_o.size() * 4, hipMemcpyHostToDevice));
  ASSERT_HIP_OK(
      hipMemcpy(partial_lse_, partial_lse.data(), partial_lse.size() * 4, hipMemcpyHostToDevice));
  const int64_t rows = batch.total_q_tokens() * 16;
  ASSERT_HIP_OK(hipMemset(o_, 0xff, rows * kHeadDimV * 2));
  ASSERT_HIP_OK(hipMemset(lse_, 0xff, rows * 4));
  ASSERT_HIP_OK(hipMemset(status_, 0, sizeof(MlaStatus)));
  MlaReduceParams r;
  r.reduce_indptr = batch_words_ + at_ri;
  r.reduce_final_map = batch_words_ + at_fm;
  r.reduce_partial_map = batch_words_ + at_pm;
  r.reduce_partial_map_capacity = static_cast<int64_t>(partial_map.size());
  r.num_reduce_tiles = static_cast<int>(tiles.size());
  r.reduce_tiles_capacity = static_cast<int>(tiles.size());
  r.qo_indptr = batch_words_ + at_qo;
  r.num_requests = batch.num_requests();
  r.num_q_tokens = batch.total_q_tokens();
  r.num_heads = 16;
  r.head_fold = 1;
  r.partial_o = partial_o_;
  r.partial_lse = partial_lse_;
  r.partial_rows_capacity = row;
  r.o = o_;
  r.lse = lse_;
  r.status = status_;
  ASSERT_EQ(LaunchMlaReduce(r, nullptr), 0);
  std::vector<uint16_t> bits(rows * kHeadDimV);
  std::vector<float> lse(rows);
  MlaStatus status{};
  ASSERT_HIP_OK(hipMemcpy(bits.data(), o_, bits.size() * 2, hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipMemcpy(lse.data(), lse_, lse.size() * 4, hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipMemcpy(&status, status_, sizeof(status), hipMemcpyDeviceToHost));
  EXPECT_EQ(status.code, kMlaOk);
  // Host merge (sim/executor.h's reduce).
  std::vector<double> want_o(rows * kHeadDimV), want_lse(rows);
  int32_t first = 0;
  for (size_t k = 0; k < tiles.size(); ++k) {
    for (int h = 0; h < hg; ++h) {
      const int64_t out = static_cast<int64_t>(k) * 16 + h;
      float g = -inf;
      for (size_t p = 0; p < tiles[k].size(); ++p) {
        const float x = partial_lse[(first + p) * hg + h];
        if (std::isfinite(x)) g = std::max(g, x);
      }
      if (g == -inf) {
        want_lse[out] = kNegInfD;
        continue;
      }
      float sum = 0;
      for (size_t p = 0; p < tiles[k].size(); ++p) {
        const float x = partial_lse[(first + p) * hg + h];
        if (std::isfinite(x)) sum += std::exp(x - g);
      }
      const float lse_final = g + std::log(sum);
      want_lse[out] = lse_final;
      for (size_t p = 0; p < tiles[k].size(); ++p) {
        const float x = partial_lse[(first + p) * hg + h];
        if (!std::isfinite(x)) continue;
        const float w = std::exp(x - lse_final);
        for (int d = 0; d < kHeadDimV; ++d) {
          want_o[out * kHeadDimV + d] += w * partial_o[((first + p) * hg + h) * kHeadDimV + d];
        }
      }
    }
    first += static_cast<int32_t>(tiles[k].size());
  }
  absl::StatusOr<sim::Comparison> cmp = sim::CompareOutputs(
      testing::Bf16ToFloats(bits), lse, want_o, want_lse, sim::GatesFor(DType::kBf16));
  ASSERT_TRUE(cmp.ok());
  EXPECT_TRUE(cmp->passed) << cmp->Summary();
  for (int h = 0; h < hg; ++h) {  // tile 1 has no live piece
    EXPECT_EQ(lse[16 + h], -inf);
    EXPECT_EQ(bits[(16 + h) * kHeadDimV], 0);
  }
}

TEST_F(MlaDecodeGpu, GraphReplayGivesTheSameBits) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {900, 64, 2000}, 2, 64);
  const sim::DecodeCase c = sim::MakeDecodeCase(batch, 41, 0.7, 1.4);
  const WorkPlan plan = Plan(batch, 0);
  std::vector<float> o, lse;
  MlaStatus status{};
  RunCase(c, plan, &o, &lse, &status);
  ASSERT_EQ(status.code, kMlaOk);
  const BatchArena ba = testing::PackBatch(c.batch, c.kv_indices);
  const PlanArena pa = testing::PackPlan(plan);
  const int64_t partial_rows = testing::PartialRowsFor(plan);
  const int64_t num_pages = static_cast<int64_t>(c.kv_cache.size()) / (64 * kHeadDimQk);
  const DecodePointers d = Pointers(false);
  const MlaDecodeParams p = testing::DecodeParamsFor(batch, plan, ba, pa, num_pages, c.q_scale,
                                                     c.kv_scale, partial_rows, d);
  const MlaReduceParams r = testing::ReduceParamsFor(batch, plan, ba, pa, partial_rows, d);
  const int64_t rows = batch.total_q_tokens() * batch.num_heads;
  ASSERT_HIP_OK(hipMemset(o_, 0xff, rows * kHeadDimV * 2));
  hipGraph_t graph;
  hipGraphExec_t exec;
  ASSERT_HIP_OK(hipStreamBeginCapture(stream_, hipStreamCaptureModeGlobal));
  ASSERT_EQ(LaunchMlaDecode(p, stream_), 0);
  ASSERT_EQ(LaunchMlaReduce(r, stream_), 0);
  ASSERT_HIP_OK(hipStreamEndCapture(stream_, &graph));
  ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  for (int i = 0; i < 3; ++i) ASSERT_HIP_OK(hipGraphLaunch(exec, stream_));
  ASSERT_HIP_OK(hipStreamSynchronize(stream_));
  std::vector<uint16_t> bits(rows * kHeadDimV);
  std::vector<float> lse2(rows);
  ASSERT_HIP_OK(hipMemcpy(bits.data(), o_, bits.size() * 2, hipMemcpyDeviceToHost));
  ASSERT_HIP_OK(hipMemcpy(lse2.data(), lse_, rows * 4, hipMemcpyDeviceToHost));
  EXPECT_EQ(testing::Bf16ToFloats(bits), o);
  EXPECT_EQ(0, std::memcmp(lse2.data(), lse.data(), rows * 4));
  ASSERT_HIP_OK(hipGraphExecDestroy(exec));
  ASSERT_HIP_OK(hipGraphDestroy(graph));
}

// The decode's own merge of split tiles (MlaDecodeParams::merge) writes the bits the reduce
// kernel writes, on every kernel the launcher picks for these shapes (narrow, f16 P V, bf16 hi +
// lo, the f16 tiles on page 1), leaves every counter at 0, and replays in a graph without
// re-zeroing them.
TEST_F(MlaDecodeGpu, DecodeMergeGivesTheReduceBits) {
  struct MergeCase {
    DType dtype;
    int heads, qlen, batch, ctx, page, num_cu;
  };
  const int sms = SmCount();
  for (const MergeCase& m : std::vector<MergeCase>{{DType::kBf16, 16, 1, 1, 12000, 64, sms},
                                                   {DType::kFp8, 16, 1, 32, 1024, 64, sms},
                                                   {DType::kFp8, 64, 2, 32, 2048, 64, sms},
                                                   {DType::kBf16, 64, 2, 32, 1024, 64, sms},
                                                   {DType::kBf16, 64, 1, 4, 9000, 64, sms},
                                                   {DType::kFp8, 128, 2, 8, 3000, 64, sms},
                                                   {DType::kFp8, 32, 3, 2, 4000, 1, 20}}) {
    const Batch batch =
        MakeUniformBatch(Arch::kSm90, m.dtype, m.heads, m.batch, m.qlen, m.ctx, m.page);
    const WorkPlan plan = Plan(batch, m.num_cu);
    const std::string name = std::string(m.dtype == DType::kFp8 ? "fp8" : "bf16") + " H" +
                             std::to_string(m.heads) + " q" + std::to_string(m.qlen) + " B" +
                             std::to_string(m.batch) + " ctx" + std::to_string(m.ctx) + " page" +
                             std::to_string(m.page);
    SCOPED_TRACE(name);
    ASSERT_GT(plan.num_reduce_tiles(), 0);
    const sim::DecodeCase c = sim::MakeDecodeCase(batch, 61, 0.7, 1.3);
    std::vector<float> want_o, want_lse, o, lse;
    MlaStatus status{};
    merge_ = false;
    RunCase(c, plan, &want_o, &want_lse, &status);
    ASSERT_EQ(status.code, kMlaOk);
    merge_ = true;
    RunCase(c, plan, &o, &lse, &status);
    ASSERT_EQ(status.code, kMlaOk);
    EXPECT_EQ(0, std::memcmp(o.data(), want_o.data(), o.size() * 4)) << "O";
    EXPECT_EQ(0, std::memcmp(lse.data(), want_lse.data(), lse.size() * 4)) << "LSE";
    // Three replays of a graph of the decode alone, outputs poisoned first.
    const BatchArena ba = testing::PackBatch(c.batch, c.kv_indices);
    const PlanArena pa = testing::PackPlan(plan);
    const int64_t num_pages =
        static_cast<int64_t>(c.kv_cache.size()) / (int64_t{m.page} * kHeadDimQk);
    const MlaDecodeParams p =
        testing::DecodeParamsFor(batch, plan, ba, pa, num_pages, c.q_scale, c.kv_scale,
                                 testing::PartialRowsFor(plan), Pointers(false));
    const int64_t rows = batch.total_q_tokens() * batch.num_heads;
    ASSERT_HIP_OK(hipMemset(o_, 0xff, rows * kHeadDimV * 2));
    ASSERT_HIP_OK(hipMemset(lse_, 0xff, rows * 4));
    hipGraph_t graph;
    hipGraphExec_t exec;
    ASSERT_HIP_OK(hipStreamBeginCapture(stream_, hipStreamCaptureModeGlobal));
    ASSERT_EQ(LaunchMlaDecode(p, stream_), 0);
    ASSERT_HIP_OK(hipStreamEndCapture(stream_, &graph));
    ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
    for (int i = 0; i < 3; ++i) ASSERT_HIP_OK(hipGraphLaunch(exec, stream_));
    ASSERT_HIP_OK(hipStreamSynchronize(stream_));
    std::vector<uint16_t> bits(rows * kHeadDimV);
    std::vector<float> lse2(rows);
    ASSERT_HIP_OK(hipMemcpy(bits.data(), o_, bits.size() * 2, hipMemcpyDeviceToHost));
    ASSERT_HIP_OK(hipMemcpy(lse2.data(), lse_, rows * 4, hipMemcpyDeviceToHost));
    EXPECT_EQ(testing::Bf16ToFloats(bits), want_o) << "graph replay O";
    EXPECT_EQ(0, std::memcmp(lse2.data(), want_lse.data(), rows * 4)) << "graph replay LSE";
    ExpectMergeCountersZero(plan);
    ASSERT_HIP_OK(hipGraphExecDestroy(exec));
    ASSERT_HIP_OK(hipGraphDestroy(graph));
    std::printf("  %-40s items %4d split tiles %3d kernel %s: merged in the decode, same bits\n",
                name.c_str(), plan.num_works(), plan.num_reduce_tiles(), MlaDecodeKernelName(p));
  }
}

TEST(MlaDecodeApi, RefusesBadParams) {
  MlaDecodeParams p;
  EXPECT_NE(MlaDecodeParamsError(p), nullptr);
  EXPECT_EQ(LaunchMlaDecode(p, nullptr), static_cast<int>(hipErrorInvalidValue));
  // CP round-robin fields (checked only, never launched).
  alignas(16) static int32_t words[64] = {};
  MlaDecodeParams v;
  v.q = v.kv_cache = words;
  v.kv_indices = v.qo_indptr = v.kv_indptr = v.kv_last_page_lens = words;
  v.work_indptr = v.work_info = words;
  v.o = reinterpret_cast<uint16_t*>(words);
  v.lse = reinterpret_cast<float*>(words);
  v.status = reinterpret_cast<MlaStatus*>(words);
  v.num_requests = 1;
  v.num_cu = 1;
  ASSERT_EQ(MlaDecodeParamsError(v), nullptr) << MlaDecodeParamsError(v);
  // cu_lanes (the blocks' placement of a plan's kv lanes) must divide num_cu: otherwise some
  // plan CU would run twice and another never.
  const std::tuple<int, int, bool> lanes_cases[] = {{4, 2, true},  {4, 4, true},  {132, 2, true},
                                                    {4, 3, false}, {4, 0, false}, {4, 8, false}};
  for (auto [cus, lanes, ok] : lanes_cases) {
    MlaDecodeParams l = v;
    l.num_cu = cus;
    l.cu_lanes = lanes;
    EXPECT_EQ(MlaDecodeParamsError(l) == nullptr, ok) << cus << " CUs, " << lanes << " lanes";
  }
  v.mask = kMlaMaskCpRoundRobin;
  EXPECT_NE(MlaDecodeParamsError(v), nullptr);  // no cp_global_kv_len
  v.cp_global_kv_len = words;
  v.cp_world_size = 3;
  v.cp_interleave = 16;
  v.cp_rank = 2;
  EXPECT_EQ(MlaDecodeParamsError(v), nullptr) << MlaDecodeParamsError(v);
  const std::tuple<int, int, int> bad_cp[] = {
      {0, 1, 0}, {3, 3, 0}, {3, 0, 0}, {3, 16, 3}, {3, 16, -1}};
  for (auto [w, i, r] : bad_cp) {
    MlaDecodeParams bad = v;
    bad.cp_world_size = w;
    bad.cp_interleave = i;
    bad.cp_rank = r;
    EXPECT_NE(MlaDecodeParamsError(bad), nullptr) << w << " " << i << " " << r;
  }
  // Final O: exactly one of o (bf16) and o_fp32, 16-byte aligned.
  MlaDecodeParams both = v;
  both.o_fp32 = reinterpret_cast<float*>(words);
  EXPECT_NE(MlaDecodeParamsError(both), nullptr);
  MlaDecodeParams neither = v;
  neither.o = nullptr;
  EXPECT_NE(MlaDecodeParamsError(neither), nullptr);
  MlaDecodeParams fp32 = neither;
  fp32.o_fp32 = reinterpret_cast<float*>(words);
  EXPECT_EQ(MlaDecodeParamsError(fp32), nullptr) << MlaDecodeParamsError(fp32);
  fp32.o_fp32 = reinterpret_cast<float*>(words + 1);
  EXPECT_NE(MlaDecodeParamsError(fp32), nullptr);
  // Which kernel runs (MlaDecodeKernelName): H = 16 at qlen 1 (16-row tiles) on the compact
  // mma.sync layout when the grid exceeds the SMs, else on the narrow-tile kernel; 64-row tiles
  // on the dtype's 64-row wgmma kernel (fp8, any page size: the f16 P V kernel; bf16: the f16 P V
  // kernel on pages of >= 64 tokens with >= 4096 tokens a request, else hi + lo; the f16-tile
  // one when asked for); the narrow path refuses tiles of more than 16 rows.
  const int sms = SmCount();
  for (MlaDType dtype : {kMlaBf16, kMlaFp8E4m3fn}) {
    MlaDecodeParams k = v;
    k.mask = kMlaMaskCausal;
    k.dtype = dtype;
    k.num_cu = sms;
    EXPECT_STREQ(MlaDecodeKernelName(k), "narrow");
    k.num_cu = 2 * sms;
    EXPECT_STREQ(MlaDecodeKernelName(k), "mma");
    k.path = kMlaPathWgmmaNarrow;
    EXPECT_STREQ(MlaDecodeKernelName(k), "narrow");
    k.num_cu = sms;
    k.path = kMlaPathAuto;
    k.tokens_per_tile = 4;  // 64 rows: fp8 on the f16 P V kernel, TMA or gathered blocks
    for (int page : {64, 16, 1}) {
      k.page_size = page;
      EXPECT_STREQ(MlaDecodeKernelName(k), dtype == kMlaBf16 ? "bf16" : "f16pv") << page;
    }
    // bf16 long requests on whole-page blocks: 2 requests of 64 pages of 64 tokens (4096 each)
    // on f16 P V, one page less on hi + lo, and never at pages of 16 tokens.
    k.num_requests = 2;
    k.page_size = 64;
    k.num_kv_indices = 2 * 64;
    EXPECT_STREQ(MlaDecodeKernelName(k), "f16pv");
    k.num_kv_indices = 2 * 64 - 1;
    EXPECT_STREQ(MlaDecodeKernelName(k), dtype == kMlaBf16 ? "bf16" : "f16pv");
    k.page_size = 16;
    k.num_kv_indices = 2 * 64 * 4;
    EXPECT_STREQ(MlaDecodeKernelName(k), dtype == kMlaBf16 ? "bf16" : "f16pv");
    k.num_requests = 1;
    k.num_kv_indices = 0;
    k.path = kMlaPathWgmmaF16;
    EXPECT_STREQ(MlaDecodeKernelName(k), "f16");
    k.page_size = 16;
    k.path = kMlaPathWgmmaF16Pv;  // any tile of up to 64 rows, when asked for
    EXPECT_STREQ(MlaDecodeKernelName(k), "f16pv");
    EXPECT_EQ(MlaDecodeParamsError(k), nullptr) << MlaDecodeParamsError(k);
    k.block_threads = 512;
    EXPECT_NE(MlaDecodeParamsError(k), nullptr);
    k.block_threads = 0;
    k.path = kMlaPathWgmmaNarrow;
    EXPECT_NE(MlaDecodeParamsError(k), nullptr);
  }
  MlaReduceParams r;
  EXPECT_NE(MlaReduceParamsError(r), nullptr);
  EXPECT_EQ(LaunchMlaReduce(r, nullptr), static_cast<int>(hipErrorInvalidValue));
  MlaReduceParams rv;
  rv.reduce_indptr = rv.reduce_final_map = rv.reduce_partial_map = rv.qo_indptr = words;
  rv.partial_o = rv.partial_lse = rv.lse = reinterpret_cast<float*>(words);
  rv.status = reinterpret_cast<MlaStatus*>(words);
  rv.num_requests = 1;
  EXPECT_NE(MlaReduceParamsError(rv), nullptr);  // neither o nor o_fp32
  rv.o_fp32 = reinterpret_cast<float*>(words);
  EXPECT_EQ(MlaReduceParamsError(rv), nullptr) << MlaReduceParamsError(rv);
  rv.o = reinterpret_cast<uint16_t*>(words);
  EXPECT_NE(MlaReduceParamsError(rv), nullptr);  // both
}

}  // namespace
}  // namespace mlaps
