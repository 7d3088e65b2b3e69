// CP exchange + merge across the machine's GPUs (one thread per GPU): each rank holds its
// (O, LSE) for `rows` (token x head) rows, all-gathers them with NCCL and merges on its GPU.
// Prints per rows: all-gather us, merge us, total us and the all-gather's bus GB/s. Then the
// whole CP decode step (kernels/cp/cp_rank_runner.h) on W = 2 GPUs: per rank the GPU planner +
// decode (CP mask, fp32 O) + reduce on its KV shard (I = 16), the NCCL all-gather, the merge,
// next to the unsharded decode (host plan, one GPU), batch 128 x ctx 32768, (H, qlen) =
// (16, 4) and (128, 2), bf16 and fp8 (random inputs made on the GPU). Needs >= 2 GPUs;
// NCCL_NVLS_ENABLE=0 is set (the bundle runner sets it too).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cp/cp_rank_nccl.h"
#include "kernels/cp/cp_rank_runner.h"
#include "kernels/cp/cp_rank_setup.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_staging.h"
#include "kernels/platform/collectives.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"

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

// ---- The CP decode step vs the unsharded decode ------------------------------------------------

// Random finite elements: bf16 in (-1, 1) or e4m3fn codes of magnitude <= 2^-1 (and small).
__global__ void FillRandom(uint8_t* dst, long long n, int fp8, unsigned long long seed) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned long long h = (static_cast<unsigned long long>(i) + seed) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    if (fp8) {
      dst[i] = static_cast<uint8_t>(h & 0xb7);  // sign, exponent <= 6: finite
    } else if ((i & 1) == 0) {
      const float f = static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
      const unsigned short b = static_cast<unsigned short>(__float_as_uint(f) >> 16);
      *reinterpret_cast<unsigned short*>(dst + i) = b;
      if (i + 1 < n) dst[i + 1] = static_cast<uint8_t>(b >> 8);
    }
  }
}

void Fill(void* dst, long long bytes, bool fp8, unsigned long long seed, hipStream_t s) {
  hipLaunchKernelGGL(FillRandom, dim3(1024), dim3(256), 0, s, static_cast<uint8_t*>(dst), bytes,
                     fp8 ? 1 : 0, seed);
}

constexpr int kStepReps = 10;

struct StepTiming {
  float attention_ms = 0, gather_ms = 0, merge_ms = 0;
  std::string error;
};

void StepRank(const mlaps::cp::CpRankSetup& setup, int64_t q_bytes, ncclUniqueId id,
              StepTiming& t) {
  namespace cp = mlaps::cp;
  const int rank = setup.rank, world = setup.sharding.world_size;
  hipSetDevice(rank);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, world, id, rank) != ncclSuccess) {
    t.error = "ncclCommInitRank";
    return;
  }
  const bool fp8 = setup.view.batch.kv_dtype == mlaps::DType::kFp8;
  const int64_t elem = fp8 ? 1 : 2;
  cp::CpRankInputs in;
  in.q_bytes = q_bytes;
  in.num_pages = std::max<int64_t>(1, static_cast<int64_t>(setup.local_kv_indices.size()));
  in.kv_bytes = in.num_pages * setup.sharding.interleave * mlaps::kHeadDimQk * elem;
  cp::CpRankBuffers b;
  t.error = cp::AllocateCpRank(setup, in, &b);
  hipStream_t s;
  hipStreamCreate(&s);
  hipEvent_t e[4];
  for (hipEvent_t& x : e) hipEventCreate(&x);
  if (t.error.empty()) {
    Fill(b.q, in.q_bytes, fp8, 1, s);  // the same Q on every rank
    Fill(b.kv, in.kv_bytes, fp8, 1000 + rank, s);
  }
  for (int i = 0; i < 2 + kStepReps && t.error.empty(); ++i) {
    hipEventRecord(e[0], s);
    t.error = cp::EnqueueCpRankAttention(setup, b, s);
    hipEventRecord(e[1], s);
    if (t.error.empty()) t.error = cp::EnqueueNcclExchange(setup, b, comm, s);
    hipEventRecord(e[2], s);
    if (t.error.empty()) t.error = cp::EnqueueCpRankMerge(setup, b, s);
    hipEventRecord(e[3], s);
    hipEventSynchronize(e[3]);
    if (i < 2) continue;  // warm-up
    float ms[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) hipEventElapsedTime(&ms[k], e[k], e[k + 1]);
    t.attention_ms += ms[0] / kStepReps;
    t.gather_ms += ms[1] / kStepReps;
    t.merge_ms += ms[2] / kStepReps;
  }
  cp::CpRankResult r;
  if (t.error.empty()) t.error = cp::DownloadCpRank(setup, b, s, &r);
  if (t.error.empty() && (r.plan_status.code != 0 || r.decode_status.code != 0)) {
    t.error = "status words: plan " + std::to_string(r.plan_status.code) + ", decode " +
              std::to_string(r.decode_status.code);
  }
  cp::FreeCpRank(&b);
  for (hipEvent_t& x : e) hipEventDestroy(x);
  hipStreamDestroy(s);
  ncclCommDestroy(comm);
}

