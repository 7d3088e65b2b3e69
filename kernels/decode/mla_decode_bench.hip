// MLA decode + reduce on the benchmark shapes: per shape, microseconds of the decode, the
// reduce and both, with TB/s and TFLOP/s by docs/design.md's formulas
//   flops = qlen * sum_kv * H * (576 + 512) * 2,   bytes = kv bytes + q bytes + o bytes
// (kv counted once, although H = 128 runs as 2 head groups that each read it).
// Timing: the peer's method (FlashMLA under triton's do_bench): a graph of one step, each
// replay timed alone by events after a 256 MB L2 flush (median of 15; bench::
// TimeGraphColdL2). The flush matters for b = 32 ctx 1024, whose kv cache (19 - 38 MB)
// fits the 60 MB L2: replays back to back found it there (bench rows before session 10).
//
//   tools/gpu_bundle.sh --only mla_decode && gpu_bundle/run.sh --bench --filter mla_decode
//
// step_us: the whole decode step as an engine's graph runs it: the GPU planner
// (kernels/planner) rewriting the plan from the device batch arrays, then decode and reduce;
// checked first to write the host plan's bytes. With --peer it sits next to FlashMLA's
// metadata kernel + splitkv + combine (the issue's b = 32 ctx 1024 target).
//
// Prints a device-to-device copy bandwidth first (the memory roof measured on this card),
// then the table last.
//
// mla_decode_bench_traced (the same on the timeline probe's build, slower): with
// MLAPS_SM90_TRACE_OUT=FILE and one --only case it writes the last launch's timeline to FILE
// (kernels/decode/sm90_trace_report.py FILE prints it).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_bench_harness.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/peer_timings.h"
#include "kernels/planner/planner_kernel.h"
#include "kernels/planner/planner_params.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/sparse_layout.h"
#include "sim/cost_model.h"

