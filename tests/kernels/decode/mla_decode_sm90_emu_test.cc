// The sm90 wgmma decode kernel (kernels/decode/mla_decode_sm90.h, MlaDecodeSm90Kernel: bf16 and
// fp8, 64-row tiles, a producer and two consumer warpgroups) and the reduce kernel run on the
// CPU through tests/kernels/emu
// (fibers for threads; emulated wgmma with descriptor-decoded, swizzled shared memory operands
// and register fragments; mbarriers; cp.async completing on mbarriers; named barriers), against
// the simulator's executor (sim::ExecutePlan, kv blocks of the kernel's SmemSm90::kTokens) and
// the fp64 reference under docs/design.md's gates, with the kernel's trace compared with the
// plan's, as mla_decode_emu_test.cc does for the mma.sync kernel. Every case runs again with
// either warpgroup running as far ahead of the other as its waits allow (mlaps_emu::Schedule)
// and must write the same bits. The emulation aborts with a message where the kernel breaks
// a PTX rule it checks (poisoned or rewritten wgmma operands, misaligned swizzle atoms,
// accumulators touched in flight, a wgmma chain without a fence) and reports deadlocks.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "metadata/work_plan.h"
#include "sim/cp_merge.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/numerics.h"
#include "sim/plan_checker.h"
#include "sim/reference.h"
#include "sim/trace.h"
#include "tests/kernels/decode/mla_decode_testing.h"

// Last, in this order: the emulation defines the device dialect (its macros must not reach
// the library headers above), then the device code compiles on top of it.
// clang-format off
#include "tests/kernels/emu/hip_host_emulation.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90.h"
#include "kernels/decode/mla_reduce_device.h"
// clang-format on

