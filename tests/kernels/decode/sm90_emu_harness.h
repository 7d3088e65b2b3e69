// The harness of the sm90 wgmma kernel tests on the CPU emulation (mla_decode_sm90_emu_test.cc):
// one kernel under test, run with the reduce kernel in the emulation, checked against the
// executor, the fp64 reference and the plan's trace, and run again with the low or the high
// warpgroups as far ahead as their waits allow, or the producer's second copy warp behind (the
// same bits required).
//
// A textual header: include it after tests/kernels/emu/hip_host_emulation.h and the device
// headers (it launches mla::MlaReduceKernel through mlaps_emu::Launch).
#ifndef MLAPS_TESTS_KERNELS_DECODE_SM90_EMU_HARNESS_H_
#define MLAPS_TESTS_KERNELS_DECODE_SM90_EMU_HARNESS_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/decode/mla_decode_staging.h"
#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/work_plan.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/reference.h"
#include "tests/kernels/decode/decode_checks.h"
#include "tests/kernels/decode/emu_reduce.h"
#include "tests/kernels/decode/mla_decode_testing.h"

namespace mlaps::testing {

// One sm90 decode kernel: its launch shape, its online-softmax step (the executor's kv_block)
// and its body for one emulated thread.
struct Sm90KernelUnderTest {
  unsigned threads;
  size_t smem_bytes;
  int kv_block;
  MlaDecodePath path;
  void (*body)(const MlaDecodeParams& p, bool fp8);
};

// The kv cache's TMA map as LaunchMlaDecode encodes it on the GPU (rows of 576 elements,
// 64 x 64 boxes, swizzled as mla::KvMapSwizzleBytes says), for the kernels that take one;
// raw_e4m3: the kernel keeps e4m3 rows unwidened (the narrow kernel).
inline mla::TmaMap KvTmaMap(const MlaDecodeParams& p, bool fp8, bool raw_e4m3 = false) {
  mla::TmaMap map;
  const int64_t rows = p.num_pages * p.page_size;
  mlaps_emu::EncodeTmaMap2D(&map, p.kv_cache, fp8 ? 1 : 2, kHeadDimQk, rows > 0 ? rows : 1,
                            kHeadDimQk * (fp8 ? 1 : 2), 64, 64,
                            mla::KvMapSwizzleBytes(fp8, raw_e4m3));
  return map;
}

// The warp that Schedule::kOneWarpLast holds back: the producer warpgroup's second copy warp
// (threads 32-63 of warpgroup 2), which issues no TMA: a protocol in which nothing waits for its
// arrivals lets it fall phases behind its own parity waits (a hang session 30's review found in
// a producer variant since deleted; notes.md).
constexpr int kLaggingWarp = 2 * 128 / 32 + 1;

// Decode + reduce for `c` under `plan` in the emulation, outputs poisoned first, the block's
// threads run in `schedule`'s order. o_fp32: final O as fp32 (MlaDecodeParams::o_fp32).
// merge: the decode merges the split tiles itself (MlaDecodeParams::merge), no reduce.
inline DecodeRunResult RunSm90(const Sm90KernelUnderTest& k, const sim::DecodeCase& c,
                               const WorkPlan& plan,
                               mlaps_emu::Schedule schedule = mlaps_emu::Schedule::kRoundRobin,
                               const CpRank* cp = nullptr, bool o_fp32 = false,
                               bool merge = false) {
  const bool fp8 = c.batch.q_dtype == DType::kFp8;
  HostDecodeRun run(c, plan, cp, o_fp32, /*mutate=*/nullptr, merge);
  MlaDecodeParams& p = run.decode;
  p.path = k.path;
  return ReduceAndCollect(run, mlaps_emu::Launch(
                                   dim3(plan.num_cu), dim3(k.threads), k.smem_bytes,
                                   [&] { k.body(p, fp8); }, schedule, kLaggingWarp));
}

// The same run with the warpgroups' relative progress skewed both ways, and with the producer's
// second copy warp (kLaggingWarp) behind the others as far as their waits allow: a kernel without
// races writes the same bits, status and trace.
// With a plan that splits tiles, the same again with the decode merging them itself
// (MlaDecodeParams::merge): the same bits as the reduce wrote, every counter back at 0.
inline void ExpectScheduleIndependent(const Sm90KernelUnderTest& k, const sim::DecodeCase& c,
                                      const WorkPlan& plan, const DecodeRunResult& round_robin,
                                      const CpRank* cp = nullptr, bool o_fp32 = false) {
  for (bool merge : {false, true}) {
    if (merge && plan.num_reduce_tiles() == 0) continue;
    for (mlaps_emu::Schedule schedule :
         {mlaps_emu::Schedule::kRoundRobin, mlaps_emu::Schedule::kLowWarpgroupsFirst,
          mlaps_emu::Schedule::kHighWarpgroupsFirst, mlaps_emu::Schedule::kOneWarpLast}) {
      if (!merge && schedule == mlaps_emu::Schedule::kRoundRobin) continue;  // round_robin itself
      SCOPED_TRACE(schedule == mlaps_emu::Schedule::kRoundRobin ? "round robin"
                   : schedule == mlaps_emu::Schedule::kLowWarpgroupsFirst
                       ? "low warpgroups run ahead"
                   : schedule == mlaps_emu::Schedule::kHighWarpgroupsFirst
                       ? "high warpgroups run ahead"
                       : "the producer's second copy warp behind");
      SCOPED_TRACE(merge ? "split tiles merged by the decode" : "split tiles merged by the reduce");
      const DecodeRunResult got = RunSm90(k, c, plan, schedule, cp, o_fp32, merge);
      ASSERT_EQ(got.error, "");
      EXPECT_EQ(got.status.code, round_robin.status.code);
      EXPECT_TRUE(SameBits(got.o, round_robin.o)) << "O differs from the round-robin run";
      EXPECT_TRUE(SameBits(got.lse, round_robin.lse)) << "LSE differs from the round-robin run";
      EXPECT_EQ(sim::FormatTrace(got.trace), sim::FormatTrace(round_robin.trace));
      for (size_t t = 0; t < got.merge_counters.size(); ++t) {
        EXPECT_EQ(got.merge_counters[t], 0) << "merge counter " << t << " left set";
      }
    }
  }
}

inline sim::ExecutorOptions ExecutorOptionsFor(const Sm90KernelUnderTest& k) {
  sim::ExecutorOptions options;
  options.kv_block = k.kv_block;
  return options;
}

// The emulated kernels vs the executor (same plan) and the fp64 reference under the dtype's
// gates, the trace vs the plan's, the same bits under skewed schedules.
inline void CheckSm90Case(const Sm90KernelUnderTest& k, const sim::DecodeCase& c,
                          const WorkPlan& plan, const std::string& name) {
  SCOPED_TRACE(name);
  const DecodeRunResult got = RunSm90(k, c, plan);
  const RunCheck check = ExpectRunMatchesPlan(c.batch, plan, c.Inputs(), ExecutorOptionsFor(k),
                                              sim::GatesFor(c.batch.q_dtype), got);
  std::printf("%s: %d items on %d CUs, %d split tiles; vs executor %s\n", name.c_str(),
              plan.num_works(), plan.num_cu, plan.num_reduce_tiles(), check.vs_executor.c_str());
  if (got.error.empty()) ExpectScheduleIndependent(k, c, plan, got);
}

// One item of 7 kv blocks (H `heads`, qlen 1, one CU) whose token 300 (block 4) has its K row
// (and V) scaled by 8: its logits jump far past every row's max so far (by more than the lazy
// reference's slack of 8 in base 2 for many rows), so O is rescaled mid-item, after four blocks
// of sums, by the factors of the rows that moved only (StepLazyRunningMax, LazyRowStep).
inline sim::DecodeCase MaxJumpsMidItem(DType dtype, int heads, uint64_t seed) {
  const Batch batch = MakeUniformBatch(Arch::kSm90, dtype, heads, 1, 1, 420, 64);
  sim::DecodeCase c = sim::MakeDecodeCase(batch, seed);
  const int64_t row = int64_t{c.kv_indices[300 / 64]} * batch.page_size + 300 % 64;
  for (int d = 0; d < kHeadDimQk; ++d) c.kv_cache[row * kHeadDimQk + d] *= 8.0f;  // exact
  return c;
}

// A bad page id (`value` at kv_indices[index]) under `plan`: the kernel reports it with its
// index and value in the status word (and reads zeros for it).
inline void ExpectBadPageReported(const Sm90KernelUnderTest& k, const Batch& batch, uint64_t seed,
                                  int index, int32_t value, const WorkPlan& plan) {
  sim::DecodeCase c = sim::MakeDecodeCase(batch, seed);
  c.kv_indices[index] = value;
  const DecodeRunResult got = RunSm90(k, c, plan);
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaBadPageId);
  EXPECT_EQ(got.status.index, index);
  EXPECT_EQ(got.status.value, value);
}

