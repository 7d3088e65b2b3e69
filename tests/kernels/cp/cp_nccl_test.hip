// CP round-robin across GPUs: one thread per GPU, each rank holds its KV shard in its own
// device memory, attends its shard (the simulator's executor on the host until the decode
// kernel takes this over), then the ranks all-gather (O, LSE) with NCCL and merge on their
// GPU. Every rank's merged output must equal the single-device unsharded reference within
// docs/design.md's gates, and the ranks must agree bit for bit. Needs >= 2 GPUs (skips otherwise).
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cp/lse_merge.h"
#include "kernels/platform/collectives.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/reference.h"

namespace mlaps {
namespace {

struct RankResult {
  std::string error;             // empty when the rank ran
  std::vector<uint16_t> o_bf16;  // merged O bits [rows, 512]
  std::vector<float> lse;        // merged LSE [rows]
  int64_t shard_tokens = 0;      // kv tokens this rank held on its GPU
  float exchange_merge_ms = 0;   // all-gather + merge on this rank
};

#define RANK_CHECK(cond, what) \
  do {                         \
    if (!(cond)) {             \
      out.error = what;        \
      return;                  \
    }                          \
  } while (0)

void RunRank(int rank, int world, ncclUniqueId id, const Batch& global, const sim::DecodeCase& in,
             RankResult& out) {
  RANK_CHECK(hipSetDevice(rank) == hipSuccess, "hipSetDevice");
  ncclComm_t comm;
  RANK_CHECK(ncclCommInitRank(&comm, world, id, rank) == ncclSuccess, "ncclCommInitRank");
  const CpSharding s{world, 1};
  absl::StatusOr<CpShardView> view = MakeCpShardView(global, in.kv_indices, s, rank);
  RANK_CHECK(view.ok(), std::string(view.status().message()));
  // The rank's KV shard, gathered from the global cache into its own device memory.
  std::vector<float> shard;
  for (int32_t sub : view->kv_indices) {
    const float* row = in.kv_cache.data() + int64_t{sub} * kHeadDimQk;  // I = 1: a row
    shard.insert(shard.end(), row, row + kHeadDimQk);
  }
  out.shard_tokens = static_cast<int64_t>(view->kv_indices.size());
  float* d_shard = nullptr;
  RANK_CHECK(hipMalloc(&d_shard, std::max<size_t>(shard.size(), 1) * 4) == hipSuccess, "alloc");
  RANK_CHECK(
      hipMemcpy(d_shard, shard.data(), shard.size() * 4, hipMemcpyHostToDevice) == hipSuccess,
      "copy shard");
  // This rank's attention over its shard (global positions drive the causal mask).
  sim::CpGlobalPositions cp;
  cp.global_position = [&](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
  cp.global_kv_len = view->global_kv_len;
  sim::DecodeInputs inputs = in.Inputs();
  inputs.kv_indices = view->kv_indices;
  inputs.cp = &cp;
  absl::StatusOr<WorkPlan> plan = PlanDecode(view->batch, {});
  RANK_CHECK(plan.ok(), std::string(plan.status().message()));
  sim::ExecutorOptions exec;
  exec.final_o_bf16 = false;
  absl::StatusOr<sim::ExecutorOutput> att = sim::ExecutePlan(view->batch, *plan, inputs, exec);
  RANK_CHECK(att.ok(), std::string(att.status().message()));
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  float *d_o = nullptr, *d_lse = nullptr, *d_all_o = nullptr, *d_all_lse = nullptr;
  float* d_lse_out = nullptr;
  void* d_out = nullptr;
  RANK_CHECK(hipMalloc(&d_o, rows * kHeadDimV * 4) == hipSuccess &&
                 hipMalloc(&d_lse, rows * 4) == hipSuccess &&
                 hipMalloc(&d_all_o, world * rows * kHeadDimV * 4) == hipSuccess &&
                 hipMalloc(&d_all_lse, world * rows * 4) == hipSuccess &&
                 hipMalloc(&d_out, rows * kHeadDimV * 2) == hipSuccess &&
                 hipMalloc(&d_lse_out, rows * 4) == hipSuccess,
             "alloc outputs");
  hipMemcpy(d_o, att->o.data(), rows * kHeadDimV * 4, hipMemcpyHostToDevice);
  hipMemcpy(d_lse, att->lse.data(), rows * 4, hipMemcpyHostToDevice);
  hipMemset(d_out, 0xff, rows * kHeadDimV * 2);  // poison
  hipStream_t stream;
  RANK_CHECK(hipStreamCreate(&stream) == hipSuccess, "stream");
  hipEvent_t start, stop;
  hipEventCreate(&start);
  hipEventCreate(&stop);
  hipEventRecord(start, stream);
  RANK_CHECK(ncclGroupStart() == ncclSuccess, "group");
  RANK_CHECK(ncclAllGather(d_o, d_all_o, rows * kHeadDimV, ncclFloat, comm, stream) == ncclSuccess,
             "all-gather O");
  RANK_CHECK(ncclAllGather(d_lse, d_all_lse, rows, ncclFloat, comm, stream) == ncclSuccess,
             "all-gather LSE");
  RANK_CHECK(ncclGroupEnd() == ncclSuccess, "group end");
  kernels::LseMergeParams p;
  p.o_ranks = d_all_o;
  p.lse_ranks = d_all_lse;
  p.world_size = world;
  p.rows = rows;
  p.o_out = d_out;
  p.lse_out = d_lse_out;
  RANK_CHECK(kernels::LaunchLseMerge(p, stream) == kernels::LseMergeError::kOk, "merge launch");
  hipEventRecord(stop, stream);
  RANK_CHECK(hipStreamSynchronize(stream) == hipSuccess, "sync");
  hipEventElapsedTime(&out.exchange_merge_ms, start, stop);
  out.o_bf16.resize(rows * kHeadDimV);
  out.lse.resize(rows);
  hipMemcpy(out.o_bf16.data(), d_out, rows * kHeadDimV * 2, hipMemcpyDeviceToHost);
  hipMemcpy(out.lse.data(), d_lse_out, rows * 4, hipMemcpyDeviceToHost);
  for (void* ptr : {static_cast<void*>(d_shard), static_cast<void*>(d_o), static_cast<void*>(d_lse),
                    static_cast<void*>(d_all_o), static_cast<void*>(d_all_lse), d_out,
                    static_cast<void*>(d_lse_out)}) {
    hipFree(ptr);
  }
  hipStreamDestroy(stream);
  ncclCommDestroy(comm);
}

void RunCase(const Batch& global, int world) {
  const sim::DecodeCase in = sim::MakeDecodeCase(global, 2026, 0.7, 1.3);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<RankResult> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back(RunRank, r, world, id, std::cref(global), std::cref(in),
                         std::ref(results[r]));
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(global, in.Inputs());
  ASSERT_TRUE(ref.ok()) << ref.status();
  int64_t tokens = 0;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(results[r].error, "") << "rank " << r;
    tokens += results[r].shard_tokens;
    ASSERT_EQ(results[r].o_bf16, results[0].o_bf16) << "rank " << r << " disagrees with rank 0";
    std::vector<float> o(results[r].o_bf16.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = sim::Bf16BitsToFloat(results[r].o_bf16[i]);
    absl::StatusOr<sim::Comparison> cmp =
        sim::CompareOutputs(o, results[r].lse, ref->o, ref->lse, sim::GatesFor(global.kv_dtype));
    ASSERT_TRUE(cmp.ok());
    EXPECT_TRUE(cmp->passed) << "rank " << r << ": " << cmp->Summary();
    std::printf(
        "%s H=%d qlen=%d W=%d rank %d (%lld kv tokens on its GPU): exchange + merge "
        "%.3f ms; vs unsharded reference: %s\n",
        std::string(DTypeName(global.kv_dtype)).c_str(), global.num_heads, global.max_qlen(), world,
        r, static_cast<long long>(results[r].shard_tokens), results[r].exchange_merge_ms,
        cmp->Summary().c_str());
  }
  int64_t want = 0;
  for (int b = 0; b < global.num_requests(); ++b) want += global.kv_len(b);
  EXPECT_EQ(tokens, want) << "the shards must partition the kv";
}

TEST(CpNccl, ShardedRanksMatchUnshardedReference) {
  int devices = 0;
  ASSERT_EQ(hipGetDeviceCount(&devices), hipSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, found " << devices;
  RunCase(MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {13, 700, 2100, 4096}, 2, 1), devices);
  RunCase(MakeVarlenBatch(Arch::kSm90, DType::kFp8, 64, {1, 333, 3000}, 1, 1), devices);
}

}  // namespace
}  // namespace mlaps