namespace mlaps {
namespace {

WorkPlan Plan(const Batch& batch, int num_cu) {
  PlanOptions options;
  options.num_cu = num_cu;
  options.fixed_overhead = 1;
  absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : WorkPlan{};
}

struct EmuResult {
  std::vector<float> o, lse;  // O: bf16 values, or fp32 with o_fp32
  MlaStatus status{};
  sim::Trace trace;
  std::string error;
};

// Runs the sm90 decode kernel (256 threads, SmemSm90::kBytes of dynamic shared memory) and the
// reduce for `c` under `plan` in the emulation, outputs poisoned first, the block's threads
// run in `schedule`'s order. o_fp32: final O as fp32 (MlaDecodeParams::o_fp32, CP ranks).
EmuResult RunSm90(const sim::DecodeCase& c, const WorkPlan& plan,
                  mlaps_emu::Schedule schedule = mlaps_emu::Schedule::kRoundRobin,
                  const testing::CpRank* cp = nullptr, bool o_fp32 = false) {
  testing::HostDecodeRun run(c, plan, cp, o_fp32);
  MlaDecodeParams& p = run.decode;
  p.path = kMlaPathWgmma;
  const MlaReduceParams& rp = run.reduce;
  EmuResult r;
  const bool fp8 = c.batch.q_dtype == DType::kFp8;
  r.error = mlaps_emu::Launch(
      dim3(plan.num_cu), dim3(mla::kSm90Threads), mla::SmemSm90::kBytes,
      [&] {
        if (fp8) {
          mla::MlaDecodeSm90Kernel<true>(p);
        } else {
          mla::MlaDecodeSm90Kernel<false>(p);
        }
      },
      schedule);
  if (r.error.empty() && rp.reduce_tiles_capacity > 0) {
    r.error = mlaps_emu::Launch(dim3(rp.reduce_tiles_capacity, mla::kReduceRowSplit),
                                dim3(mla::kReduceThreads), 0, [&] { mla::MlaReduceKernel(rp); });
  }
  r.o = run.O();
  r.lse = run.Lse();
  r.status = run.Status();
  r.trace = run.Trace();
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// The same run with the warpgroups' relative progress skewed both ways (one warpgroup runs as
// far ahead as its waits allow): a kernel without races writes the same bits, status and trace.
void ExpectScheduleIndependent(const sim::DecodeCase& c, const WorkPlan& plan,
                               const EmuResult& round_robin, const testing::CpRank* cp = nullptr,
                               bool o_fp32 = false) {
  for (mlaps_emu::Schedule schedule :
       {mlaps_emu::Schedule::kLowWarpgroupsFirst, mlaps_emu::Schedule::kHighWarpgroupsFirst}) {
    const bool low = schedule == mlaps_emu::Schedule::kLowWarpgroupsFirst;
    SCOPED_TRACE(low ? "warpgroup 0 runs ahead" : "warpgroup 1 runs ahead");
    const EmuResult got = RunSm90(c, plan, schedule, cp, o_fp32);
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.status.code, round_robin.status.code);
    EXPECT_TRUE(SameBits(got.o, round_robin.o)) << "O differs from the round-robin run";
    EXPECT_TRUE(SameBits(got.lse, round_robin.lse)) << "LSE differs from the round-robin run";
    EXPECT_EQ(sim::FormatTrace(got.trace), sim::FormatTrace(round_robin.trace));
  }
}

sim::ExecutorOptions ExecutorOptionsForSm90() {
  sim::ExecutorOptions options;
  options.kv_block = mla::SmemSm90::kTokens;  // the kernel's online-softmax step
  return options;
}

// The emulated kernels vs the executor (same plan) and vs the fp64 reference, each under the
// bf16 gates; the trace vs the plan's, as text; the same bits under skewed schedules.
void CheckCase(const sim::DecodeCase& c, const WorkPlan& plan, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(sim::CheckPlan(c.batch, plan).empty());
  const EmuResult got = RunSm90(c, plan);
  ASSERT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaOk)
      << "index " << got.status.index << " value " << got.status.value;
  absl::StatusOr<sim::ExecutorOutput> exec =
      sim::ExecutePlan(c.batch, plan, c.Inputs(), ExecutorOptionsForSm90());
  ASSERT_TRUE(exec.ok()) << exec.status();
  absl::StatusOr<sim::Comparison> vs_exec =
      sim::CompareOutputs(got.o, got.lse, sim::ToDouble(exec->o), sim::ToDouble(exec->lse),
                          sim::GatesFor(c.batch.q_dtype));
  ASSERT_TRUE(vs_exec.ok());
  EXPECT_TRUE(vs_exec->passed) << "vs executor: " << vs_exec->Summary();
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(c.batch, c.Inputs());
  ASSERT_TRUE(ref.ok());
  absl::StatusOr<sim::Comparison> vs_ref =
      sim::CompareOutputs(got.o, got.lse, ref->o, ref->lse, sim::GatesFor(c.batch.q_dtype));
  ASSERT_TRUE(vs_ref.ok());
  EXPECT_TRUE(vs_ref->passed) << "vs reference: " << vs_ref->Summary();
  absl::StatusOr<sim::Trace> want = sim::TraceOfPlan(plan);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(sim::FormatTrace(got.trace), sim::FormatTrace(*want));
  std::printf("%s: %d items on %d CUs, %d split tiles; vs executor %s\n", name.c_str(),
              plan.num_works(), plan.num_cu, plan.num_reduce_tiles(), vs_exec->Summary().c_str());
  ExpectScheduleIndependent(c, plan, got);
}

TEST(MlaDecodeSm90EmuTest, Heads16Qlen1VarlenPage16) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {37, 100, 64}, 1, 16);
  CheckCase(sim::MakeDecodeCase(batch, 1), Plan(batch, 4), "H16 q1 page16 cu4");
}

TEST(MlaDecodeSm90EmuTest, Heads16Qlen4CausalPage1) {
  // MTP: 4 causal tokens of 16 heads a tile; varlen lengths end blocks mid-page.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {33, 90}, 4, 1);
  CheckCase(sim::MakeDecodeCase(batch, 2), Plan(batch, 2), "H16 q4 page1 cu2");
}

TEST(MlaDecodeSm90EmuTest, Heads32Qlen2UniformPage64) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 32, 3, 2, 70, 64);
  CheckCase(sim::MakeDecodeCase(batch, 3, /*q_scale=*/0.7, /*kv_scale=*/1.3), Plan(batch, 3),
            "H32 q2 uniform page64 cu3 (scales)");
}

