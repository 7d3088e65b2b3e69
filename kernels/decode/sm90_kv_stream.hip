// How fast one SM can stream kv chunks into shared memory, against how many it keeps in flight:
// the memory side of the sm90 decode kernels' refill, without their consumers.
//
// One block an SM, one thread issuing: TMA loads of 64 x 64 bf16 boxes (a kv chunk, 8 KB, 64
// rows 1152 bytes apart, 128-byte swizzle: the decode kernels' kv map) into a ring of K 8 KB
// buffers, each completing on its own mbarrier; load g waits for load g - K's buffer, so K loads
// are in flight at all times. The block walks its kv blocks of 64 rows (pages of 64 tokens) in
// the kernels' order, the nine chunks of one, then the next. Printed per K: bytes an SM a cycle
// (clock64 of the slowest block), the mean latency that implies (Little: K x 8 KB / rate), and
// the grid's TB/s (kernel time by events; pair: the DRAM bytes are half the loads).
//
// Modes: "own" (each block its own kv blocks: the (16,x) shapes) and "pair" (blocks 2j and
// 2j + 1 read the same kv blocks: the two 64-row tiles of a request on neighbouring blocks, as
// the kernels place kv lanes); the kv blocks in memory order or shuffled (the benchmarks' page
// tables), shuffled also with a line of the block two ahead prefetched (its page's translation
// in place before its loads); evict-first (the f16-tile kernel's hint; the f16pv kernel's until
// session 34) or no L2 hint (the f16pv kernel's).
//
//   gpu_bundle/bin/kernels_decode_sm90_kv_stream [CHUNKS_PER_BLOCK]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_sm90_block.h"
#include "kernels/decode/sm90_primitives.h"
#include "kernels/platform/hip_check.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps {
namespace {

constexpr int kChunkBytes = 64 * 128;
constexpr int kMaxInFlight = 27;  // 216 KB of buffers: the decode kernels' Q tile and two slots
constexpr int kRowBytes = 576 * 2;
constexpr int kMaxBlocks = 1024;  // kv blocks a block streams at most

// Block b streams `chunks` chunks of kv blocks (64 rows each) pages[owner * blocks + t], owner =
// pair ? b / 2 : b; cycles[b]: its clock64 span. warm_ahead > 0: with block t's first load, one
// line of block t + warm_ahead (prefetch.global.L2: its page's translation in place).
template <bool kEvictFirst>
__global__ void __launch_bounds__(32, 1)
    KvStreamKernel(const __grid_constant__ mla::TmaMap map, const int32_t* pages, const uint8_t* kv,
                   int in_flight, int chunks, bool pair, int warm_ahead, long long* cycles) {
#if defined(__CUDA_ARCH__)
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ uint64_t bars[kMaxInFlight];
  __shared__ int32_t page_of[kMaxBlocks];
  const int owner = pair ? blockIdx.x / 2 : blockIdx.x;
  const int blocks = (chunks + 8) / 9;
  for (int t = threadIdx.x; t < blocks; t += blockDim.x) page_of[t] = pages[owner * blocks + t];
  __syncwarp();
  if (threadIdx.x != 0) return;
  const uint32_t base = (mla::SmemAddr(smem) + 1023) & ~1023u;
  for (int k = 0; k < in_flight; ++k) mla::MbarInit(mla::SmemAddr(&bars[k]), 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  const long long t0 = clock64();
  for (int g = 0; g < chunks + in_flight; ++g) {
    const int k = g % in_flight;
    const uint32_t bar = mla::SmemAddr(&bars[k]);
    if (g >= in_flight) mla::MbarWait(bar, ((g - in_flight) / in_flight) & 1);
    if (g >= chunks) continue;
    const int t = g / 9;
    if (warm_ahead > 0 && g % 9 == 0 && t + warm_ahead < blocks) {
      mla::PrefetchL2Line(kv + static_cast<int64_t>(page_of[t + warm_ahead]) * 64 * kRowBytes);
    }
    mla::MbarArriveExpectTx(bar, kChunkBytes);
    mla::TmaLoad2D<kEvictFirst>(base + k * kChunkBytes, &map, 64 * (g % 9), 64 * page_of[t], bar);
  }
  cycles[blockIdx.x] = clock64() - t0;
#endif
}

struct Run {
  int in_flight;
  bool pair, evict_first, shuffled;
  int warm_ahead;
};

// flush: 256 MB written before each run, so the L2 holds none of the rows.
// pages_d: the blocks' pages, in order (contiguous) or shuffled (shuffled_d).
void Measure(const Run& run, void* kv, int64_t rows, int sms, int chunks, const int32_t* pages_d,
             const int32_t* shuffled_d, void* flush, long long* cycles_d) {
  // The kernels' own kv map (EncodeKvTmaMap): bf16 rows in pages of 64.
  MlaDecodeParams p;
  p.kv_cache = kv;
  p.page_size = 64;
  p.num_pages = rows / 64;
  mla::TmaMap map;
  MLAPS_CHECK_HIP(static_cast<hipError_t>(EncodeKvTmaMap(p, /*raw_e4m3=*/false, &map)));
  // The whole ring's shared memory whatever K: one block an SM (as the kernels run), so that
  // "bytes an SM a cycle" is one block's.
  constexpr int smem = kMaxInFlight * kChunkBytes + 1024;
  if (run.in_flight < 1 || run.in_flight > kMaxInFlight) {
    std::fprintf(stderr, "sm90_kv_stream: %d loads in flight, 1..%d allowed\n", run.in_flight,
                 kMaxInFlight);
    std::exit(2);
  }
  auto kernel = run.evict_first ? KvStreamKernel<true> : KvStreamKernel<false>;
  MLAPS_CHECK_HIP(hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, smem));
  MLAPS_CHECK_HIP(hipMemset(flush, run.in_flight, 256 << 20));
  hipEvent_t start, stop;
  MLAPS_CHECK_HIP(hipEventCreate(&start));
  MLAPS_CHECK_HIP(hipEventCreate(&stop));
  MLAPS_CHECK_HIP(hipEventRecord(start, nullptr));
  kernel<<<sms, 32, smem>>>(map, run.shuffled ? shuffled_d : pages_d,
                            static_cast<const uint8_t*>(kv), run.in_flight, chunks, run.pair,
                            run.warm_ahead, cycles_d);
  MLAPS_CHECK_HIP(hipGetLastError());
  MLAPS_CHECK_HIP(hipEventRecord(stop, nullptr));
  MLAPS_CHECK_HIP(hipEventSynchronize(stop));
  float ms = 0.0f;
  MLAPS_CHECK_HIP(hipEventElapsedTime(&ms, start, stop));
  MLAPS_CHECK_HIP(hipEventDestroy(start));
  MLAPS_CHECK_HIP(hipEventDestroy(stop));
  std::vector<long long> cycles(sms);
  MLAPS_CHECK_HIP(
      hipMemcpy(cycles.data(), cycles_d, sms * sizeof(long long), hipMemcpyDeviceToHost));
  const double slowest = static_cast<double>(*std::max_element(cycles.begin(), cycles.end()));
  const double bytes_an_sm = static_cast<double>(chunks) * kChunkBytes;
  const double rate = bytes_an_sm / slowest;
  const double dram = (run.pair ? 0.5 : 1.0) * bytes_an_sm * sms / (ms * 1e-3) / 1e12;
  std::printf("| %s | %s | %d | %s | %2d | %6.2f | %6.0f | %8.1f | %5.2f |\n",
              run.pair ? "pair" : "own", run.shuffled ? "shuffled" : "in order", run.warm_ahead,
              run.evict_first ? "evict-first" : "none", run.in_flight, rate,
              run.in_flight * kChunkBytes / rate, ms * 1e3, dram);
  std::fflush(stdout);
}

}  // namespace
}  // namespace mlaps