// Items with an empty kv range (no kv block: the producer loads no Q tile for them) back to
// back after a real one on CU 0, each writing unused partial rows: the run must not deadlock
// and must write the same O and LSE as the plan without them, with the producer as far ahead
// as its waits allow (it must not complete two q_full phases ahead of the consumers).
inline void ExpectEmptyItemsKeepTheQTileInStep(const Sm90KernelUnderTest& k,
                                               const sim::DecodeCase& c, const WorkPlan& plan) {
  ASSERT_GT(plan.work_indptr[1], plan.work_indptr[0]);
  WorkPlan padded = plan;
  WorkInfo empty = plan.work_info[plan.work_indptr[0]];
  empty.kv_end = empty.kv_start;
  empty.partial_qo_loc = static_cast<int32_t>(staging::PartialRowsFor(plan));
  const int at = plan.work_indptr[0] + 1;
  for (int e = 0; e < 3; ++e) {
    padded.work_info.insert(padded.work_info.begin() + at, empty);
    empty.partial_qo_loc += empty.qo_end - empty.qo_start;
  }
  for (size_t cu = 1; cu < padded.work_indptr.size(); ++cu) padded.work_indptr[cu] += 3;
  const DecodeRunResult want = RunSm90(k, c, plan);
  ASSERT_EQ(want.error, "");
  const DecodeRunResult got = RunSm90(k, c, padded, mlaps_emu::Schedule::kHighWarpgroupsFirst);
  ASSERT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaOk);
  EXPECT_TRUE(SameBits(got.o, want.o)) << "O differs with the empty items";
  EXPECT_TRUE(SameBits(got.lse, want.lse)) << "LSE differs with the empty items";
}