TEST(MlaDecodeSm90EmuTest, Heads64Qlen1VarlenPage64) {
  // Full 64-row tiles; a request shorter than one kv block.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {70, 5, 130}, 1, 64);
  CheckCase(sim::MakeDecodeCase(batch, 4), Plan(batch, 3), "H64 q1 page64 cu3");
}

TEST(MlaDecodeSm90EmuTest, Heads128FoldedUniformPage16) {
  // H = 128 folds into 2 groups of 64 heads (head_fold 2).
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 128, 2, 1, 80, 16);
  const WorkPlan plan = Plan(batch, 3);
  ASSERT_EQ(plan.head_fold, 2);
  CheckCase(sim::MakeDecodeCase(batch, 5), plan, "H128 q1 page16 cu3");
}

TEST(MlaDecodeSm90EmuTest, MediumVarlenBatch) {
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {150, 9, 64, 200, 33, 97, 1, 128}, 1, 16);
  CheckCase(sim::MakeDecodeCase(batch, 6), Plan(batch, 8), "H16 q1 batch8 page16 cu8");
}

TEST(MlaDecodeSm90EmuTest, ManySplitsTakeTheManyPiecesReduce) {
  // One long request over 6 CUs: every tile is split into >3 pieces (partials + reduce).
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 200, 1);
  const WorkPlan plan = Plan(batch, 6);
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  ASSERT_GT(plan.reduce_indptr[1] - plan.reduce_indptr[0], 3);
  CheckCase(sim::MakeDecodeCase(batch, 7), plan, "H16 q1 cu6 (many pieces)");
}

TEST(MlaDecodeSm90EmuTest, LongItemWrapsTheKvRing) {
  // One CU: an item of 11 kv blocks, so the four-slot ring and the two P buffers wrap.
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 1, 1, 330, 64);
  CheckCase(sim::MakeDecodeCase(batch, 8), Plan(batch, 1), "H64 q1 ctx330 cu1");
}

TEST(MlaDecodeSm90EmuTest, SparsePerTokenWithEmptyRows) {
  // Sparse per-token layout: one q token per sequence, gathered slots (page size 1), no
  // causal mask, a graph-padded row with no kv (O = 0, LSE = -inf from the decode kernel).
  Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {1, 70, 0, 33}, 1, 1);
  batch.sparse_topk = 2048;
  CheckCase(sim::MakeDecodeCase(batch, 9), Plan(batch, 3), "sparse H64 cu3");
}

TEST(MlaDecodeSm90EmuTest, Fp8MtpPartialTilesWithScales) {
  // fp8 e4m3fn Q and KV under per-tensor scales; (32, 3) gives a 64-row and a 32-row tile.
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 32, {70, 200}, 3, 64);
  CheckCase(sim::MakeDecodeCase(batch, 21, /*q_scale=*/0.5, /*kv_scale=*/2.0), Plan(batch, 3),
            "fp8 H32 q3 page64 cu3 (scales)");
}

TEST(MlaDecodeSm90EmuTest, Fp8Heads128FoldedPage1) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {150, 37}, 1, 1);
  CheckCase(sim::MakeDecodeCase(batch, 22, 0.7, 1.3), Plan(batch, 2), "fp8 H128 q1 page1 cu2");
}

TEST(MlaDecodeSm90EmuTest, ManyItemsOnOneBlockKeepTheRingInStep) {
  // One CU walks six items of 1 to 9 kv blocks each: odd block counts hand the next item's
  // first block to the other consumer, Q reloads between items, the two slots wrap many times.
  const Batch batch =
      MakeVarlenBatch(Arch::kSm90, DType::kBf16, 64, {560, 64, 129, 1, 300, 65}, 1, 16);
  const WorkPlan plan = Plan(batch, 1);
  ASSERT_EQ(plan.num_works(), 6);
  CheckCase(sim::MakeDecodeCase(batch, 23), plan, "H64 q1 6 items cu1");
}

