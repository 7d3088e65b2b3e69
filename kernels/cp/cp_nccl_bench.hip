// CP exchange + merge across the machine's GPUs (one thread per GPU): each rank holds its
// (O, LSE) for `rows` (token x head) rows, all-gathers them with NCCL and merges on its GPU.
// Prints per rows: all-gather us, merge us, total us and the all-gather's bus GB/s. Needs
// >= 2 GPUs; NCCL_NVLS_ENABLE=0 is set (the bundle runner sets it too).
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/cp/lse_merge.h"
#include "kernels/platform/collectives.h"
#include "kernels/platform/hip_runtime.h"

namespace {

constexpr int kDim = 512;
constexpr int kReps = 20;

struct Timing {
  float gather_ms = 0, merge_ms = 0;
  bool ok = false;
};

void Rank(int rank, int world, ncclUniqueId id, int64_t rows, Timing& t) {
  using mlaps::kernels::LseMergeParams;
  hipSetDevice(rank);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, world, id, rank) != ncclSuccess) return;
  float *o, *lse, *all_o, *all_lse, *lse_out;
  void* out;
  hipMalloc(&o, rows * kDim * 4);
  hipMalloc(&lse, rows * 4);
  hipMalloc(&all_o, world * rows * kDim * 4);
  hipMalloc(&all_lse, world * rows * 4);
  hipMalloc(&out, rows * kDim * 2);
  hipMalloc(&lse_out, rows * 4);
  hipMemset(o, 0, rows * kDim * 4);
  hipMemset(lse, 0, rows * 4);
  hipStream_t s;
  hipStreamCreate(&s);
  hipEvent_t e0, e1, e2;
  hipEventCreate(&e0);
  hipEventCreate(&e1);
  hipEventCreate(&e2);
  LseMergeParams p;
  p.o_ranks = all_o;
  p.lse_ranks = all_lse;
  p.world_size = world;
  p.rows = rows;
  p.o_out = out;
  p.lse_out = lse_out;
  auto step = [&] {
    ncclGroupStart();
    ncclAllGather(o, all_o, rows * kDim, ncclFloat, comm, s);
    ncclAllGather(lse, all_lse, rows, ncclFloat, comm, s);
    ncclGroupEnd();
  };
  for (int i = 0; i < 3; ++i) {
    step();
    mlaps::kernels::LaunchLseMerge(p, s);
  }
  hipStreamSynchronize(s);
  float gather = 0, merge = 0;
  for (int i = 0; i < kReps; ++i) {
    hipEventRecord(e0, s);
    step();
    hipEventRecord(e1, s);
    mlaps::kernels::LaunchLseMerge(p, s);
    hipEventRecord(e2, s);
    hipEventSynchronize(e2);
    float a = 0, b = 0;
    hipEventElapsedTime(&a, e0, e1);
    hipEventElapsedTime(&b, e1, e2);
    gather += a;
    merge += b;
  }
  t.gather_ms = gather / kReps;
  t.merge_ms = merge / kReps;
  t.ok = hipGetLastError() == hipSuccess;
  for (void* ptr : {static_cast<void*>(o), static_cast<void*>(lse), static_cast<void*>(all_o),
                    static_cast<void*>(all_lse), out, static_cast<void*>(lse_out)}) {
    hipFree(ptr);
  }
  ncclCommDestroy(comm);
}

}  // namespace

int main() {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  int world = 0;
  hipGetDeviceCount(&world);
  if (world < 2) {
    std::printf("cp_nccl_bench: needs 2 GPUs, found %d; skipped\n", world);
    return 0;
  }
  std::printf("%8s %4s %12s %10s %10s %12s\n", "rows", "W", "allgather_us", "merge_us", "total_us",
              "busbw_GB/s");
  for (int64_t rows : {16384, 131072}) {
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    std::vector<Timing> t(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) threads.emplace_back(Rank, r, world, id, rows, std::ref(t[r]));
    for (std::thread& th : threads) th.join();
    for (const Timing& x : t) {
      if (!x.ok) {
        std::printf("cp_nccl_bench: a rank failed\n");
        return 1;
      }
    }
    // All-gather bus bandwidth: (W - 1) / W of the gathered bytes cross the links per rank.
    const double gathered = double(world) * rows * (kDim + 1) * 4;
    const double busbw = gathered * (world - 1) / world / (t[0].gather_ms / 1e3) / 1e9;
    std::printf("%8lld %4d %12.1f %10.1f %10.1f %12.1f\n", static_cast<long long>(rows), world,
                t[0].gather_ms * 1e3, t[0].merge_ms * 1e3, (t[0].gather_ms + t[0].merge_ms) * 1e3,
                busbw);
  }
  return 0;
}