// The decode's own merge (MlaDecodeParams::merge) waits for every piece: only the first
// `blocks` CUs of `plan` run (the others' items never do), so a split tile with a piece on a
// later CU must stay unmerged (its O and LSE rows still poisoned, its counter at the pieces
// that ran), and a tile whose pieces all ran must be merged to the full run's bits. Blocks
// run one after another in the emulation, so a merge by any piece but the last would leave
// its output in place here.
inline void ExpectMergeWaitsForEveryPiece(const Sm90KernelUnderTest& k, const sim::DecodeCase& c,
                                          const WorkPlan& plan, int blocks) {
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  const bool fp8 = c.batch.q_dtype == DType::kFp8;
  const DecodeRunResult full =
      RunSm90(k, c, plan, mlaps_emu::Schedule::kRoundRobin, nullptr, false, /*merge=*/true);
  ASSERT_EQ(full.error, "");
  ASSERT_EQ(full.status.code, kMlaOk);
  HostDecodeRun run(c, plan, nullptr, false, nullptr, /*merge=*/true);
  run.decode.path = k.path;
  run.decode.trace = nullptr;
  run.decode.trace_capacity = 0;
  const DecodeRunResult got =
      ReduceAndCollect(run, mlaps_emu::Launch(dim3(blocks), dim3(k.threads), k.smem_bytes,
                                              [&] { k.body(run.decode, fp8); }));
  ASSERT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaOk);
  // The pieces each tile has on the CUs that ran.
  std::vector<int> ran(plan.num_reduce_tiles(), 0);
  int merged = 0, unmerged = 0;
  for (int t = 0; t < plan.num_reduce_tiles(); ++t) {
    const int32_t qs = plan.reduce_final_map[2 * t];
    for (int cu = 0; cu < blocks; ++cu) {
      for (int w = plan.work_indptr[cu]; w < plan.work_indptr[cu + 1]; ++w) {
        ran[t] += plan.work_info[w].partial_qo_loc >= 0 && plan.work_info[w].qo_start == qs;
      }
    }
    const int pieces = plan.reduce_indptr[t + 1] - plan.reduce_indptr[t];
    const bool complete = ran[t] == pieces;
    EXPECT_EQ(got.merge_counters[t], complete ? 0 : ran[t]) << "tile " << t;
    // The tile's O / LSE rows: folded q tokens [qs, qe) of virtual request v.
    const int r = plan.head_fold, hg = c.batch.num_heads / r;
    for (int32_t fq = qs; fq < plan.reduce_final_map[2 * t + 1]; ++fq) {
      int v = 0;
      while (plan.qo_indptr[v + 1] <= fq) ++v;
      const int b = v / r, g = v % r;
      const int64_t token = c.batch.qo_indptr[b] + (fq - plan.qo_indptr[v]);
      for (int hh = 0; hh < hg; ++hh) {
        const int64_t row = token * c.batch.num_heads + g * hg + hh;
        for (int d = 0; d < kHeadDimV; ++d) {
          const int64_t at = row * kHeadDimV + d;
          if (complete) {
            ASSERT_TRUE(SameBits({&got.o[at], 1}, {&full.o[at], 1})) << "tile " << t << " O " << at;
          } else {
            ASSERT_TRUE(std::isnan(got.o[at])) << "tile " << t << " merged early, O " << at;
          }
        }
        if (complete) {
          EXPECT_TRUE(SameBits({&got.lse[row], 1}, {&full.lse[row], 1})) << "tile " << t;
        } else {
          EXPECT_TRUE(std::isnan(got.lse[row])) << "tile " << t << " merged early, LSE " << row;
        }
      }
    }
    (complete ? merged : unmerged) += 1;
  }
  EXPECT_GT(unmerged, 0) << "every tile completed on the first " << blocks << " CUs";
  std::printf("merge with %d of %d CUs: %d tiles merged, %d left for their last piece\n", blocks,
              plan.num_cu, merged, unmerged);
}

