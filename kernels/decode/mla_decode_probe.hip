// A hang probe for the sm90 decode kernel: runs one shape with the kernel's progress marks
// compiled in (MLAPS_SM90_PROGRESS, mla_decode_sm90.h) into mapped host memory, waits up to
// a timeout for the launch, and on a hang prints where every warp of the first blocks stands
// and how many blocks share each pattern. A debugging tool for the GPU machine (no Bazel
// test: a hung kernel cannot be recovered from inside the process).
//
//   mla_decode_probe [DTYPE H QLEN BATCH CTX PAGE [NUM_CU] [KV_LANES]]   (no arguments: a
//   built-in list of shapes; exit 0: all finished, status words printed; 3: one hung)
#define MLAPS_SM90_PROGRESS 1
// The sm90 kernel with the marks, as MlaDecodeSm90ProbeKernel (this binary's own copy).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/decode/mla_decode_bench_harness.h"
#include "kernels/decode/mla_decode_sm90.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps {
namespace {

__global__ void SetProgress(unsigned long long* p, unsigned long long* times) {
#if defined(__CUDA_ARCH__)
  mla::g_sm90_progress = p;
  mla::g_sm90_times = times;
#endif
}

// What MLAPS_SM90_TIMED's slots time (mla_decode_sm90.h; the macro: mla_decode_sm90_probe.h).
const char* const kTimedNames[16] = {"S: chunk full",
                                     "own: S done",
                                     "own: P barrier",
                                     "own: P V done",
                                     "remote: stats",
                                     "remote: P V done",
                                     "Q full",
                                     "epilogue barrier",
                                     "copy: Q empty",
                                     "copy: slot empty",
                                     "convert: Q landed",
                                     "convert: chunk landed",
                                     "convert: chunk work",
                                     "own: softmax (work)",
                                     "own: P fence",
                                     "convert: fence"};

const char* TagName(unsigned tag) {
  switch (tag) {
    case 1:
      return "own";
    case 2:
      return "remote";
    case 3:
      return "S-wait";
    case 4:
      return "epilogue";
    case 5:
      return "tile";
    case 6:
      return "empty-wait";
    case 7:
      return "q-wait";
    case 8:
      return "setmaxnreg";
    case 9:
      return "done";
    case 10:
      return "qfull-wait";
    case 11:
      return "qfull-done";
    default:
      return "-";
  }
}

std::string Mark(unsigned long long m) {
  const unsigned tag = static_cast<unsigned>(m >> 48);
  const unsigned long long v = m & 0xffffffffffffull;
  char buf[64];
  if (tag == 3 || tag == 6) {
    std::snprintf(buf, sizeof(buf), "%s(n%llu,p%llu)", TagName(tag), v / 16, v % 16);
  } else {
    std::snprintf(buf, sizeof(buf), "%s(%llu)", TagName(tag), v);
  }
  return buf;
}

struct Shape {
  bool fp8;
  int heads, qlen, batch, ctx, page, num_cu, kv_lanes;
};

// Runs one shape; 0 when it finished (status printed), 3 after a hang (marks printed; the
// process must end then), 2 / 4 on setup / launch errors.
int Probe(const Shape& c, int sms, hipStream_t stream) {
  PlanOptions options;
  options.num_cu = c.num_cu > 0 ? c.num_cu : sms;
  options.kv_lanes = c.kv_lanes;
  const Batch batch = MakeUniformBatch(Arch::kSm90, c.fp8 ? DType::kFp8 : DType::kBf16, c.heads,
                                       c.batch, c.qlen, c.ctx, c.page);
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "plan: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  std::mt19937 rng(5);
  const std::vector<int32_t> pages = bench::ShuffledPages(batch, rng);
  const bench::DecodeBuffers buffers =
      bench::AllocateDecodeBuffers(int64_t{c.batch} * ((c.ctx + c.page - 1) / c.page) * c.page,
                                   int64_t{c.batch} * c.qlen * c.heads);
  bench::FillDecodeBuffers(buffers, c.fp8, stream);
  bench::StagedCase staged;
  if (!bench::StageCase(batch, *plan, pages, buffers, &staged)) return 2;
  staged.decode.path = kMlaPathWgmma;
  unsigned long long *progress = nullptr, *times = nullptr;
  const size_t marks = static_cast<size_t>(plan->num_cu) * 12;
  MLAPS_CHECK_HIP(hipHostMalloc(&progress, marks * 8));
  MLAPS_CHECK_HIP(hipMalloc(&times, marks * 16 * 8));
  MLAPS_CHECK_HIP(hipMemset(times, 0, marks * 16 * 8));
  for (size_t i = 0; i < marks; ++i) progress[i] = 0;
  hipLaunchKernelGGL(SetProgress, dim3(1), dim3(1), 0, stream, progress, times);
  MLAPS_CHECK_HIP(hipStreamSynchronize(stream));
  std::printf(
      "probe %s H%d q%d B%d ctx%d page%d: %d blocks, %d items, lanes %d: ", c.fp8 ? "fp8" : "bf16",
      c.heads, c.qlen, c.batch, c.ctx, c.page, plan->num_cu, plan->num_works(), plan->kv_lanes);
  std::fflush(stdout);
  if (const char* e = MlaDecodeParamsError(staged.decode)) {
    std::fprintf(stderr, "params: %s\n", e);
    return 2;
  }
  const auto kernel = c.fp8 ? mla::MlaDecodeSm90ProbeKernel<true, false>
                            : mla::MlaDecodeSm90ProbeKernel<false, false>;
  const mla::TmaMap no_map{};  // the probe copies by cp.async (kTma false): never read
  MLAPS_CHECK_HIP(hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize,
                                      mla::SmemSm90::kBytes));
  const auto start = std::chrono::steady_clock::now();
  hipLaunchKernelGGL(kernel, dim3(plan->num_cu), dim3(mla::kSm90Threads), mla::SmemSm90::kBytes,
                     stream, staged.decode, no_map);
  MLAPS_CHECK_HIP(hipGetLastError());
  for (;;) {
    const hipError_t q = hipStreamQuery(stream);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (q == hipSuccess) {
      MlaStatus st;
      MLAPS_CHECK_HIP(hipMemcpy(&st, staged.decode.status, sizeof(st), hipMemcpyDeviceToHost));
      std::printf("finished in %.3f s (with the launch), status %d (cu %d index %d value %lld)\n",
                  s, st.code, st.cu, st.index, static_cast<long long>(st.value));
      // Wait cycles per block, averaged over blocks, for one warp of each role (warp 0:
      // consumer 0, 4: consumer 1, 8: copy, 10: convert), after a second, timed launch.
      MLAPS_CHECK_HIP(hipMemset(times, 0, marks * 16 * 8));
      hipEvent_t a, b;
      MLAPS_CHECK_HIP(hipEventCreate(&a));
      MLAPS_CHECK_HIP(hipEventCreate(&b));
      MLAPS_CHECK_HIP(hipEventRecord(a, stream));
      hipLaunchKernelGGL(kernel, dim3(plan->num_cu), dim3(mla::kSm90Threads), mla::SmemSm90::kBytes,
                         stream, staged.decode, no_map);
      MLAPS_CHECK_HIP(hipEventRecord(b, stream));
      MLAPS_CHECK_HIP(hipEventSynchronize(b));
      float ms = 0;
      MLAPS_CHECK_HIP(hipEventElapsedTime(&ms, a, b));
      std::vector<unsigned long long> host(marks * 16);
      MLAPS_CHECK_HIP(hipMemcpy(host.data(), times, host.size() * 8, hipMemcpyDeviceToHost));
      std::printf(
          "  kernel %.1f us; wait cycles a block (mean over blocks), warps 0 / 4 / 8 / 10:\n",
          ms * 1e3);
      for (int slot = 0; slot < 16; ++slot) {
        double sum[4] = {0, 0, 0, 0};
        const int warps[4] = {0, 4, 8, 10};
        for (int blk = 0; blk < plan->num_cu; ++blk) {
          for (int w = 0; w < 4; ++w) sum[w] += host[(blk * 12 + warps[w]) * 16 + slot];
        }
        std::printf("    %-22s %12.0f %12.0f %12.0f %12.0f\n", kTimedNames[slot],
                    sum[0] / plan->num_cu, sum[1] / plan->num_cu, sum[2] / plan->num_cu,
                    sum[3] / plan->num_cu);
      }
      MLAPS_CHECK_HIP(hipHostFree(progress));
      MLAPS_CHECK_HIP(hipFree(buffers.kv));  // the largest buffer; the rest is small
      return 0;
    }
    if (q != hipErrorNotReady) {
      std::printf("error %s\n", hipGetErrorString(q));
      return 4;
    }
    if (s > 3.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("HANG after 3 s. Warps 0-3 consumer 0, 4-7 consumer 1, 8-11 producer:\n");
  std::map<std::string, int> patterns;
  for (int b = 0; b < plan->num_cu; ++b) {
    std::string line;
    for (int w = 0; w < 12; w += 4) line += Mark(progress[b * 12 + w]) + " ";
    ++patterns[line];
    if (b < 6) {
      const int cu = MlaPlanCu(b, plan->num_cu, staged.decode.cu_lanes);
      std::printf("block %d (CU %d, items %d..%d):", b, cu, plan->work_indptr[cu],
                  plan->work_indptr[cu + 1]);
      for (int w = 0; w < 12; ++w) std::printf(" %s", Mark(progress[b * 12 + w]).c_str());
      std::printf("\n");
    }
  }
  std::printf("patterns (warps 0, 4, 8):\n");
  for (const auto& [line, count] : patterns) std::printf("  %5d x %s\n", count, line.c_str());
  std::fflush(stdout);
  return 3;
}

int Main(int argc, char** argv) {
  hipDeviceProp_t prop;
  MLAPS_CHECK_HIP(hipGetDeviceProperties(&prop, 0));
  hipStream_t stream;
  MLAPS_CHECK_HIP(hipStreamCreate(&stream));
  std::vector<Shape> shapes;
  if (argc >= 7) {
    shapes.push_back(Shape{std::string(argv[1]) == "fp8", std::atoi(argv[2]), std::atoi(argv[3]),
                           std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]),
                           argc > 7 ? std::atoi(argv[7]) : 0, argc > 8 ? std::atoi(argv[8]) : 0});
  } else if (argc == 1) {
    // Small to benchmark-sized shapes of both dtypes, page sizes 1 to 64, 1 to many items a
    // block, with and without kv lanes.
    shapes = {{false, 64, 1, 1, 70, 64, 1, 1},      {false, 64, 2, 8, 1000, 64, 0, 1},
              {true, 16, 4, 8, 777, 16, 0, 1},      {false, 128, 2, 4, 3000, 1, 0, 1},
              {true, 32, 3, 64, 4000, 64, 0, 8},    {false, 64, 2, 128, 8192, 64, 0, 8},
              {false, 128, 2, 128, 8192, 64, 0, 8}, {true, 64, 2, 128, 8192, 64, 0, 8}};
  } else {
    std::fprintf(stderr, "usage: %s [DTYPE H QLEN BATCH CTX PAGE [NUM_CU] [KV_LANES]]\n", argv[0]);
    return 2;
  }
  for (const Shape& c : shapes) {
    const int rc = Probe(c, prop.multiProcessorCount, stream);
    if (rc == 3) _exit(3);  // a hung kernel cannot be waited for
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) { return mlaps::Main(argc, argv); }