namespace mlaps {
namespace {

using bench::TimeGraph;
using bench::TimeGraphColdL2;
#define CHECK_HIP MLAPS_CHECK_HIP

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

// The simulator's predicted decode time (us) of `plan`: its makespan under the calibrated
// costs of the plan's variant in the sm90 registry; -1 when the registry has none.
double PredictedDecodeUs(const Batch& batch, const PlanOptions& options, const WorkPlan& plan) {
  absl::StatusOr<double> ns = sim::PredictedDecodeNs(batch, options, plan);
  return ns.ok() ? *ns * 1e-3 : -1;
}

struct Row {
  std::string kind;  // dense | sparse2048
  std::string dtype;
  std::string kernel;  // f16 | bf16 (the sm90 wgmma kernels) | mma (mla_decode.h's paths)
  int batch, ctx, heads, qlen, items, splits, blocks, lanes;
  float decode_us, reduce_us, total_us;
  float step_us = -1;  // GPU planner + decode + reduce; < 0: not measured
  // The decode merging split tiles itself (MlaSplitMerge), one launch; and the step with it.
  float merged_us = 0, step_merged_us = -1;
  double tbps, tflops;
  double predicted_us;  // the simulator's makespan under the registry's calibrated costs; < 0: none
};

// The GPU planner's params that rewrite `plan` (planned from `batch` with `options`) in the
// staged buffers: its sections at the offsets StageCase's PackPlan gave them (what decode and
// reduce read), the folded qo_indptr and the status word after them. False when the GPU
// planner cannot plan it (a longest-first policy) or the words do not fit.
bool StepPlannerParams(const Batch& batch, const PlanOptions& options, const WorkPlan& plan,
                       const std::vector<int32_t>& pages, const bench::DecodeBuffers& d,
                       GpuPlannerParams* gp) {
  const absl::StatusOr<ResolvedPlan> resolved = ResolvePlan(batch, options);
  if (!resolved.ok() || resolved->options.policy != PlanPolicy::kGreedyPayload) return false;
  const staging::BatchArena ba = staging::PackBatch(batch, pages);
  const staging::PlanArena pa = staging::PackPlan(plan);
  const int64_t folded = int64_t{batch.num_requests()} * resolved->variant.head_fold + 1;
  const int64_t qo_at = (static_cast<int64_t>(pa.words.size()) + 3) / 4 * 4;
  const int64_t status_at = (qo_at + folded + 3) / 4 * 4;
  if (status_at + static_cast<int64_t>(sizeof(GpuPlanStatus) / 4) > d.words) return false;
  GpuPlannerParams p = StaticPlannerParams(batch, resolved->options, resolved->variant,
                                           std::max(1, batch.max_qlen()));
  p.qo_indptr = d.batch_words + ba.qo_indptr;
  p.kv_indptr = d.batch_words + ba.kv_indptr;
  p.kv_last_page_lens = d.batch_words + ba.last_page_lens;
  // Each section may fill the room up to the next (PackPlan pads them to 16 bytes).
  p.out_qo_indptr = d.plan_words + qo_at;
  p.out_qo_indptr_capacity = folded;
  p.work_indptr = d.plan_words + pa.work_indptr;
  p.work_indptr_capacity = pa.work_info - pa.work_indptr;
  p.work_info = d.plan_words + pa.work_info;
  p.work_info_capacity = (pa.reduce_indptr - pa.work_info) / 8;
  p.reduce_indptr = d.plan_words + pa.reduce_indptr;
  p.reduce_indptr_capacity = pa.reduce_final_map - pa.reduce_indptr;
  p.reduce_final_map = d.plan_words + pa.reduce_final_map;
  p.reduce_final_map_capacity = pa.reduce_partial_map - pa.reduce_final_map;
  p.reduce_partial_map = d.plan_words + pa.reduce_partial_map;
  p.reduce_partial_map_capacity = static_cast<int64_t>(pa.words.size()) - pa.reduce_partial_map;
  p.status = reinterpret_cast<GpuPlanStatus*>(d.plan_words + status_at);
  *gp = p;
  return GpuPlannerParamsError(p) == nullptr;
}

// Runs the GPU planner once over poisoned plan sections: true when it reports kGpuPlanOk and
// wrote exactly the host plan's entries (then the staged words are the host plan again).
bool StepPlannerMatchesHost(const GpuPlannerParams& gp, const WorkPlan& plan,
                            const bench::DecodeBuffers& d, hipStream_t stream) {
  const staging::PlanArena pa = staging::PackPlan(plan);
  const size_t bytes = pa.words.size() * 4;
  CHECK_HIP(hipMemsetAsync(d.plan_words, 0xff, bytes, stream));
  if (LaunchGpuPlanner(gp, stream) != 0) return false;
  CHECK_HIP(hipStreamSynchronize(stream));
  std::vector<int32_t> got(pa.words.size());
  GpuPlanStatus status;
  CHECK_HIP(hipMemcpy(got.data(), d.plan_words, bytes, hipMemcpyDeviceToHost));
  CHECK_HIP(hipMemcpy(&status, gp.status, sizeof(status), hipMemcpyDeviceToHost));
  CHECK_HIP(hipMemcpy(d.plan_words, pa.words.data(), bytes, hipMemcpyHostToDevice));
  if (status.code != kGpuPlanOk) return false;
  const std::pair<int64_t, size_t> sections[] = {
      {pa.work_indptr, plan.work_indptr.size()},
      {pa.work_info, 8 * plan.work_info.size()},
      {pa.reduce_indptr, std::max<size_t>(1, plan.reduce_indptr.size())},
      {pa.reduce_final_map, plan.reduce_final_map.size()},
      {pa.reduce_partial_map, plan.reduce_partial_map.size()}};
  for (const auto& [at, n] : sections) {
    if (std::memcmp(got.data() + at, pa.words.data() + at, n * 4) != 0) return false;
  }
  return true;
}

// Stages, checks and times one case and appends its row (unless `once`: one checked launch).
// kv_rows: KV rows read (dense: the batch's kv tokens, once for all heads; sparse: tokens x
// topk); pairs: (q token, kv token) pairs attended (dense: qlen x kv tokens). docs/design.md:
// bytes = kv_rows x 576 x elem + q rows x 576 x elem + o rows x 512 x 2;
// flops = pairs x H x (576 + 512) x 2.
// How one shape is planned and run: kv_lanes for PlanOptions (0: the default); blocks_per_sm:
// 0 the planner's default grid, else that many blocks an SM (2 on 16-row tiles: the compact
// mma.sync layout, which the default grid of one block an SM leaves for the narrow-tile
// kernel).
struct Setting {
  int kv_lanes = 0;
  int blocks_per_sm = 0;
  int fixed_overhead = -1;       // PlanOptions::fixed_overhead (--fixed-overhead; -1: the default)
  const char* versus = nullptr;  // --versus PATH: the decode also timed on that path
  bool lanes_apart = false;      // --lanes-apart: MlaDecodeParams::cu_lanes = 1
};

// --versus: the decode of the case's params `a` and of `b` (the same, another path), timed in
// turn, three rounds (each the median of its replays): two orders of one kernel compared in
// one process, without the drift between runs (clock, power cap). Prints one line.
template <class TimeUs>
void CompareDecodePaths(const MlaDecodeParams& a, const MlaDecodeParams& b, const char* b_name,
                        hipStream_t stream, TimeUs&& time_us) {
  constexpr int kRounds = 3;
  float ta[kRounds], tb[kRounds];
  for (int r = 0; r < kRounds; ++r) {
    ta[r] = time_us([&] { LaunchMlaDecode(a, stream); });
    tb[r] = time_us([&] { LaunchMlaDecode(b, stream); });
  }
  std::sort(ta, ta + kRounds);
  std::sort(tb, tb + kRounds);
  const char* a_name = std::getenv("MLAPS_MLA_PATH");
  std::printf(
      "  versus: decode us, MLAPS_MLA_PATH=%s %.1f %.1f %.1f, %s %.1f %.1f %.1f "
      "(middle rounds: %s / %s = %.3f)\n",
      a_name != nullptr ? a_name : "auto", ta[0], ta[1], ta[2], b_name, tb[0], tb[1], tb[2], b_name,
      a_name != nullptr ? a_name : "auto", tb[1] / ta[1]);
}

// --item-clocks: one launch in trace mode with clocks, then each kind of work item (its q tokens
// and kv pages) with its SM cycles: count, mean, min, max. The tiles of one request read the
// same kv blocks; one kind running faster than another lets them drift apart and lose their L2
// reuse (ncu's DRAM bytes tell whether they did).
bool PrintItemClocks(const bench::StagedCase& c, int64_t works, int num_cu, hipStream_t stream) {
  MlaDecodeParams p = c.decode;
  MlaTraceEntry* trace = nullptr;
  int32_t* counts = nullptr;
  MLAPS_CHECK_HIP(hipMalloc(&trace, works * sizeof(MlaTraceEntry)));
  MLAPS_CHECK_HIP(hipMalloc(&counts, num_cu * sizeof(int32_t)));
  MLAPS_CHECK_HIP(hipMemset(trace, 0, works * sizeof(MlaTraceEntry)));
  p.trace = trace;
  p.trace_capacity = works;
  p.trace_counts = counts;
  p.trace_clocks = true;
  MLAPS_CHECK_HIP(hipMemset(p.status, 0, sizeof(MlaStatus)));
  const bool launched = LaunchMlaDecode(p, stream) == 0;
  if (!launched) {
    const char* e = MlaDecodeParamsError(p);
    std::fprintf(stderr, "traced launch refused: %s\n", e ? e : "-");
  }
  MLAPS_CHECK_HIP(hipStreamSynchronize(stream));
  std::vector<MlaTraceEntry> entries(works);
  std::vector<int32_t> ran(num_cu);
  MLAPS_CHECK_HIP(
      hipMemcpy(entries.data(), trace, works * sizeof(MlaTraceEntry), hipMemcpyDeviceToHost));
  MLAPS_CHECK_HIP(hipMemcpy(ran.data(), counts, num_cu * sizeof(int32_t), hipMemcpyDeviceToHost));
  MLAPS_CHECK_HIP(hipFree(trace));
  MLAPS_CHECK_HIP(hipFree(counts));
  if (!launched) return false;
  // Every item traced, none reported (a trace entry lost or a bad item would skew the table).
  MlaStatus st;
  MLAPS_CHECK_HIP(hipMemcpy(&st, p.status, sizeof(st), hipMemcpyDeviceToHost));
  int64_t traced = 0;
  for (int32_t n : ran) traced += n;
  if (st.code != kMlaOk || traced != works) {
    std::fprintf(stderr, "traced launch: status %d, %lld of %lld items traced\n", st.code,
                 static_cast<long long>(traced), static_cast<long long>(works));
    return false;
  }
  struct Kind {
    int64_t n = 0;
    double sum = 0, min = 1e30, max = 0;
  };
  std::map<std::pair<int, int>, Kind> kinds;  // (q tokens, kv pages) -> cycles
  for (const MlaTraceEntry& e : entries) {
    if (e.ran != 1) continue;
    const double cycles = static_cast<double>(e.clock_end - e.clock_begin);
    Kind& k = kinds[{e.info[3] - e.info[2], e.info[5] - e.info[4]}];
    ++k.n;
    k.sum += cycles;
    k.min = std::min(k.min, cycles);
    k.max = std::max(k.max, cycles);
  }
  std::printf("item clocks (SM kcycles): q tokens, kv pages, items, mean, min, max\n");
  for (const auto& [key, k] : kinds) {
    std::printf("  %3d %6d %6lld %10.1f %10.1f %10.1f\n", key.first, key.second,
                static_cast<long long>(k.n), k.sum / k.n / 1e3, k.min / 1e3, k.max / 1e3);
  }
  return true;
}

bool MeasureCase(const Batch& batch, const std::vector<int32_t>& pages, const char* kind,
                 int batch_size, int ctx, int qlen, double kv_rows, double pairs,
                 const bench::DecodeBuffers& buffers, int num_cu, hipStream_t stream, bool once,
                 bool item_clocks, const Setting& setting, std::vector<Row>* rows) {
  const bool fp8 = batch.kv_dtype == DType::kFp8;
  PlanOptions options;
  options.kv_lanes = setting.kv_lanes;
  options.fixed_overhead = setting.fixed_overhead;
  if (setting.blocks_per_sm > 0) options.num_cu = num_cu * setting.blocks_per_sm;
  absl::StatusOr<WorkPlan> plan = setting.blocks_per_sm > 0
                                      ? PlanDecode(batch, options)
                                      : bench::PlanForDevice(batch, options, num_cu);
  if (!plan.ok()) {
    std::fprintf(stderr, "plan: %s\n", std::string(plan.status().message()).c_str());
    return false;
  }
  options.num_cu = plan->num_cu;
  bench::StagedCase staged;
  if (!bench::StageCase(batch, *plan, pages, buffers, &staged)) return false;
  MlaDecodeParams& p = staged.decode;
  if (const char* env = std::getenv("MLAPS_MLA_BLOCK_THREADS")) p.block_threads = std::atoi(env);
  p.path = staging::ParseDecodePath(std::getenv("MLAPS_MLA_PATH"));
  MlaDecodeParams& pm = staged.merged;
  pm.block_threads = p.block_threads;
  pm.path = p.path;
  if (setting.lanes_apart) p.cu_lanes = pm.cu_lanes = 1;  // the plan's CU order as block order
  const MlaReduceParams& r = staged.reduce;
  // A direct launch first (sets the shared-memory attribute, checks the status word).
  if (!bench::RunChecked(staged, stream)) return false;
  if (item_clocks && !PrintItemClocks(staged, plan->num_works(), plan->num_cu, stream)) {
    return false;
  }
  if (once) {
    std::printf("ran %s %s H%d q%d B%d ctx%d once\n", kind, fp8 ? "fp8" : "bf16", batch.num_heads,
                qlen, batch_size, ctx);
    return true;
  }
  Row row;
  row.kind = kind;
  row.dtype = fp8 ? "fp8" : "bf16";
  row.kernel = MlaDecodeKernelName(p);
  row.batch = batch_size;
  row.ctx = ctx;
  row.heads = batch.num_heads;
  row.qlen = qlen;
  row.items = plan->num_works();
  row.blocks = plan->num_cu;
  row.lanes = plan->kv_lanes;
  row.splits = plan->num_reduce_tiles();
  // The peer's method: each replay alone, after an L2 flush (TimeGraphColdL2).
  auto time_us = [&](auto enqueue) {
    return 1e3f * TimeGraphColdL2(stream, enqueue, buffers.l2_flush, buffers.l2_flush_bytes);
  };
  row.decode_us = time_us([&] { LaunchMlaDecode(p, stream); });
  if (setting.versus != nullptr) {
    bench::StagedCase v = staged;
    v.decode.path = staging::ParseDecodePath(setting.versus);
    if (!bench::RunChecked(v, stream)) return false;
    CompareDecodePaths(p, v.decode, setting.versus, stream, time_us);
  }
  row.reduce_us =
      plan->num_reduce_tiles() > 0 ? time_us([&] { LaunchMlaReduce(r, stream); }) : 0.0f;
  row.total_us = time_us([&] {
    LaunchMlaDecode(p, stream);
    LaunchMlaReduce(r, stream);
  });
  // The merging decode, checked once first (status word; it leaves its counters at 0).
  const bool split = plan->num_reduce_tiles() > 0;
  if (split) {
    bench::StagedCase m = staged;
    m.decode = pm;
    m.reduce.num_reduce_tiles = 0;
    if (!bench::RunChecked(m, stream)) return false;
  }
  row.merged_us = split ? time_us([&] { LaunchMlaDecode(pm, stream); }) : row.total_us;
  GpuPlannerParams gp;
  if (!StepPlannerParams(batch, options, *plan, pages, buffers, &gp)) {
    std::printf("  (no step time: the GPU planner does not plan this case)\n");
  } else if (!StepPlannerMatchesHost(gp, *plan, buffers, stream)) {
    std::printf("  (no step time: the GPU planner's plan differs from the host's)\n");
  } else {
    row.step_us = time_us([&] {
      LaunchGpuPlanner(gp, stream);
      LaunchMlaDecode(p, stream);
      if (plan->num_reduce_tiles() > 0) LaunchMlaReduce(r, stream);
    });
    row.step_merged_us = time_us([&] {
      LaunchGpuPlanner(gp, stream);
      LaunchMlaDecode(pm, stream);
    });
  }
  const int elem = fp8 ? 1 : 2;
  const double q_rows = static_cast<double>(batch.total_q_tokens()) * batch.num_heads;
  const double bytes = kv_rows * 576 * elem + q_rows * 576 * elem + q_rows * 512 * 2;
  const double flops = pairs * batch.num_heads * (576 + 512) * 2;
  row.tbps = bytes / (row.total_us * 1e-6) / 1e12;
  row.tflops = flops / (row.total_us * 1e-6) / 1e12;
  row.predicted_us = PredictedDecodeUs(batch, options, *plan);
  rows->push_back(row);
  std::printf(
      "  %s %s B%d ctx%d H%d q%d %s blocks %d lanes %d: decode %.1f us, reduce %.1f us, total "
      "%.1f us, merged in the decode %.1f us, step %.1f us (merged %.1f us)\n",
      kind, row.dtype.c_str(), batch_size, ctx, batch.num_heads, qlen, row.kernel.c_str(),
      row.blocks, row.lanes, row.decode_us, row.reduce_us, row.total_us, row.merged_us, row.step_us,
      row.step_merged_us);
  std::fflush(stdout);
  return true;
}

// The settings a shape is measured with: the defaults; the other side of kv lanes as well
// when lanes change the plan (kMaxKvLanes where the default has none, none where it has them);
// two blocks an SM as well where the tiles hold <= 16 rows (the compact layout; so one run
// compares it with the default narrow-tile kernel). Every setting charges items
// `fixed_overhead` blocks (-1: the registry's item cost).
std::vector<Setting> SettingsOf(const Batch& batch, int sms, int fixed_overhead, const char* versus,
                                bool lanes_apart) {
  std::vector<Setting> settings = {Setting{0, 0, fixed_overhead, versus, lanes_apart}};
  PlanOptions plain_options;
  plain_options.fixed_overhead = fixed_overhead;
  PlanOptions options = plain_options;
  options.kv_lanes = kMaxKvLanes;
  absl::StatusOr<WorkPlan> lanes = bench::PlanForDevice(batch, options, sms);
  absl::StatusOr<WorkPlan> plain = bench::PlanForDevice(batch, plain_options, sms);
  if (lanes.ok() && plain.ok() && lanes->kv_lanes > 1) {
    settings.push_back(
        Setting{plain->kv_lanes == 1 ? kMaxKvLanes : 1, 0, fixed_overhead, versus, lanes_apart});
  }
  if (plain.ok() && plain->num_cu == sms &&
      batch.num_heads / plain->head_fold * plain->tokens_per_tile <= 16) {
    settings.push_back(Setting{0, 2, fixed_overhead, versus, lanes_apart});
  }
  return settings;
}

// Optional: --only DTYPE,H,QLEN,BATCH,CTX runs one dense shape (any that fits the buffers:
// BATCH x CTX <= 128 x 32768 tokens, BATCH x QLEN x H <= 128 x 4 x 128 rows), --only
// DTYPE,sparse the sparse case; --once launches it once, untimed
// (for a profiler: ncu -k regex:MlaDecodeKernel -c 1 ... --only bf16,16,1,128,8192 --once);
// --item-clocks: one traced launch a case first, its work items' SM cycles by kind
// (PrintItemClocks); --lanes-apart: blocks run the plan's CUs in plan order (cu_lanes = 1: a
// request's kv lanes num_cu / lanes blocks apart, the placement before session 32);
// --page N: the dense cases' kv page size (a power of two, 1-4096; default 64, FlashMLA's);
// --fixed-overhead N: plans charge each work item N kv blocks (PlanOptions::fixed_overhead)
// instead of the registry's calibrated item cost (how much splitting tiles pays);
// --versus PATH: each case's decode also timed on decode path PATH (MLAPS_MLA_PATH's names),
// in turn with the case's own, three rounds, on one line (CompareDecodePaths).
struct Filter {
  bool any = true;
  std::string dtype;
  int heads = 0, qlen = 0, batch = 0, ctx = 0;
  bool sparse_only = false;  // --only DTYPE,sparse
  int page = 64;
  bool once = false;
  bool item_clocks = false;      // --item-clocks: each case's items' SM cycles (PrintItemClocks)
  bool lanes_apart = false;      // --lanes-apart: a request's kv lanes num_cu / lanes blocks apart
  std::string peer_json;         // --peer FILE: FlashMLA's flashmla.json from the same device call
  int fixed_overhead = -1;       // --fixed-overhead N: every setting's items charged N blocks
  const char* versus = nullptr;  // --versus PATH: each case's decode also on that path
};

int Main(const Filter& filter) {
  std::vector<bench::PeerTiming> peer;
  if (!filter.peer_json.empty()) {
    std::ifstream in(filter.peer_json);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<bench::PeerTiming>> parsed =
        in ? bench::ParsePeerTimings(text.str())
           : absl::NotFoundError("cannot read " + filter.peer_json);
    if (!parsed.ok()) {
      std::fprintf(stderr, "--peer: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    peer = *std::move(parsed);
    std::printf("peer timings: %zu rows from %s\n", peer.size(), filter.peer_json.c_str());
  }
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

  // Buffers for the largest shape: 4M kv tokens (the sparse cases' 128 requests of 32768; the
  // dense ones use 1M), Q / O of H=128 x qlen 4.
  const int page = filter.page;
  const bench::DecodeBuffers buffers =
      bench::AllocateDecodeBuffers(int64_t{128} * 32768, int64_t{128} * 4 * 128);

  std::vector<Row> rows;
  struct Shape {
    int heads, qlen;
  };
  std::vector<Shape> shapes = {{16, 1}, {16, 4}, {32, 3}, {64, 2}, {128, 1}, {128, 2}};
  std::vector<std::pair<int, int>> sizes = {{128, 8192}, {64, 16384}, {32, 1024}};
  if (!filter.any && !filter.sparse_only) {  // the one dense shape asked for
    shapes = {{filter.heads, filter.qlen}};
    sizes = {{filter.batch, filter.ctx}};
  }
  std::mt19937 rng(5);
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    const bool fp8 = dtype == DType::kFp8;
    if (!filter.any && filter.dtype != (fp8 ? "fp8" : "bf16")) continue;
    bench::FillDecodeBuffers(buffers, fp8, stream);
    for (const auto& [batch_size, ctx] : sizes) {
      for (const Shape& s : shapes) {
        if (!filter.any &&
            (filter.sparse_only || filter.heads != s.heads || filter.qlen != s.qlen ||
             filter.batch != batch_size || filter.ctx != ctx)) {
          continue;
        }
        const Batch batch =
            MakeUniformBatch(Arch::kSm90, dtype, s.heads, batch_size, s.qlen, ctx, page);
        // Pages scattered over the cache (a shuffled page table).
        const std::vector<int32_t> pages = bench::ShuffledPages(batch, rng);
        const double sum_kv = static_cast<double>(batch_size) * ctx;
        for (const Setting& setting :
             SettingsOf(batch, num_cu, filter.fixed_overhead, filter.versus, filter.lanes_apart)) {
          if (!MeasureCase(batch, pages, "dense", batch_size, ctx, s.qlen, sum_kv, s.qlen * sum_kv,
                           buffers, num_cu, stream, filter.once, filter.item_clocks, setting,
                           &rows)) {
            return 1;
          }
        }
      }
    }
    // Sparse per-token decode (DSA), FlashMLA's cases: H = 128 and 64, qlen 2, topk 2048, batch
    // 128 of 32768 cached tokens; each q token attends 2048 distinct slots drawn from its
    // request's tokens.
    for (int heads : {128, 64}) {
      if (!filter.any && !filter.sparse_only) break;
      const int batch_size = 128, ctx = 32768, qlen = 2, topk = 2048;
      absl::StatusOr<SparseLayout> layout = MakeSparseLayout(
          Arch::kSm90, dtype, heads, std::vector<int32_t>(batch_size, ctx), qlen, topk, batch_size);
      if (!layout.ok()) {
        std::fprintf(stderr, "sparse layout: %s\n", std::string(layout.status().message()).c_str());
        return 1;
      }
      std::vector<int32_t> slots, perm(ctx);
      for (int32_t seq : layout->token_to_seq) {
        for (int i = 0; i < ctx; ++i) perm[i] = seq * ctx + i;
        std::shuffle(perm.begin(), perm.end(), rng);
        slots.insert(slots.end(), perm.begin(), perm.begin() + topk);
      }
      const double pairs = static_cast<double>(layout->token_to_seq.size()) * topk;
      for (const Setting& setting : SettingsOf(layout->batch, num_cu, filter.fixed_overhead,
                                               filter.versus, filter.lanes_apart)) {
        if (!MeasureCase(layout->batch, slots, "sparse2048", batch_size, ctx, qlen, pairs, pairs,
                         buffers, num_cu, stream, filter.once, filter.item_clocks, setting,
                         &rows)) {
          return 1;
        }
      }
    }
  }
  const char* threads_env = std::getenv("MLAPS_MLA_BLOCK_THREADS");
  const char* path_env = std::getenv("MLAPS_MLA_PATH");
  std::printf("\ndecode block threads: %s; kernel path (MLAPS_MLA_PATH): %s\n",
              threads_env ? threads_env : "default", path_env ? path_env : "auto");
  // sim_us: the simulator's predicted decode time (makespan of the plan under the sm90
  // registry's calibrated costs); sim_err: (sim_us - decode_us) / decode_us.
  // blocks: persistent decode blocks (the plan's CUs; 2 an SM for 16-row tiles).
  // peer_us / x_peer (--peer): FlashMLA's median time for the shape (dense: bf16; sparse: its
  // fp8 topk-2048 row) and peer_us / total_us (> 1: mlaps faster).
  // step_us: GPU planner + decode + reduce in one graph; peer_step_us: FlashMLA's
  // metadata kernel + peer_us; x_step = peer_step_us / step_us.
  // merged_us: the decode merging the split tiles itself (MlaDecodeParams::merge: one launch,
  // no reduce; total_us where nothing splits); x_merged = peer_us / merged_us;
  // step_merged_us: GPU planner + that decode; x_step_merged = peer_step_us / step_merged_us.
  std::printf(
      "%-10s %-5s %-6s %5s %6s %4s %4s %6s %5s %6s %6s %10s %10s %10s %8s %9s %8s %9s %8s %9s "
      "%7s %8s %12s %6s %10s %8s %14s %13s\n",
      "kind", "dtype", "kernel", "batch", "ctx", "H", "qlen", "blocks", "lanes", "items", "splits",
      "decode_us", "reduce_us", "total_us", "TB/s", "TFLOP/s", "reduce%", "sim_us", "sim_err",
      "peer_us", "x_peer", "step_us", "peer_step_us", "x_step", "merged_us", "x_merged",
      "step_merged_us", "x_step_merged");
  for (const Row& r : rows) {
    char sim[32] = "-", err[32] = "-";
    if (r.predicted_us >= 0) {
      std::snprintf(sim, sizeof(sim), "%.1f", r.predicted_us);
      std::snprintf(err, sizeof(err), "%+.1f%%",
                    100.0 * (r.predicted_us - r.decode_us) / r.decode_us);
    }
    char peer_us[32] = "-", ratio[32] = "-", step[32] = "-", peer_step[32] = "-",
         step_ratio[32] = "-", merged_ratio[32] = "-", step_merged[32] = "-",
         step_merged_ratio[32] = "-";
    if (r.step_us >= 0) std::snprintf(step, sizeof(step), "%.1f", r.step_us);
    if (r.step_merged_us >= 0) {
      std::snprintf(step_merged, sizeof(step_merged), "%.1f", r.step_merged_us);
    }
    const bool sparse = r.kind != "dense";
    if (const bench::PeerTiming* t = bench::FindPeerTiming(peer, sparse, r.batch, r.ctx, r.heads,
                                                           r.qlen, sparse ? 2048 : 0)) {
      std::snprintf(peer_us, sizeof(peer_us), "%.1f", t->median_us);
      std::snprintf(ratio, sizeof(ratio), "%.2f", t->median_us / r.total_us);
      std::snprintf(merged_ratio, sizeof(merged_ratio), "%.2f", t->median_us / r.merged_us);
      if (t->meta_us >= 0) {
        std::snprintf(peer_step, sizeof(peer_step), "%.1f", t->median_us + t->meta_us);
        if (r.step_us > 0) {
          std::snprintf(step_ratio, sizeof(step_ratio), "%.2f",
                        (t->median_us + t->meta_us) / r.step_us);
        }
        if (r.step_merged_us > 0) {
          std::snprintf(step_merged_ratio, sizeof(step_merged_ratio), "%.2f",
                        (t->median_us + t->meta_us) / r.step_merged_us);
        }
      }
    }
    std::printf(
        "%-10s %-5s %-6s %5d %6d %4d %4d %6d %5d %6d %6d %10.1f %10.1f %10.1f %8.2f %9.1f %7.1f%% "
        "%9s %8s %9s %7s %8s %12s %6s %10.1f %8s %14s %13s\n",
        r.kind.c_str(), r.dtype.c_str(), r.kernel.c_str(), r.batch, r.ctx, r.heads, r.qlen,
        r.blocks, r.lanes, r.items, r.splits, r.decode_us, r.reduce_us, r.total_us, r.tbps,
        r.tflops, r.decode_us > 0 ? 100.0 * r.reduce_us / r.decode_us : 0.0, sim, err, peer_us,
        ratio, step, peer_step, step_ratio, r.merged_us, merged_ratio, step_merged,
        step_merged_ratio);
  }
  // mla_decode_bench_traced (MLAPS_SM90_TRACE): the last launch's timeline, for one --only case.
  if (const char* trace = std::getenv("MLAPS_SM90_TRACE_OUT")) {
    std::fprintf(
        stderr, "trace %s: %s\n", trace,
        DumpSm90Trace(trace) ? "written" : "not compiled in (mla_decode_bench_traced has it)");
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
    } else if (arg == "--item-clocks") {
      filter.item_clocks = true;
    } else if (arg == "--lanes-apart") {
      filter.lanes_apart = true;
    } else if (arg == "--fixed-overhead" && i + 1 < argc) {
      filter.fixed_overhead = std::atoi(argv[++i]);
      if (filter.fixed_overhead < 0) {
        std::fprintf(stderr, "--fixed-overhead N: blocks an item is charged, >= 0, got '%s'\n",
                     argv[i]);
        return 2;
      }
    } else if (arg == "--versus" && i + 1 < argc) {
      filter.versus = argv[++i];
      if (mlaps::staging::ParseDecodePath(filter.versus) < 0) {
        std::fprintf(stderr,
                     "--versus PATH: a MLAPS_MLA_PATH name (auto, mma, wgmma, f16, narrow, "
                     "f16pv), got '%s'\n",
                     argv[i]);
        return 2;
      }
    } else if (arg == "--peer" && i + 1 < argc) {
      filter.peer_json = argv[++i];
    } else if (arg == "--page" && i + 1 < argc) {
      filter.page = std::atoi(argv[++i]);
      if (filter.page < 1 || filter.page > 4096 || (filter.page & (filter.page - 1)) != 0) {
        std::fprintf(stderr, "--page N: a power of two in [1, 4096], got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--only" && i + 1 < argc) {
      char dtype[8] = {0}, sparse[8] = {0};
      const char* only = argv[++i];
      if (std::sscanf(only, "%7[a-z0-9],%7[a-z]", dtype, sparse) == 2 &&
          std::string(sparse) == "sparse") {
        filter.sparse_only = true;
      } else if (std::sscanf(only, "%7[a-z0-9],%d,%d,%d,%d", dtype, &filter.heads, &filter.qlen,
                             &filter.batch, &filter.ctx) != 5) {
        std::fprintf(stderr, "--only DTYPE,H,QLEN,BATCH,CTX or --only DTYPE,sparse\n");
        return 2;
      }
      if (std::string(dtype) != "bf16" && std::string(dtype) != "fp8") {
        std::fprintf(stderr, "--only: DTYPE is bf16 or fp8, got '%s'\n", dtype);
        return 2;
      }
      if (!filter.sparse_only &&
          (filter.heads <= 0 || filter.qlen <= 0 || filter.batch <= 0 || filter.ctx <= 0 ||
           int64_t{filter.batch} * filter.ctx > int64_t{128} * 32768 ||
           int64_t{filter.batch} * filter.qlen * filter.heads > int64_t{128} * 4 * 128)) {
        std::fprintf(stderr,
                     "--only: a shape of positive sizes within the buffers (BATCH x CTX <= 128 x "
                     "32768, BATCH x QLEN x H <= 128 x 4 x 128), got '%s'\n",
                     only);
        return 2;
      }
      filter.dtype = dtype;
      filter.any = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--only DTYPE,H,QLEN,BATCH,CTX | --only DTYPE,sparse] [--once] "
                   "[--item-clocks] [--lanes-apart] "
                   "[--page N] [--fixed-overhead N] "
                   "[--peer flashmla.json] [--versus PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (filter.page != 64 && !filter.peer_json.empty()) {
    std::fprintf(stderr, "--peer: FlashMLA's timings are of page-64 caches; drop --page\n");
    return 2;
  }
  return mlaps::Main(filter);
}