int main(int argc, char** argv) {
  // 9 x 128 chunks: one item of 128 kv blocks, what a CU streams at 128 x 8192 (16,4).
  const int chunks = argc > 1 ? std::atoi(argv[1]) : 9 * 128;
  if (chunks <= 0 || (chunks + 8) / 9 > mlaps::kMaxBlocks) {
    std::fprintf(stderr, "usage: %s [CHUNKS_PER_BLOCK in 1..9216]\n", argv[0]);
    return 2;
  }
  int sms = 0;
  MLAPS_CHECK_HIP(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, 0));
  const int64_t rows = int64_t{sms} * ((chunks + 8) / 9) * 64;
  void* kv = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&kv, rows * mlaps::kRowBytes));
  MLAPS_CHECK_HIP(hipMemset(kv, 1, rows * mlaps::kRowBytes));
  long long* cycles_d = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&cycles_d, sms * sizeof(long long)));
  void* flush = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&flush, 256 << 20));
  std::printf(
      "kv chunk stream: %d SMs, one block each, %d chunks (64 x 64 bf16 TMA boxes) a "
      "block, %.2f GB of rows\n\n",
      sms, chunks, rows * mlaps::kRowBytes / 1e9);
  // Pages: the blocks in order, and a shuffle of them (the benchmarks' page tables are shuffles).
  const int blocks = (chunks + 8) / 9;
  std::vector<int32_t> pages(static_cast<size_t>(sms) * blocks);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(i);
  std::vector<int32_t> shuffled = pages;
  uint64_t state = 0x9e3779b97f4a7c15ull;  // a fixed LCG: the same shuffle every run
  for (size_t i = shuffled.size() - 1; i > 0; --i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(shuffled[i], shuffled[(state >> 33) % (i + 1)]);
  }
  int32_t *pages_d = nullptr, *shuffled_d = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&pages_d, pages.size() * sizeof(int32_t)));
  MLAPS_CHECK_HIP(hipMalloc(&shuffled_d, pages.size() * sizeof(int32_t)));
  MLAPS_CHECK_HIP(
      hipMemcpy(pages_d, pages.data(), pages.size() * sizeof(int32_t), hipMemcpyHostToDevice));
  MLAPS_CHECK_HIP(hipMemcpy(shuffled_d, shuffled.data(), shuffled.size() * sizeof(int32_t),
                            hipMemcpyHostToDevice));
  std::printf(
      "| mode | pages | warm ahead | hint | in flight | bytes an SM a cycle | "
      "implied latency (cycles) | kernel us | DRAM TB/s "
      "|\n|---|---|---|---|---|---|---|---|---|\n");
  for (const bool pair : {false, true}) {
    for (const bool shuffled_pages : {false, true}) {
      for (const int warm : {0, 2}) {
        if (warm > 0 && !shuffled_pages) continue;
        for (const bool evict_first : {true, false}) {
          for (const int k : {4, 6, 9, 18}) {
            mlaps::Measure({k, pair, evict_first, shuffled_pages, warm}, kv, rows, sms, chunks,
                           pages_d, shuffled_d, flush, cycles_d);
          }
        }
      }
    }
  }
  MLAPS_CHECK_HIP(hipFree(pages_d));
  MLAPS_CHECK_HIP(hipFree(shuffled_d));
  MLAPS_CHECK_HIP(hipFree(kv));
  MLAPS_CHECK_HIP(hipFree(flush));
  MLAPS_CHECK_HIP(hipFree(cycles_d));
  return 0;
}