// The unsharded decode + reduce on GPU 0 with the host planner's plan: ms per step, or < 0.
float UnshardedMs(const mlaps::Batch& batch, int64_t q_bytes) {
  namespace st = mlaps::staging;
  hipSetDevice(0);
  absl::StatusOr<mlaps::WorkPlan> plan = mlaps::PlanDecode(batch, {});
  if (!plan.ok()) return -1;
  const bool fp8 = batch.kv_dtype == mlaps::DType::kFp8;
  const int64_t kv_bytes =
      int64_t{batch.kv_indptr.back()} * batch.page_size * mlaps::kHeadDimQk * (fp8 ? 1 : 2);
  std::vector<int32_t> pages(batch.kv_indptr.back());  // identity page table
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(i);
  const st::BatchArena ba = st::PackBatch(batch, pages);
  const st::PlanArena pa = st::PackPlan(*plan);
  const int64_t rows = batch.total_q_tokens() * batch.num_heads;
  const int64_t partial_rows = st::PartialRowsFor(*plan);
  const int64_t hg = batch.num_heads / plan->head_fold;
  void *q = nullptr, *kv = nullptr;
  int32_t *bw = nullptr, *pw = nullptr;
  uint16_t* o = nullptr;
  float *lse = nullptr, *po = nullptr, *pl = nullptr;
  mlaps::MlaStatus* status = nullptr;
  bool ok = hipMalloc(&q, q_bytes) == hipSuccess && hipMalloc(&kv, kv_bytes) == hipSuccess &&
            hipMalloc(&bw, ba.words.size() * 4) == hipSuccess &&
            hipMalloc(&pw, pa.words.size() * 4) == hipSuccess &&
            hipMalloc(&o, rows * mlaps::kHeadDimV * 2) == hipSuccess &&
            hipMalloc(&lse, rows * 4) == hipSuccess &&
            hipMalloc(&po, partial_rows * hg * mlaps::kHeadDimV * 4) == hipSuccess &&
            hipMalloc(&pl, partial_rows * hg * 4) == hipSuccess &&
            hipMalloc(&status, sizeof(mlaps::MlaStatus)) == hipSuccess;
  float result = -1;
  if (ok) {
    hipMemcpy(bw, ba.words.data(), ba.words.size() * 4, hipMemcpyHostToDevice);
    hipMemcpy(pw, pa.words.data(), pa.words.size() * 4, hipMemcpyHostToDevice);
    hipStream_t s;
    hipStreamCreate(&s);
    Fill(q, q_bytes, fp8, 1, s);
    Fill(kv, kv_bytes, fp8, 2000, s);
    hipMemsetAsync(status, 0, sizeof(mlaps::MlaStatus), s);
    st::DecodePointers d;
    d.q = q;
    d.kv = kv;
    d.batch = bw;
    d.plan = pw;
    d.o = o;
    d.lse = lse;
    d.partial_o = po;
    d.partial_lse = pl;
    d.status = status;
    const int64_t num_pages = batch.kv_indptr.back();
    const mlaps::MlaDecodeParams p =
        st::DecodeParamsFor(batch, *plan, ba, pa, num_pages, 1.0, 1.0, partial_rows, d);
    const mlaps::MlaReduceParams r = st::ReduceParamsFor(batch, *plan, ba, pa, partial_rows, d);
    hipEvent_t e0, e1;
    hipEventCreate(&e0);
    hipEventCreate(&e1);
    float total = 0;
    for (int i = 0; i < 2 + kStepReps && ok; ++i) {
      hipEventRecord(e0, s);
      ok = mlaps::LaunchMlaDecode(p, s) == 0 &&
           (r.reduce_tiles_capacity == 0 || mlaps::LaunchMlaReduce(r, s) == 0);
      hipEventRecord(e1, s);
      hipEventSynchronize(e1);
      float ms = 0;
      hipEventElapsedTime(&ms, e0, e1);
      if (i >= 2) total += ms / kStepReps;
    }
    mlaps::MlaStatus hs{};
    hipMemcpy(&hs, status, sizeof(hs), hipMemcpyDeviceToHost);
    if (ok && hs.code == 0) result = total;
    hipEventDestroy(e0);
    hipEventDestroy(e1);
    hipStreamDestroy(s);
  }
  for (void* ptr : {q, kv, static_cast<void*>(bw), static_cast<void*>(pw), static_cast<void*>(o),
                    static_cast<void*>(lse), static_cast<void*>(po), static_cast<void*>(pl),
                    static_cast<void*>(status)}) {
    if (ptr != nullptr) hipFree(ptr);
  }
  return result;
}

