// MLA decode + reduce on the benchmark shapes: per shape, microseconds of the decode, the
// reduce and both, with TB/s and TFLOP/s by DESIGN.md's formulas
//   flops = qlen * sum_kv * H * (576 + 512) * 2,   bytes = kv bytes + q bytes + o bytes
// (kv counted once, although H = 128 runs as 2 head groups that each read it).
// Timing: CUDA/HIP events around replays of a graph of kLaunches launches (median of
// kReplays replays). Each launch streams the whole KV cache (0.6 - 1.2 GB, 10 - 20x the
// 60 MB L2), so the L2 cannot serve repeats; Q and the plan may stay in L2.
//
//   tools/gpu_bundle.sh --only mla_decode && gpu_bundle/run.sh --bench --filter mla_decode
//
// Prints a device-to-device copy bandwidth first (the memory roof measured on this card),
// then the table last.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/mla_decode.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"

namespace mlaps {
namespace {

#define CHECK_HIP(expr)                                                                         \
  do {                                                                                          \
    hipError_t e_ = (expr);                                                                     \
    if (e_ != hipSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, hipGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

constexpr int kLaunches = 10;
constexpr int kReplays = 7;

__global__ void FillBytes(uint32_t* dst, long long words, unsigned seed, int fp8) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    // bf16 pairs in [-2, 2) or e4m3fn bytes of magnitude <= 1.75 (exponent field <= 7):
    // random finite values, never zeros (zeros can run faster than real data).
    if (fp8) {
      dst[i] = x & 0xbfbfbfbfu;
    } else {
      const unsigned lo = 0x3f80u | (x & 0x807fu), hi = 0x3f80u | ((x >> 16) & 0x807fu);
      dst[i] = lo | (hi << 16);
    }
  }
}

// Reads `words` uint4 words (grid-stride), so the compiler cannot drop the loads: the read
// bandwidth roof that decode (read-dominated) is bounded by.
__global__ void ReadAll(const uint4* src, long long words, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Median time of one launch (ms) of what `enqueue` puts on the stream, from graph replays.
template <typename F>
float TimeGraph(hipStream_t stream, F enqueue) {
  hipGraph_t graph;
  hipGraphExec_t exec;
  CHECK_HIP(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunches; ++i) enqueue();
  CHECK_HIP(hipStreamEndCapture(stream, &graph));
  CHECK_HIP(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  CHECK_HIP(hipGraphLaunch(exec, stream));  // warm-up
  hipEvent_t a, b;
  CHECK_HIP(hipEventCreate(&a));
  CHECK_HIP(hipEventCreate(&b));
  std::vector<float> ms(kReplays);
  for (float& t : ms) {
    CHECK_HIP(hipEventRecord(a, stream));
    CHECK_HIP(hipGraphLaunch(exec, stream));
    CHECK_HIP(hipEventRecord(b, stream));
    CHECK_HIP(hipEventSynchronize(b));
    CHECK_HIP(hipEventElapsedTime(&t, a, b));
  }
  CHECK_HIP(hipEventDestroy(a));
  CHECK_HIP(hipEventDestroy(b));
  CHECK_HIP(hipGraphExecDestroy(exec));
  CHECK_HIP(hipGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[kReplays / 2] / kLaunches;
}

struct Row {
  std::string dtype;
  int batch, ctx, heads, qlen, items, splits;
  float decode_us, reduce_us, total_us;
  double tbps, tflops;
};

// Optional: --only DTYPE,H,QLEN,BATCH,CTX runs one shape; --once launches it once, untimed
// (for a profiler: ncu -k regex:MlaDecodeKernel -c 1 ... --only bf16,16,1,128,8192 --once).
struct Filter {
  bool any = true;
  std::string dtype;
  int heads = 0, qlen = 0, batch = 0, ctx = 0;
  bool once = false;
};

int Main(const Filter& filter) {
  hipDeviceProp_t prop;
  CHECK_HIP(hipGetDeviceProperties(&prop, 0));
  const int num_cu = prop.multiProcessorCount;
  hipStream_t stream;
  CHECK_HIP(hipStreamCreate(&stream));

  // The memory roof: a 1 GiB device-to-device copy (bytes read + written).
  {
    const size_t n = size_t{1} << 30;
    void *src, *dst;
    CHECK_HIP(hipMalloc(&src, n));
    CHECK_HIP(hipMalloc(&dst, n));
    CHECK_HIP(hipMemsetAsync(src, 1, n, stream));
    const float ms = TimeGraph(
        stream, [&] { CHECK_HIP(hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, stream)); });
    unsigned* sink = reinterpret_cast<unsigned*>(dst);
    const float read_ms = TimeGraph(stream, [&] {
      hipLaunchKernelGGL(ReadAll, dim3(num_cu * 8), dim3(512), 0, stream,
                         static_cast<const uint4*>(src), static_cast<long long>(n / 16), sink);
    });
    std::printf(
        "device %s, %d SMs: D2D copy of 1 GiB: %.1f us, %.2f TB/s (read + write); "
        "read-only kernel over 1 GiB: %.1f us, %.2f TB/s\n",
        prop.name, num_cu, ms * 1e3, 2.0 * n / (ms * 1e-3) / 1e12, read_ms * 1e3,
        n / (read_ms * 1e-3) / 1e12);
    CHECK_HIP(hipFree(src));
    CHECK_HIP(hipFree(dst));
  }

  // Buffers for the largest shape: 1M kv tokens (both shapes), Q / O of H=128 x qlen 2.
  const int64_t max_tokens = int64_t{128} * 8192, page = 64;
  const int64_t max_pages = max_tokens / page;
  const int64_t max_rows = int64_t{128} * 4 * 128;  // q tokens x heads
  uint8_t* kv;
  uint8_t* q;
  uint16_t* o;
  float *lse, *partial_o, *partial_lse;
  int32_t *batch_words, *plan_words;
  MlaStatus* status;
  CHECK_HIP(hipMalloc(&kv, max_tokens * 576 * 2));
  CHECK_HIP(hipMalloc(&q, max_rows * 576 * 2));
  CHECK_HIP(hipMalloc(&o, max_rows * 512 * 2));
  CHECK_HIP(hipMalloc(&lse, max_rows * 4));
  const int64_t partial_bytes = int64_t{512} << 20;
  CHECK_HIP(hipMalloc(&partial_o, partial_bytes));
  CHECK_HIP(hipMalloc(&partial_lse, partial_bytes / 128));
  CHECK_HIP(hipMalloc(&batch_words, int64_t{4} << 20));
  CHECK_HIP(hipMalloc(&plan_words, int64_t{4} << 20));
  CHECK_HIP(hipMalloc(&status, sizeof(MlaStatus)));
  CHECK_HIP(hipMemset(status, 0, sizeof(MlaStatus)));

  std::vector<Row> rows;
  struct Shape {
    int heads, qlen;
  };
  const Shape shapes[] = {{16, 1}, {16, 4}, {64, 2}, {128, 1}, {128, 2}};
  const std::pair<int, int> sizes[] = {{128, 8192}, {64, 16384}};
  std::mt19937 rng(5);
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    const bool fp8 = dtype == DType::kFp8;
    if (!filter.any && filter.dtype != (fp8 ? "fp8" : "bf16")) continue;
    const int elem = fp8 ? 1 : 2;
    hipLaunchKernelGGL(FillBytes, dim3(4096), dim3(256), 0, stream, reinterpret_cast<uint32_t*>(kv),
                       static_cast<long long>(max_tokens * 576 * elem / 4), 17u, fp8 ? 1 : 0);
    hipLaunchKernelGGL(FillBytes, dim3(1024), dim3(256), 0, stream, reinterpret_cast<uint32_t*>(q),
                       static_cast<long long>(max_rows * 576 * elem / 4), 29u, fp8 ? 1 : 0);
    CHECK_HIP(hipGetLastError());
    for (const auto& [batch_size, ctx] : sizes) {
      for (const Shape& s : shapes) {
        if (!filter.any && (filter.heads != s.heads || filter.qlen != s.qlen ||
                            filter.batch != batch_size || filter.ctx != ctx)) {
          continue;
        }
        const Batch batch =
            MakeUniformBatch(Arch::kSm90, dtype, s.heads, batch_size, s.qlen, ctx, page);
        PlanOptions options;
        options.num_cu = num_cu;
        absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
        if (!plan.ok()) {
          std::fprintf(stderr, "plan: %s\n", std::string(plan.status().message()).c_str());
          return 1;
        }
        // Pages scattered over the cache (a shuffled page table).
        std::vector<int32_t> pages(batch.kv_indptr.back());
        for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(i);
        std::shuffle(pages.begin(), pages.end(), rng);
        std::vector<int32_t> bw;
        auto append = [](std::vector<int32_t>& w, const int32_t* d, size_t n) {
          const int64_t at = static_cast<int64_t>(w.size());
          w.insert(w.end(), d, d + n);
          while (w.size() % 4) w.push_back(0);
          return at;
        };
        const int64_t at_qo = append(bw, batch.qo_indptr.data(), batch.qo_indptr.size());
        const int64_t at_kv = append(bw, batch.kv_indptr.data(), batch.kv_indptr.size());
        const int64_t at_last =
            append(bw, batch.kv_last_page_lens.data(), batch.kv_last_page_lens.size());
        const int64_t at_idx = append(bw, pages.data(), pages.size());
        std::vector<int32_t> pw;
        const int64_t at_wi = append(pw, plan->work_indptr.data(), plan->work_indptr.size());
        const int64_t at_info = append(pw, reinterpret_cast<const int32_t*>(plan->work_info.data()),
                                       8 * plan->work_info.size());
        const int32_t zero = 0;
        const int64_t at_ri = plan->reduce_indptr.empty() ? append(pw, &zero, 1)
                                                          : append(pw, plan->reduce_indptr.data(),
                                                                   plan->reduce_indptr.size());
        const int64_t at_fm =
            append(pw, plan->reduce_final_map.data(), plan->reduce_final_map.size());
        const int64_t at_pm =
            append(pw, plan->reduce_partial_map.data(), plan->reduce_partial_map.size());
        CHECK_HIP(hipMemcpy(batch_words, bw.data(), bw.size() * 4, hipMemcpyHostToDevice));
        CHECK_HIP(hipMemcpy(plan_words, pw.data(), pw.size() * 4, hipMemcpyHostToDevice));
        int64_t partial_rows = std::max<int64_t>(1, plan->num_partial_rows);
        for (const WorkInfo& w : plan->work_info) {
          if (w.partial_qo_loc >= 0) {
            partial_rows =
                std::max<int64_t>(partial_rows, w.partial_qo_loc + w.qo_end - w.qo_start);
          }
        }
        const int hg = s.heads / plan->head_fold;
        if (partial_rows * hg * 512 * 4 > partial_bytes) {
          std::fprintf(stderr, "partial buffers too small\n");
          return 1;
        }
        MlaDecodeParams p;
        p.q = q;
        p.kv_cache = kv;
        p.kv_indices = batch_words + at_idx;
        p.qo_indptr = batch_words + at_qo;
        p.kv_indptr = batch_words + at_kv;
        p.kv_last_page_lens = batch_words + at_last;
        p.num_requests = batch.num_requests();
        p.num_q_tokens = batch.total_q_tokens();
        p.num_pages = max_pages;
        p.num_kv_indices = static_cast<int64_t>(pages.size());
        p.num_heads = s.heads;
        p.page_size = static_cast<int>(page);
        p.dtype = fp8 ? kMlaFp8E4m3fn : kMlaBf16;
        p.q_scale = fp8 ? 0.5f : 1.0f;
        p.kv_scale = fp8 ? 0.25f : 1.0f;
        p.work_indptr = plan_words + at_wi;
        p.work_info = plan_words + at_info;
        p.work_info_capacity = plan->num_works();
        p.num_cu = plan->num_cu;
        p.head_fold = plan->head_fold;
        p.tokens_per_tile = plan->tokens_per_tile;
        p.rows_per_tile = plan->rows_per_tile;
        p.o = o;
        p.lse = lse;
        p.partial_o = partial_o;
        p.partial_lse = partial_lse;
        p.partial_rows_capacity = partial_rows;
        p.status = status;
        if (const char* env = std::getenv("MLAPS_MLA_BLOCK_THREADS")) {
          p.block_threads = std::atoi(env);
        }
        MlaReduceParams r;
        r.reduce_indptr = plan_words + at_ri;
        r.reduce_final_map = plan_words + at_fm;
        r.reduce_partial_map = plan_words + at_pm;
        r.reduce_partial_map_capacity = static_cast<int64_t>(plan->reduce_partial_map.size());
        r.num_reduce_tiles = plan->num_reduce_tiles();
        r.reduce_tiles_capacity = plan->num_reduce_tiles();
        r.qo_indptr = p.qo_indptr;
        r.num_requests = p.num_requests;
        r.num_q_tokens = p.num_q_tokens;
        r.num_heads = s.heads;
        r.head_fold = plan->head_fold;
        r.partial_o = partial_o;
        r.partial_lse = partial_lse;
        r.partial_rows_capacity = partial_rows;
        r.o = o;
        r.lse = lse;
        r.status = status;
        // A direct launch first (sets the shared-memory attribute, checks the status word).
        if (LaunchMlaDecode(p, stream) != 0 || LaunchMlaReduce(r, stream) != 0) {
          std::fprintf(stderr, "launch refused: %s / %s\n",
                       MlaDecodeParamsError(p) ? MlaDecodeParamsError(p) : "-",
                       MlaReduceParamsError(r) ? MlaReduceParamsError(r) : "-");
          return 1;
        }
        CHECK_HIP(hipStreamSynchronize(stream));
        MlaStatus st;
        CHECK_HIP(hipMemcpy(&st, status, sizeof(st), hipMemcpyDeviceToHost));
        if (st.code != kMlaOk) {
          std::fprintf(stderr, "status %d (cu %d index %d)\n", st.code, st.cu, st.index);
          return 1;
        }
        if (filter.once) {
          std::printf("ran %s H%d q%d B%d ctx%d once\n", fp8 ? "fp8" : "bf16", s.heads, s.qlen,
                      batch_size, ctx);
          continue;
        }
        Row row;
        row.dtype = fp8 ? "fp8" : "bf16";
        row.batch = batch_size;
        row.ctx = ctx;
        row.heads = s.heads;
        row.qlen = s.qlen;
        row.items = plan->num_works();
        row.splits = plan->num_reduce_tiles();
        row.decode_us = 1e3f * TimeGraph(stream, [&] { LaunchMlaDecode(p, stream); });
        row.reduce_us = plan->num_reduce_tiles() > 0
                            ? 1e3f * TimeGraph(stream, [&] { LaunchMlaReduce(r, stream); })
                            : 0.0f;
        row.total_us = 1e3f * TimeGraph(stream, [&] {
                         LaunchMlaDecode(p, stream);
                         LaunchMlaReduce(r, stream);
                       });
        const double sum_kv = static_cast<double>(batch_size) * ctx;
        const double total_q = static_cast<double>(batch.total_q_tokens());
        const double bytes =
            sum_kv * 576 * elem + total_q * s.heads * 576 * elem + total_q * s.heads * 512 * 2;
        const double flops = static_cast<double>(s.qlen) * sum_kv * s.heads * (576 + 512) * 2;
        row.tbps = bytes / (row.total_us * 1e-6) / 1e12;
        row.tflops = flops / (row.total_us * 1e-6) / 1e12;
        rows.push_back(row);
        std::printf("  %s B%d ctx%d H%d q%d: decode %.1f us, reduce %.1f us, total %.1f us\n",
                    row.dtype.c_str(), batch_size, ctx, s.heads, s.qlen, row.decode_us,
                    row.reduce_us, row.total_us);
        std::fflush(stdout);
      }
    }
  }
  const char* threads_env = std::getenv("MLAPS_MLA_BLOCK_THREADS");
  std::printf("\ndecode block threads: %s\n", threads_env ? threads_env : "default");
  std::printf("%-5s %5s %6s %4s %4s %6s %6s %10s %10s %10s %8s %9s %8s\n", "dtype", "batch", "ctx",
              "H", "qlen", "items", "splits", "decode_us", "reduce_us", "total_us", "TB/s",
              "TFLOP/s", "reduce%");
  for (const Row& r : rows) {
    std::printf("%-5s %5d %6d %4d %4d %6d %6d %10.1f %10.1f %10.1f %8.2f %9.1f %7.1f%%\n",
                r.dtype.c_str(), r.batch, r.ctx, r.heads, r.qlen, r.items, r.splits, r.decode_us,
                r.reduce_us, r.total_us, r.tbps, r.tflops,
                r.decode_us > 0 ? 100.0 * r.reduce_us / r.decode_us : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  mlaps::Filter filter;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--once") {
      filter.once = true;
    } else if (arg == "--only" && i + 1 < argc) {
      char dtype[8] = {0};
      if (std::sscanf(argv[++i], "%7[a-z0-9],%d,%d,%d,%d", dtype, &filter.heads, &filter.qlen,
                      &filter.batch, &filter.ctx) != 5) {
        std::fprintf(stderr, "--only DTYPE,H,QLEN,BATCH,CTX\n");
        return 2;
      }
      filter.dtype = dtype;
      filter.any = false;
    } else {
      std::fprintf(stderr, "usage: %s [--only DTYPE,H,QLEN,BATCH,CTX] [--once]\n", argv[0]);
      return 2;
    }
  }
  return mlaps::Main(filter);
}