// A plan whose reduce_final_map names no split tile by a piece's q tokens (tile 0's shifted
// past every token) cannot be merged by the decode: reported as kMlaBadMergePiece with the
// piece's partial rows, nothing written out of bounds.
inline void ExpectMergeReportsAPieceWithoutATile(const Sm90KernelUnderTest& k,
                                                 const sim::DecodeCase& c, const WorkPlan& plan) {
  ASSERT_GT(plan.num_reduce_tiles(), 0);
  const bool fp8 = c.batch.q_dtype == DType::kFp8;
  HostDecodeRun run(
      c, plan, nullptr, false,
      [](std::vector<int32_t>&, const BatchArena&, std::vector<int32_t>& words,
         const PlanArena& pa) { words[pa.reduce_final_map] += 1 << 20; },
      /*merge=*/true);
  run.decode.path = k.path;
  const DecodeRunResult got =
      ReduceAndCollect(run, mlaps_emu::Launch(dim3(plan.num_cu), dim3(k.threads), k.smem_bytes,
                                              [&] { k.body(run.decode, fp8); }));
  ASSERT_EQ(got.error, "");
  EXPECT_EQ(got.status.code, kMlaBadMergePiece);
  EXPECT_GE(got.status.value, 0) << "the piece's partial rows";
}

// CP round-robin (W ranks, I tokens a sub-page), bf16 unless asked: every rank runs its shard with
// fp32 final O against the executor (final_o_bf16 = false) and the fp64 reference on the same view
// with the CP hook (rows that see none of the rank's tokens exactly O = 0, LSE = -inf), then
// the ranks merged against the unsharded reference.
inline void CheckSm90CpRanks(const Sm90KernelUnderTest& k, int heads, int qlen,
                             const std::vector<int>& kv_lens, int world, int interleave,
                             uint64_t seed, DType dtype = DType::kBf16) {
  const int page = interleave == 1 ? 16 : 64;
  const Batch global = MakeVarlenBatch(Arch::kSm90, dtype, heads, kv_lens, qlen, page);
  const sim::DecodeCase gc = sim::MakeDecodeCase(global, seed);
  const CpSharding s{world, interleave};
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
    const sim::DecodeCase c = MakeCpRankCase(gc, *view);
    const CpRank cp = MakeCpRank(*view, s, rank);
    const WorkPlan plan = PlanForTest(view->batch, 3);
    ASSERT_NE(plan.variant.find("cprr"), std::string::npos) << plan.variant;
    const DecodeRunResult got =
        RunSm90(k, c, plan, mlaps_emu::Schedule::kRoundRobin, &cp, /*o_fp32=*/true);
    sim::CpGlobalPositions hook;
    hook.global_position = [&](int, int64_t j) { return CpGlobalPosition(rank, j, s); };
    hook.global_kv_len = view->global_kv_len;
    sim::DecodeInputs inputs = c.Inputs();
    inputs.cp = &hook;
    sim::ExecutorOptions options = ExecutorOptionsFor(k);
    options.final_o_bf16 = false;  // fp32 final O, as the kernel writes it with o_fp32
    const RunCheck check =
        ExpectRunMatchesPlan(c.batch, plan, inputs, options, sim::GatesFor(dtype), got);
    ASSERT_EQ(got.error, "");
    empty_rows += check.empty_rows;
    std::printf("cp %s: %d items, %d split tiles; vs executor %s\n", name.c_str(), plan.num_works(),
                plan.num_reduce_tiles(), check.vs_executor.c_str());
    ExpectScheduleIndependent(k, c, plan, got, &cp, /*o_fp32=*/true);
    rank_o[rank] = got.o;
    rank_lse[rank] = got.lse;
  }
  EXPECT_GT(empty_rows, 0);  // the short request leaves ranks / tokens with nothing
  SCOPED_TRACE(shape + " merged");
  const std::string merged =
      ExpectMergedRanksMatchReference(global, gc.Inputs(), rank_o, rank_lse, sim::GatesFor(dtype));
  std::printf("cp %s merged vs unsharded reference: %s\n", shape.c_str(), merged.c_str());
}

}  // namespace mlaps::testing

#endif  // MLAPS_TESTS_KERNELS_DECODE_SM90_EMU_HARNESS_H_