// Returns false when a rank failed.
bool DecodeStepTable() {
  namespace cp = mlaps::cp;
  constexpr int kWorld = 2, kBatch = 128, kCtx = 32768;
  std::printf(
      "\nCP decode step, W=%d I=16, batch %d x ctx %d (per rank: planner + decode + "
      "reduce, all-gather, merge; rank 0 shown, attention = slowest rank)\n",
      kWorld, kBatch, kCtx);
  std::printf("%-5s %4s %5s %14s %14s %12s %10s %10s %9s\n", "dtype", "H", "qlen", "unsharded_us",
              "attention_us", "allgather_us", "merge_us", "total_us", "speedup");
  struct Shape {
    int heads, qlen;
  };
  for (mlaps::DType dtype : {mlaps::DType::kBf16, mlaps::DType::kFp8}) {
    for (Shape sh : {Shape{16, 4}, Shape{128, 2}}) {
      const mlaps::Batch global =
          mlaps::MakeUniformBatch(mlaps::Arch::kSm90, dtype, sh.heads, kBatch, sh.qlen, kCtx, 64);
      const int64_t q_bytes = global.total_q_tokens() * global.num_heads * mlaps::kHeadDimQk *
                              (dtype == mlaps::DType::kFp8 ? 1 : 2);
      const float unsharded = UnshardedMs(global, q_bytes);
      std::vector<cp::CpRankSetup> setups;
      for (int r = 0; r < kWorld; ++r) {
        absl::StatusOr<cp::CpRankSetup> s = cp::MakeCpRankSetup(global, {}, {kWorld, 16}, r);
        if (!s.ok()) {
          std::printf("cp_nccl_bench: setup: %s\n", std::string(s.status().message()).c_str());
          return false;
        }
        setups.push_back(*std::move(s));
      }
      ncclUniqueId id;
      ncclGetUniqueId(&id);
      std::vector<StepTiming> t(kWorld);
      std::vector<std::thread> threads;
      for (int r = 0; r < kWorld; ++r) {
        threads.emplace_back(StepRank, std::cref(setups[r]), q_bytes, id, std::ref(t[r]));
      }
      for (std::thread& th : threads) th.join();
      float attention = 0;
      for (int r = 0; r < kWorld; ++r) {
        if (!t[r].error.empty()) {
          std::printf("cp_nccl_bench: rank %d: %s\n", r, t[r].error.c_str());
          return false;
        }
        attention = std::max(attention, t[r].attention_ms);
      }
      const float total = attention + t[0].gather_ms + t[0].merge_ms;
      std::printf("%-5s %4d %5d %14.1f %14.1f %12.1f %10.1f %10.1f %9.2f\n",
                  dtype == mlaps::DType::kFp8 ? "fp8" : "bf16", sh.heads, sh.qlen, unsharded * 1e3,
                  attention * 1e3, t[0].gather_ms * 1e3, t[0].merge_ms * 1e3, total * 1e3,
                  unsharded > 0 ? unsharded / total : 0.0f);
    }
  }
  return true;
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
  return DecodeStepTable() ? 0 : 1;
}