TEST(MlaDecodeSm90EmuTest, Fp8LongSplitItems) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 2, 2, 900, 64);
  CheckCase(sim::MakeDecodeCase(batch, 24, 0.5, 2.0), Plan(batch, 3), "fp8 H64 q2 ctx900 cu3");
}

// A bf16 value beyond f16's range (the kernel's tiles are f16) is reported, not silently lost.
TEST(MlaDecodeSm90EmuTest, StatusWordReportsABf16ValueBeyondF16) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 70, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 25);
  // Token 5 of the request's first page, dim 7 (a row the kernel reads).
  const int64_t at = (int64_t{c.kv_indices[0]} * batch.page_size + 5) * kHeadDimQk + 7;
  c.kv_cache[at] = 70144.0f;  // a bf16 (0x4789); f16 tops out at 65504
  const EmuResult got = RunSm90(c, Plan(batch, 1));
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaF16Range);
  EXPECT_EQ(got.status.value, 0x4789);
  // 65280 (0x477f) is the largest bf16 that f16 holds: no report.
  c.kv_cache[at] = -65280.0f;
  EXPECT_EQ(RunSm90(c, Plan(batch, 1)).status.code, kMlaOk);
  // The same for Q.
  c.q[3 * kHeadDimQk + 100] = -70144.0f;
  EXPECT_EQ(RunSm90(c, Plan(batch, 1)).status.code, kMlaF16Range);
}

