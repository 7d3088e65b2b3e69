// The CP rank runner (kernels/cp/cp_rank_runner.h, issue 17) on the GPU: every rank holds
// its round-robin KV shard in its own device memory, plans it with the GPU planner, runs the
// persistent decode kernel + reduce with the CP mask and fp32 final O, the ranks exchange
// (O, LSE) into each rank's gather buffers (rank-major, as ncclAllGather leaves them) and
// each rank merges with the GPU merge kernel.
//   * OneDeviceEveryRank: W = 2 ranks on one GPU, one stream each, the exchange by
//     device-to-device copies (runs wherever one GPU is lent).
//   * TwoGpusNccl: one thread and GPU per rank, the exchange by NCCL (NCCL_NVLS_ENABLE=0);
//     skipped with a message when fewer than 2 GPUs; its bits must equal the one-device run.
// Checks per case (tests/kernels/cp/cp_rank_cases.h: (16,4) (32,3) (64,2) (128,2) (16,1),
// bf16 and fp8, I = 1 and 16, a request shorter than W * I, on (16,1) shorter than W): the
// planner's and the decode's status words; the GPU plan equals the host planner's
// (PlanDecodeInto) byte for byte; outputs poisoned before every run; every rank's merged
// O / LSE bit-identical to rank 0's and to a second run's; merged vs the unsharded fp64
// reference under docs/design.md's gates with no failing element.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cp/cp_rank_nccl.h"
#include "kernels/cp/cp_rank_runner.h"
#include "kernels/cp/cp_rank_setup.h"
#include "kernels/platform/collectives.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/reference.h"
#include "tests/kernels/cp/cp_rank_cases.h"

