// What the MLA decode benchmark and the cost-model calibration share: device buffers sized
// for the largest benchmark shape, random bf16 / fp8 contents, a (batch, plan, page table)
// staged into decode + reduce params, and graph-replay timing. Host + device code (HIP);
// include from one .hip translation unit per binary.
#ifndef MLAPS_KERNELS_MLA_DECODE_BENCH_HARNESS_H_
#define MLAPS_KERNELS_MLA_DECODE_BENCH_HARNESS_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_staging.h"
#include "kernels/platform/hip_check.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/registry.h"
#include "metadata/work_plan.h"

namespace mlaps::bench {

// bf16 pairs in [-2, 2) or e4m3fn bytes of magnitude <= 1.75 (exponent field <= 7): random
// finite values, never zeros (zeros can run faster than real data).
__global__ void FillBytes(uint32_t* dst, long long words, unsigned seed, int fp8) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    if (fp8) {
      dst[i] = x & 0xbfbfbfbfu;
    } else {
      const unsigned lo = 0x3f80u | (x & 0x807fu), hi = 0x3f80u | ((x >> 16) & 0x807fu);
      dst[i] = lo | (hi << 16);
    }
  }
}

// Median time (ms) of `replays` replays of a graph of `launches` back-to-back enqueues, each
// replay timed alone by events (the first replay, untimed, warms up); with `flush`, its
// `flush_bytes` are overwritten before each timed replay (outside the events).
template <typename F>
float MedianReplayMs(hipStream_t stream, F enqueue, int launches, int replays, void* flush,
                     size_t flush_bytes) {
  hipGraph_t graph;
  hipGraphExec_t exec;
  MLAPS_CHECK_HIP(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
  for (int i = 0; i < launches; ++i) enqueue();
  MLAPS_CHECK_HIP(hipStreamEndCapture(stream, &graph));
  MLAPS_CHECK_HIP(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  MLAPS_CHECK_HIP(hipGraphLaunch(exec, stream));
  hipEvent_t a, b;
  MLAPS_CHECK_HIP(hipEventCreate(&a));
  MLAPS_CHECK_HIP(hipEventCreate(&b));
  std::vector<float> ms(replays);
  for (int i = 0; i < replays; ++i) {
    if (flush != nullptr) MLAPS_CHECK_HIP(hipMemsetAsync(flush, i & 0xff, flush_bytes, stream));
    MLAPS_CHECK_HIP(hipEventRecord(a, stream));
    MLAPS_CHECK_HIP(hipGraphLaunch(exec, stream));
    MLAPS_CHECK_HIP(hipEventRecord(b, stream));
    MLAPS_CHECK_HIP(hipEventSynchronize(b));
    MLAPS_CHECK_HIP(hipEventElapsedTime(&ms[i], a, b));
  }
  MLAPS_CHECK_HIP(hipEventDestroy(a));
  MLAPS_CHECK_HIP(hipEventDestroy(b));
  MLAPS_CHECK_HIP(hipGraphExecDestroy(exec));
  MLAPS_CHECK_HIP(hipGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[replays / 2];
}

// Median time (ms) of one of `launches` back-to-back enqueues, from `replays` replays of a
// graph that holds them (for data far larger than the L2).
template <typename F>
float TimeGraph(hipStream_t stream, F enqueue, int launches = 10, int replays = 7) {
  return MedianReplayMs(stream, enqueue, launches, replays, nullptr, 0) / launches;
}

// The peer's timing method (FlashMLA under triton's do_bench, .peers_flashmla): a graph of
// one enqueue, each replay timed alone after `flush` is overwritten, so that no replay finds
// the previous one's data in the L2 (a b = 32 ctx 1024 kv cache, 19-38 MB, fits the H200's
// 60 MB L2). Median in ms, the graph launch included as in the peer's numbers.
template <typename F>
float TimeGraphColdL2(hipStream_t stream, F enqueue, void* flush, size_t flush_bytes,
                      int replays = 15) {
  return MedianReplayMs(stream, enqueue, 1, replays, flush, flush_bytes);
}

// Device buffers for up to `max_kv_tokens` cached tokens (bf16 bytes, any page size) and
// `max_rows` q rows (tokens x heads).
struct DecodeBuffers {
  int64_t max_kv_tokens = 0, max_rows = 0;
  int64_t partial_bytes = int64_t{512} << 20, words = int64_t{4} << 20;
  uint8_t* kv = nullptr;
  uint8_t* q = nullptr;
  uint16_t* o = nullptr;
  float *lse = nullptr, *partial_o = nullptr, *partial_lse = nullptr;
  int32_t *batch_words = nullptr, *plan_words = nullptr;
  MlaStatus* status = nullptr;
  // MlaSplitMerge counters for StagedCase::merged (zeroed once; every launch leaves them 0).
  static constexpr int kMergeCounters = 4096;
  int32_t* merge_counters = nullptr;
  // Overwritten before each timed replay (TimeGraphColdL2): 256 MB, 4x the H200's L2 (the
  // peer's flush).
  size_t l2_flush_bytes = size_t{256} << 20;
  void* l2_flush = nullptr;
};

inline DecodeBuffers AllocateDecodeBuffers(int64_t max_kv_tokens, int64_t max_rows) {
  DecodeBuffers d;
  d.max_kv_tokens = max_kv_tokens;
  d.max_rows = max_rows;
  MLAPS_CHECK_HIP(hipMalloc(&d.kv, max_kv_tokens * 576 * 2));
  MLAPS_CHECK_HIP(hipMalloc(&d.q, max_rows * 576 * 2));
  MLAPS_CHECK_HIP(hipMalloc(&d.o, max_rows * 512 * 2));
  MLAPS_CHECK_HIP(hipMalloc(&d.lse, max_rows * 4));
  MLAPS_CHECK_HIP(hipMalloc(&d.partial_o, d.partial_bytes));
  MLAPS_CHECK_HIP(hipMalloc(&d.partial_lse, d.partial_bytes / 128));
  MLAPS_CHECK_HIP(hipMalloc(&d.batch_words, d.words * 4));
  MLAPS_CHECK_HIP(hipMalloc(&d.plan_words, d.words * 4));
  MLAPS_CHECK_HIP(hipMalloc(&d.status, sizeof(MlaStatus)));
  MLAPS_CHECK_HIP(hipMemset(d.status, 0, sizeof(MlaStatus)));
  MLAPS_CHECK_HIP(hipMalloc(&d.merge_counters, DecodeBuffers::kMergeCounters * 4));
  MLAPS_CHECK_HIP(hipMemset(d.merge_counters, 0, DecodeBuffers::kMergeCounters * 4));
  MLAPS_CHECK_HIP(hipMalloc(&d.l2_flush, d.l2_flush_bytes));
  return d;
}

// Random contents for every kv and q element (of `fp8` ? 1 : 2 bytes).
inline void FillDecodeBuffers(const DecodeBuffers& d, bool fp8, hipStream_t stream) {
  const int elem = fp8 ? 1 : 2;
  hipLaunchKernelGGL(FillBytes, dim3(4096), dim3(256), 0, stream, reinterpret_cast<uint32_t*>(d.kv),
                     static_cast<long long>(d.max_kv_tokens * 576 * elem / 4), 17u, fp8 ? 1 : 0);
  hipLaunchKernelGGL(FillBytes, dim3(1024), dim3(256), 0, stream, reinterpret_cast<uint32_t*>(d.q),
                     static_cast<long long>(d.max_rows * 576 * elem / 4), 29u, fp8 ? 1 : 0);
  MLAPS_CHECK_HIP(hipGetLastError());
}

struct StagedCase {
  MlaDecodeParams decode;
  MlaReduceParams reduce;
  MlaDecodeParams merged;  // decode merging the split tiles itself (MlaSplitMerge): no reduce
};

// Uploads the batch's index arrays, `pages` (its page table; sparse batches: the gathered
// slots, page size 1) and the plan into `d`'s word buffers and fills the decode and reduce
// params (bench scales: fp8 q 0.5, kv 0.25). Returns false, with a message on stderr, when
// `d` is too small for the case.
inline bool StageCase(const Batch& batch, const WorkPlan& plan, const std::vector<int32_t>& pages,
                      const DecodeBuffers& d, StagedCase* out) {
  const bool fp8 = batch.kv_dtype == DType::kFp8;
  const staging::BatchArena ba = staging::PackBatch(batch, pages);
  const staging::PlanArena pa = staging::PackPlan(plan);
  const int64_t partial_rows = staging::PartialRowsFor(plan);
  const int hg = batch.num_heads / plan.head_fold;
  const int64_t rows = int64_t{batch.total_q_tokens()} * batch.num_heads;
  const int64_t num_pages = d.max_kv_tokens / batch.page_size;  // pages the cache holds
  bool pages_ok = true;
  for (int32_t page : pages) pages_ok = pages_ok && page >= 0 && page < num_pages;
  if (static_cast<int64_t>(ba.words.size()) > d.words ||
      static_cast<int64_t>(pa.words.size()) > d.words ||
      partial_rows * hg * 512 * 4 > d.partial_bytes || rows > d.max_rows || !pages_ok ||
      plan.num_reduce_tiles() > DecodeBuffers::kMergeCounters) {
    std::fprintf(stderr, "StageCase: the buffers are too small for this case\n");
    return false;
  }
  MLAPS_CHECK_HIP(
      hipMemcpy(d.batch_words, ba.words.data(), ba.words.size() * 4, hipMemcpyHostToDevice));
  MLAPS_CHECK_HIP(
      hipMemcpy(d.plan_words, pa.words.data(), pa.words.size() * 4, hipMemcpyHostToDevice));
  staging::DecodePointers ptrs;
  ptrs.q = d.q;
  ptrs.kv = d.kv;
  ptrs.batch = d.batch_words;
  ptrs.plan = d.plan_words;
  ptrs.o = d.o;
  ptrs.lse = d.lse;
  ptrs.partial_o = d.partial_o;
  ptrs.partial_lse = d.partial_lse;
  ptrs.status = d.status;
  out->decode = staging::DecodeParamsFor(batch, plan, ba, pa, num_pages, fp8 ? 0.5 : 1.0,
                                         fp8 ? 0.25 : 1.0, partial_rows, ptrs);
  out->reduce = staging::ReduceParamsFor(batch, plan, ba, pa, partial_rows, ptrs);
  ptrs.merge_counters = d.merge_counters;
  out->merged = staging::DecodeParamsFor(batch, plan, ba, pa, num_pages, fp8 ? 0.5 : 1.0,
                                         fp8 ? 0.25 : 1.0, partial_rows, ptrs);
  return true;
}

// Launches decode (+ reduce when the plan split tiles) once and checks the status word;
// false, with the reason on stderr, when a launch is refused or the kernel reports an error.
inline bool RunChecked(const StagedCase& c, hipStream_t stream) {
  if (LaunchMlaDecode(c.decode, stream) != 0 ||
      (c.reduce.num_reduce_tiles > 0 && LaunchMlaReduce(c.reduce, stream) != 0)) {
    const char* de = MlaDecodeParamsError(c.decode);
    const char* re = MlaReduceParamsError(c.reduce);
    std::fprintf(stderr, "launch refused: %s / %s\n", de ? de : "-", re ? re : "-");
    return false;
  }
  MLAPS_CHECK_HIP(hipStreamSynchronize(stream));
  MlaStatus st;
  MLAPS_CHECK_HIP(hipMemcpy(&st, c.decode.status, sizeof(st), hipMemcpyDeviceToHost));
  if (st.code != kMlaOk) {
    std::fprintf(stderr, "kernel status %d (cu %d index %d value %lld)\n", st.code, st.cu, st.index,
                 static_cast<long long>(st.value));
    return false;
  }
  return true;
}

// The plan for this device: the planner's default grid (the variant's blocks_per_cu per CU,
// from the registry) with the device's SM count in place of the arch default.
inline absl::StatusOr<WorkPlan> PlanForDevice(const Batch& batch, PlanOptions options, int sms) {
  absl::StatusOr<ResolvedVariant> variant = ResolveVariant(VariantQueryOf(batch, options.lse));
  if (!variant.ok()) return variant.status();
  options.num_cu = sms * variant->blocks_per_cu;
  return PlanDecode(batch, options);
}

// A shuffled page table for `batch` over its first kv_indptr.back() pages.
template <typename Rng>
std::vector<int32_t> ShuffledPages(const Batch& batch, Rng& rng) {
  std::vector<int32_t> pages(batch.kv_indptr.back());
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(i);
  std::shuffle(pages.begin(), pages.end(), rng);
  return pages;
}

}  // namespace mlaps::bench

#endif  // MLAPS_KERNELS_MLA_DECODE_BENCH_HARNESS_H_