// CP round-robin (W ranks, I tokens a sub-page): every rank runs its shard with fp32 final O,
// against the executor (final_o_bf16 = false) and the fp64 reference on the same view with
// the CP hook; the trace against the plan's; rows that see none of the rank's tokens exactly
// O = 0, LSE = -inf. Then the ranks' O / LSE merged (sim::MergeCpRanks), rounded to bf16 once,
// against the unsharded reference: no element may fail. As mla_decode_emu_test.cc's.
void CheckCpRanks(int heads, int qlen, const std::vector<int>& kv_lens, int world, int interleave,
                  uint64_t seed) {
  const int page = interleave == 1 ? 16 : 64;
  const Batch global = MakeVarlenBatch(Arch::kSm90, DType::kBf16, heads, kv_lens, qlen, page);
  const sim::DecodeCase gc = sim::MakeDecodeCase(global, seed);
  const CpSharding s{world, interleave};
  const int64_t rows = global.total_q_tokens() * global.num_heads;
  std::vector<std::vector<float>> rank_o(world), rank_lse(world);
  int64_t empty_rows = 0;
  const std::string shape = "H" + std::to_string(heads) + " q" + std::to_string(qlen) + " W" +
                            std::to_string(world) + " I" + std::to_string(interleave);
  for (int rank = 0; rank < world; ++rank) {
    const std::string name = shape + " rank " + std::to_string(rank);
    SCOPED_TRACE(name);
    absl::StatusOr<CpShardView> view = MakeCpShardView(global, gc.kv_indices, s, rank);
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_TRUE(view->batch.cp_round_robin);
    const sim::DecodeCase c = testing::MakeCpRankCase(gc, *view);
    const testing::CpRank cp = testing::MakeCpRank(*view, s, rank);
    const WorkPlan plan = Plan(view->batch, 3);
    ASSERT_NE(plan.variant.find("cprr"), std::string::npos) << plan.variant;
    ASSERT_TRUE(sim::CheckPlan(c.batch, plan).empty());
    const EmuResult got = RunSm90(c, plan, mlaps_emu::Schedule::kRoundRobin, &cp, /*o_fp32=*/true);
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.status.code, kMlaOk)
        << "index " << got.status.index << " value " << got.status.value;
    sim::CpGlobalPositions hook;
    hook.global_position = [&](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
    hook.global_kv_len = view->global_kv_len;
    sim::DecodeInputs inputs = c.Inputs();
    inputs.cp = &hook;
    sim::ExecutorOptions options = ExecutorOptionsForSm90();
    options.final_o_bf16 = false;  // fp32 final O, as the kernel writes it with o_fp32
    absl::StatusOr<sim::ExecutorOutput> exec = sim::ExecutePlan(c.batch, plan, inputs, options);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const sim::Gates gates = sim::GatesFor(DType::kBf16);
    absl::StatusOr<sim::Comparison> vs_exec = sim::CompareOutputs(
        got.o, got.lse, sim::ToDouble(exec->o), sim::ToDouble(exec->lse), gates);
    ASSERT_TRUE(vs_exec.ok());
    EXPECT_TRUE(vs_exec->passed) << "vs executor: " << vs_exec->Summary();
    absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(c.batch, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status();
    absl::StatusOr<sim::Comparison> vs_ref =
        sim::CompareOutputs(got.o, got.lse, ref->o, ref->lse, gates);
    ASSERT_TRUE(vs_ref.ok());
    EXPECT_TRUE(vs_ref->passed) << "vs reference: " << vs_ref->Summary();
    absl::StatusOr<sim::Trace> want = sim::TraceOfPlan(plan);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(sim::FormatTrace(got.trace), sim::FormatTrace(*want));
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t row = 0; row < static_cast<int64_t>(got.lse.size()); ++row) {
      if (ref->lse[row] != -std::numeric_limits<double>::infinity()) {
        EXPECT_NE(got.lse[row], -inf) << "row " << row;
        continue;
      }
      ++empty_rows;
      EXPECT_EQ(got.lse[row], -inf) << "row " << row;
      for (int d = 0; d < kHeadDimV; ++d) {
        ASSERT_EQ(got.o[row * kHeadDimV + d], 0.0f) << "row " << row << " dim " << d;
      }
    }
    std::printf("cp %s: %d items, %d split tiles; vs executor %s\n", name.c_str(), plan.num_works(),
                plan.num_reduce_tiles(), vs_exec->Summary().c_str());
    ASSERT_EQ(static_cast<int64_t>(got.o.size()), rows * kHeadDimV);
    ASSERT_EQ(static_cast<int64_t>(got.lse.size()), rows);
    ExpectScheduleIndependent(c, plan, got, &cp, /*o_fp32=*/true);
    rank_o[rank] = got.o;
    rank_lse[rank] = got.lse;
  }
  EXPECT_GT(empty_rows, 0);  // the short request leaves ranks / tokens with nothing
  SCOPED_TRACE(shape + " merged");
  std::vector<absl::Span<const float>> os(rank_o.begin(), rank_o.end());
  std::vector<absl::Span<const float>> ls(rank_lse.begin(), rank_lse.end());
  std::vector<float> merged_o(rows * kHeadDimV), merged_lse(rows);
  ASSERT_TRUE(sim::MergeCpRanks(os, ls, rows, kHeadDimV, absl::MakeSpan(merged_o),
                                absl::MakeSpan(merged_lse))
                  .ok());
  for (float& x : merged_o) x = sim::RoundToBf16(x);  // the decode output's one rounding
  absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(global, gc.Inputs());
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<sim::Comparison> merged =
      sim::CompareOutputs(merged_o, merged_lse, ref->o, ref->lse, sim::GatesFor(DType::kBf16));
  ASSERT_TRUE(merged.ok());
  EXPECT_TRUE(merged->passed) << "merged vs unsharded reference: " << merged->Summary();
  EXPECT_EQ(merged->num_failing, 0) << merged->Summary();
  std::printf("cp %s merged vs unsharded reference: %s\n", shape.c_str(),
              merged->Summary().c_str());
}

TEST(MlaDecodeSm90EmuTest, CpRoundRobinW2I16) { CheckCpRanks(16, 2, {2, 75, 40}, 2, 16, 101); }

TEST(MlaDecodeSm90EmuTest, CpRoundRobinW3I1) { CheckCpRanks(64, 1, {1, 70, 33}, 3, 1, 102); }

// A bad page id is reported through the status word (the copy is zero-filled, nothing out of
// bounds is read).
TEST(MlaDecodeSm90EmuTest, StatusWordReportsABadPage) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {40, 20}, 2, 16);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, 10);
  c.kv_indices[1] = 1 << 30;
  const EmuResult got = RunSm90(c, Plan(batch, 2));
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaBadPageId) << "index " << got.status.index;
}

}  // namespace
}  // namespace mlaps