namespace mlaps {
namespace {

using cp_testing::RankCase;

// Host side of one case: the global inputs, each rank's setup, bytes and host plan, the
// unsharded reference.
struct Prepared {
  RankCase rc;
  sim::DecodeCase gc;
  std::vector<uint8_t> q_bytes;
  std::vector<cp::CpRankSetup> setups;
  std::vector<std::vector<uint8_t>> kv_bytes;      // per rank: its own cache
  std::vector<int64_t> num_pages;                  // per rank
  std::vector<std::vector<int32_t>> host_plan[6];  // [buffer][rank]: used prefix
  std::string error;
  absl::StatusOr<sim::ReferenceOutput> ref = absl::UnknownError("not run");
};

void Prepare(Prepared& p, uint64_t seed) {
  p.gc = p.rc.Case(seed);
  p.q_bytes = cp_testing::ToDeviceBytes(p.gc.q, p.gc.batch.q_dtype);
  for (int r = 0; r < p.rc.world; ++r) {
    absl::StatusOr<cp::CpRankSetup> s =
        cp::MakeCpRankSetup(p.gc.batch, p.gc.kv_indices, p.rc.Sharding(), r);
    if (!s.ok()) {
      p.error = std::string(s.status().message());
      return;
    }
    const std::vector<float> own = cp::GatherShardCache(*s, p.gc.kv_cache);
    p.num_pages.push_back(static_cast<int64_t>(own.size()) /
                          (int64_t{p.rc.interleave} * kHeadDimQk));
    p.kv_bytes.push_back(cp_testing::ToDeviceBytes(own, p.gc.batch.kv_dtype));
    // The host planner on the same resolved inputs, into capacity-sized buffers.
    const PlanCapacity& c = s->capacity;
    std::vector<int32_t> bufs[6] = {
        std::vector<int32_t>(c.qo_indptr),        std::vector<int32_t>(c.work_indptr),
        std::vector<int32_t>(8 * c.work_info),    std::vector<int32_t>(c.reduce_indptr),
        std::vector<int32_t>(c.reduce_final_map), std::vector<int32_t>(c.reduce_partial_map)};
    PlanBuffers pb{absl::MakeSpan(bufs[0]),
                   absl::MakeSpan(bufs[1]),
                   absl::MakeSpan(reinterpret_cast<WorkInfo*>(bufs[2].data()), c.work_info),
                   absl::MakeSpan(bufs[3]),
                   absl::MakeSpan(bufs[4]),
                   absl::MakeSpan(bufs[5])};
    absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(s->view.batch, s->options, pb);
    if (!sizes.ok()) {
      p.error = std::string(sizes.status().message());
      return;
    }
    const int64_t used[6] = {int64_t{sizes->num_virtual_requests} + 1,
                             int64_t{sizes->num_cu} + 1,
                             int64_t{8} * sizes->num_works,
                             int64_t{sizes->num_reduce_tiles} + 1,
                             int64_t{2} * sizes->num_reduce_tiles,
                             sizes->num_reduce_pieces};
    for (int i = 0; i < 6; ++i) {
      const int64_t n = std::min<int64_t>(used[i], static_cast<int64_t>(bufs[i].size()));
      p.host_plan[i].emplace_back(bufs[i].begin(), bufs[i].begin() + n);
    }
    p.setups.push_back(*std::move(s));
  }
  (void)(p.ref = sim::ReferenceDecode(p.gc.batch, p.gc.Inputs()));
}

// Every case prepared in parallel (the reference is the host's cost).
std::vector<Prepared>& Cases() {
  static std::vector<Prepared>* cases = [] {
    auto* out = new std::vector<Prepared>();
    for (const RankCase& rc : cp_testing::AllCases({700, 1500})) {
      Prepared p;
      p.rc = rc;
      out->push_back(std::move(p));
    }
    std::vector<std::thread> threads;
    for (size_t i = 0; i < out->size(); ++i) {
      threads.emplace_back([out, i] { Prepare((*out)[i], 1700 + i); });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }();
  return *cases;
}

cp::CpRankInputs InputsOf(const Prepared& p, int r) {
  cp::CpRankInputs in;
  in.q = p.q_bytes.data();
  in.q_bytes = static_cast<int64_t>(p.q_bytes.size());
  in.kv = p.kv_bytes[r].data();
  in.kv_bytes = static_cast<int64_t>(p.kv_bytes[r].size());
  in.num_pages = p.num_pages[r];
  in.q_scale = static_cast<float>(p.gc.q_scale);
  in.kv_scale = static_cast<float>(p.gc.kv_scale);
  return in;
}

// Runs every rank of `p` on the current device (one stream each), `runs` times; the
// results of the last run, or an error.
std::string RunOneDevice(const Prepared& p, int runs, std::vector<cp::CpRankResult>* results) {
  const int world = p.rc.world;
  std::vector<cp::CpRankBuffers> bufs(world);
  std::vector<hipStream_t> streams(world, nullptr);
  std::string err;
  for (int r = 0; r < world && err.empty(); ++r) {
    err = cp::AllocateCpRank(p.setups[r], InputsOf(p, r), &bufs[r]);
    if (err.empty() && hipStreamCreate(&streams[r]) != hipSuccess) err = "stream";
  }
  std::vector<const cp::CpRankSetup*> setups;
  std::vector<cp::CpRankBuffers*> ranks;
  std::vector<void*> st;
  for (int r = 0; r < world; ++r) {
    setups.push_back(&p.setups[r]);
    ranks.push_back(&bufs[r]);
    st.push_back(streams[r]);
  }
  results->assign(world, cp::CpRankResult{});
  for (int run = 0; run < runs && err.empty(); ++run) {
    err = cp::RunCpRanksOnOneDevice(setups, ranks, st);
    for (int r = 0; r < world && err.empty(); ++r) {
      err = cp::DownloadCpRank(p.setups[r], bufs[r], st[r], &(*results)[r]);
    }
  }
  for (int r = 0; r < world; ++r) {
    cp::FreeCpRank(&bufs[r]);
    if (streams[r] != nullptr) (void)hipStreamDestroy(streams[r]);
  }
  return err;
}

// The checks every way of running the ranks must pass.
void CheckRanks(const Prepared& p, const std::vector<cp::CpRankResult>& results, const char* how) {
  SCOPED_TRACE(p.rc.Name() + " " + how);
  ASSERT_TRUE(p.ref.ok()) << p.ref.status();
  ASSERT_EQ(static_cast<int>(results.size()), p.rc.world);
  for (int r = 0; r < p.rc.world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const cp::CpRankResult& got = results[r];
    EXPECT_EQ(got.plan_status.code, kGpuPlanOk)
        << "index " << got.plan_status.index << " value " << got.plan_status.value;
    EXPECT_EQ(got.decode_status.code, kMlaOk)
        << "cu " << got.decode_status.cu << " index " << got.decode_status.index << " value "
        << got.decode_status.value;
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(got.plan_buffers[i], p.host_plan[i][r]) << "GPU plan buffer " << i;
    }
    ASSERT_EQ(got.o.size(), results[0].o.size());
    EXPECT_EQ(std::memcmp(got.o.data(), results[0].o.data(), got.o.size() * 2), 0)
        << "merged O differs from rank 0's";
    EXPECT_EQ(std::memcmp(got.lse.data(), results[0].lse.data(), got.lse.size() * 4), 0)
        << "merged LSE differs from rank 0's";
  }
  std::vector<float> o(results[0].o.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = sim::Bf16BitsToFloat(results[0].o[i]);
  absl::StatusOr<sim::Comparison> cmp = sim::CompareOutputs(o, results[0].lse, p.ref->o, p.ref->lse,
                                                            sim::GatesFor(p.gc.batch.q_dtype));
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_TRUE(cmp->passed) << "merged vs unsharded reference: " << cmp->Summary();
  EXPECT_EQ(cmp->num_failing, 0) << cmp->Summary();
  std::printf(
      "  %-22s %-10s items r0 %4d r1 %4d | vs unsharded ref cos %.2e max_abs %.2e "
      "failing %lld lse %.2e\n",
      p.rc.Name().c_str(), how, results[0].plan_status.num_works,
      results.size() > 1 ? results[1].plan_status.num_works : -1, cmp->cos_diff, cmp->max_abs_err,
      static_cast<long long>(cmp->num_failing), cmp->lse_max_abs_err);
}

TEST(CpRankRunner, OneDeviceEveryRank) {
  ASSERT_EQ(hipSetDevice(0), hipSuccess);
  for (const Prepared& p : Cases()) {
    ASSERT_EQ(p.error, "") << p.rc.Name();
    std::vector<cp::CpRankResult> first, second;
    ASSERT_EQ(RunOneDevice(p, 1, &first), "") << p.rc.Name();
    ASSERT_EQ(RunOneDevice(p, 2, &second), "") << p.rc.Name();
    CheckRanks(p, second, "one GPU");
    for (int r = 0; r < p.rc.world; ++r) {
      EXPECT_EQ(first[r].o, second[r].o) << p.rc.Name() << " rank " << r << ": runs differ";
      EXPECT_EQ(first[r].lse.size(), second[r].lse.size());
      EXPECT_EQ(std::memcmp(first[r].lse.data(), second[r].lse.data(), first[r].lse.size() * 4), 0)
          << p.rc.Name() << " rank " << r << ": runs differ";
    }
  }
}

// One rank of the NCCL run: its own GPU, communicator, buffers and stream.
void RunNcclRank(const Prepared& p, int r, ncclUniqueId id, cp::CpRankResult* out,
                 std::string* error) {
  if (hipSetDevice(r) != hipSuccess) {
    *error = "hipSetDevice";
    return;
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t e = ncclCommInitRank(&comm, p.rc.world, id, r); e != ncclSuccess) {
    *error = std::string("ncclCommInitRank: ") + ncclGetErrorString(e);
    return;
  }
  cp::CpRankBuffers b;
  hipStream_t stream = nullptr;
  *error = cp::AllocateCpRank(p.setups[r], InputsOf(p, r), &b);
  if (error->empty() && hipStreamCreate(&stream) != hipSuccess) *error = "stream";
  if (error->empty()) *error = cp::EnqueueCpRankStepNccl(p.setups[r], b, comm, stream);
  if (error->empty()) *error = cp::DownloadCpRank(p.setups[r], b, stream, out);
  cp::FreeCpRank(&b);
  if (stream != nullptr) (void)hipStreamDestroy(stream);
  ncclCommDestroy(comm);
}

TEST(CpRankRunner, TwoGpusNccl) {
  int devices = 0;
  ASSERT_EQ(hipGetDeviceCount(&devices), hipSuccess);
  if (devices < 2) {
    GTEST_SKIP() << "the NCCL part needs 2 GPUs, found " << devices
                 << "; OneDeviceEveryRank ran the same rank runner on one GPU";
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast off (kernels/platform/collectives.h)
  for (const Prepared& p : Cases()) {
    ASSERT_EQ(p.error, "") << p.rc.Name();
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<cp::CpRankResult> results(p.rc.world);
    std::vector<std::string> errors(p.rc.world);
    std::vector<std::thread> threads;
    for (int r = 0; r < p.rc.world; ++r) {
      threads.emplace_back(RunNcclRank, std::cref(p), r, id, &results[r], &errors[r]);
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < p.rc.world; ++r) ASSERT_EQ(errors[r], "") << p.rc.Name() << " rank " << r;
    CheckRanks(p, results, "NCCL");
    ASSERT_EQ(hipSetDevice(0), hipSuccess);
    std::vector<cp::CpRankResult> one;
    ASSERT_EQ(RunOneDevice(p, 1, &one), "") << p.rc.Name();
    EXPECT_EQ(results[0].o, one[0].o) << p.rc.Name() << ": NCCL and one-device runs differ";
  }
}

}  // namespace
}  // namespace mlaps
