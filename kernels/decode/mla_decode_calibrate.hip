// Calibrates the simulator's cost model (sim/cost_model.h) against the MLA decode kernel.
//
// For each dtype and each tile fill the sm90 kernels run (16, 32, 48, 64 q rows in use:
// (H, qlen) = (16,1) (16,2) (16,3) (16,4) (32,1) (48,1) (64,1) (128,1) (128,2)), it plans batch
// families with few long items, many short ones, varlen and split tiles on the planner's
// default grid (and 16-row tiles also on two blocks an SM, the compact layout's grid), runs
// each plan once in trace mode with per-item clocks, and fits
//     cycles of an item = ns_per_block' * blocks + ns_per_item'
// by least squares over every item of the fill (blocks = ceil(visible kv / kv_granularity),
// as the cost model counts them; an item's time runs from its start to the next item's
// start on its CU, so the per-item constant carries the loop's own overhead). Cycles become
// ns through the SM clock measured in the same runs (busiest CU's cycles / event time).
//
// Routed fits: the same per kernel (MlaDecodeKernelName: bf16 64-row tiles run f16 P V or
// hi + lo by request length) and kv_granularity (one family also at page 1: gathered rows),
// for the registry's routed entries that the simulator costs plans with; the tile entries
// (the planner's item charge) are fitted on the page-64 families, kernels together.
//
// The reduce of every plan that splits tiles is timed alone (after an L2 flush, as the bench
// times it) and fitted as ns_per_launch + ns_per_partial_row x the partial rows it reads
// (sim::ReducePartialRows), both dtypes together (the partials are fp32 either way).
//
// Then, for every run, it compares the simulator's makespan under the fitted costs with the
// measured (untraced) decode time, and the planner settings' predicted order (decode +
// reduce) with their measured order. It prints the registry entries to paste into
// metadata/registry/sm90.textproto last.
//
//   tools/gpu_bundle.sh --only mla_decode && gpu_bundle/run.sh --bench-only --filter calibrate
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_bench_harness.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/registry.h"
#include "sim/cost_model.h"

namespace mlaps {
namespace {

using bench::TimeGraph;

struct Family {
  std::string name;
  std::vector<int> kv_lens;
  int page = 64;  // page size (64: whole pages that TMA loads; 1: gathered rows)
};

std::vector<Family> Families() {
  std::mt19937 rng(23);
  std::vector<Family> out;
  out.push_back({"uniform 128x8192", std::vector<int>(128, 8192)});
  std::vector<int> varlen(64);
  for (int& l : varlen) l = 64 + static_cast<int>(rng() % 16321);
  out.push_back({"varlen 64xU[64,16384]", varlen});
  out.push_back({"varlen 64xU[64,16384] p1", varlen, 1});
  out.push_back({"short 512x600", std::vector<int>(512, 600)});
  std::vector<int> mixed(96);
  for (int i = 0; i < 96; ++i) mixed[i] = i < 8 ? 32768 : 64 + static_cast<int>(rng() % 1985);
  std::shuffle(mixed.begin(), mixed.end(), rng);
  out.push_back({"mixed 8x32k+88xU[64,2048]", mixed});
  return out;
}

struct Shape {
  int heads, qlen;
};
constexpr Shape kShapes[] = {{16, 1}, {16, 2}, {16, 3},  {16, 4}, {32, 1},
                             {48, 1}, {64, 1}, {128, 1}, {128, 2}};

// One point of a straight-line fit y = slope * x + intercept (an item: x = its kv blocks,
// y = its cycles; a run, for the clock: x = busiest block's cycles, y = traced us).
struct Sample {
  double x, y;
};

// One traced run.
struct Run {
  std::string dtype, family;
  Shape shape;
  int rows;            // q rows in use per tile
  int per_cu;          // blocks an SM of the grid
  std::string kernel;  // MlaDecodeKernelName of the launch
  int granularity;     // the plan's kv_granularity
  int items;
  double traced_us;               // event time of the traced launch
  double busiest_cycles;          // the busiest CU's first start -> last end
  double measured_us;             // untraced decode, graph-timed
  double reduce_us = 0;           // the reduce alone, graph-timed (0: no split tiles)
  std::vector<double> cu_cycles;  // per CU: first start -> last end
  WorkPlan plan;
  Batch batch;
  PlanOptions resolved;
  // Other planner settings on the same batch (kAlternatives), untraced.
  WorkPlan alt_plan[3];
  double alt_measured_us[3] = {0, 0, 0};
  double alt_reduce_us[3] = {0, 0, 0};
};

// The planner settings the simulator must rank against the default (greedy payload, the
// batch's item charge: BatchFixedOverhead); the last is the batch-independent item charge
// (DefaultFixedOverhead), the other candidate of BatchFixedOverhead's choice.
constexpr int kNumAlternatives = 3;
constexpr const char* kAlternatives[kNumAlternatives] = {"longest-first", "no splits",
                                                         "item charge"};
PlanOptions AlternativeOptions(PlanOptions o, int which, int item_charge) {
  if (which == 0) o.policy = PlanPolicy::kLongestFirst;
  if (which == 1) o.max_split_per_batch = 1;  // whole tiles only
  if (which == 2) o.fixed_overhead = item_charge;
  return o;
}

struct Fit {
  double slope = 0, intercept = 0, r2 = 0, median_rel = 0;
  int n = 0;
};

Fit LeastSquares(const std::vector<Sample>& s) {
  Fit f;
  f.n = static_cast<int>(s.size());
  if (s.size() < 2) return f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Sample& x : s) {
    sx += x.x;
    sy += x.y;
    sxx += x.x * x.x;
    sxy += x.x * x.y;
  }
  const double n = static_cast<double>(s.size());
  const double den = n * sxx - sx * sx;
  if (den <= 0) return f;
  f.slope = (n * sxy - sx * sy) / den;
  f.intercept = (sy - f.slope * sx) / n;
  const double mean = sy / n;
  double ss_res = 0, ss_tot = 0;
  std::vector<double> rel;
  for (const Sample& x : s) {
    const double pred = f.slope * x.x + f.intercept;
    ss_res += (x.y - pred) * (x.y - pred);
    ss_tot += (x.y - mean) * (x.y - mean);
    rel.push_back(std::fabs(x.y - pred) / std::max(1.0, x.y));
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  std::nth_element(rel.begin(), rel.begin() + rel.size() / 2, rel.end());
  f.median_rel = rel[rel.size() / 2];
  return f;
}

// The reduce of a staged case alone (us; 0 when its plan splits no tile), timed as the bench
// times it: each replay after an L2 flush, so the partials come from HBM.
double ReduceUs(const bench::StagedCase& c, const bench::DecodeBuffers& d, hipStream_t stream) {
  if (c.reduce.num_reduce_tiles == 0) return 0;
  return 1e3 *
         bench::TimeGraphColdL2(
             stream, [&] { LaunchMlaReduce(c.reduce, stream); }, d.l2_flush, d.l2_flush_bytes, 7);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Main() {
  hipDeviceProp_t prop;
  MLAPS_CHECK_HIP(hipGetDeviceProperties(&prop, 0));
  const int num_cu = prop.multiProcessorCount;
  int clock_khz = 0;
  MLAPS_CHECK_HIP(hipDeviceGetAttribute(&clock_khz, hipDeviceAttributeClockRate, 0));
  hipStream_t stream;
  MLAPS_CHECK_HIP(hipStreamCreate(&stream));
  const bench::DecodeBuffers buffers =
      bench::AllocateDecodeBuffers(int64_t{128} * 8192, int64_t{512} * 4 * 128);
  const int64_t trace_capacity = int64_t{1} << 16;
  MlaTraceEntry* trace;
  int32_t* trace_counts;
  MLAPS_CHECK_HIP(hipMalloc(&trace, trace_capacity * sizeof(MlaTraceEntry)));
  MLAPS_CHECK_HIP(hipMalloc(&trace_counts, 4096 * sizeof(int32_t)));
  hipEvent_t ev0, ev1;
  MLAPS_CHECK_HIP(hipEventCreate(&ev0));
  MLAPS_CHECK_HIP(hipEventCreate(&ev1));
  std::printf("device %s, %d SMs, reported max SM clock %.0f MHz\n", prop.name, num_cu,
              clock_khz / 1e3);

  const std::vector<Family> families = Families();
  // (dtype, rows, blocks an SM)
  std::map<std::tuple<std::string, int, int>, std::vector<Sample>> samples;
  // (dtype, kernel, rows, kv_granularity)
  std::map<std::tuple<std::string, std::string, int, int>, std::vector<Sample>> routed_samples;
  std::vector<Run> runs;
  std::mt19937 rng(3);
  // Both dtypes x shapes x families, and the (16,1) shape's families at two blocks an SM.
  const int total = 2 * static_cast<int>((std::size(kShapes) + 1) * families.size());
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    const bool fp8 = dtype == DType::kFp8;
    bench::FillDecodeBuffers(buffers, fp8, stream);
    for (const Shape& shape : kShapes) {
      for (const Family& family : families) {
        for (int occupancy = 0; occupancy < 2; ++occupancy) {
          Run run;
          run.dtype = fp8 ? "fp8" : "bf16";
          run.family = family.name;
          run.shape = shape;
          std::vector<int> lens = family.kv_lens;
          for (int& l : lens) l = std::max(l, shape.qlen);
          run.batch =
              MakeVarlenBatch(Arch::kSm90, dtype, shape.heads, lens, shape.qlen, family.page);
          PlanOptions options;
          // Occupancy 0: the planner's default grid; 1: two blocks an SM, for 16-row tiles only
          // (the compact layout).
          absl::StatusOr<WorkPlan> plan = bench::PlanForDevice(run.batch, options, num_cu);
          if (occupancy == 1) {
            if (!plan.ok() || plan->num_cu != num_cu ||
                shape.heads / plan->head_fold * plan->tokens_per_tile > 16) {
              continue;
            }
            options.num_cu = 2 * num_cu;
            plan = PlanDecode(run.batch, options);
          }
          options.num_cu = plan.ok() ? plan->num_cu : num_cu;
          absl::StatusOr<PlanOptions> resolved = ResolveOptions(run.batch, options);
          if (!resolved.ok() || !plan.ok()) {
            std::fprintf(stderr, "plan: %s\n", std::string(plan.status().message()).c_str());
            return 1;
          }
          run.resolved = *resolved;
          run.plan = *plan;
          absl::StatusOr<ResolvedVariant> variant =
              ResolveVariant(VariantQueryOf(run.batch, /*lse=*/false));
          if (!variant.ok()) {
            std::fprintf(stderr, "variant: %s\n", std::string(variant.status().message()).c_str());
            return 1;
          }
          const int item_charge =
              DefaultFixedOverhead(*variant, Arch::kSm90, family.page, run.resolved.kv_granularity,
                                   occupancy == 1 ? options.num_cu : 0);
          for (int a = 0; a < kNumAlternatives; ++a) {
            absl::StatusOr<WorkPlan> alt =
                PlanDecode(run.batch, AlternativeOptions(options, a, item_charge));
            if (!alt.ok()) {
              std::fprintf(stderr, "plan (%s): %s\n", kAlternatives[a],
                           std::string(alt.status().message()).c_str());
              return 1;
            }
            run.alt_plan[a] = *alt;
          }
          run.rows = shape.heads / plan->head_fold * plan->tokens_per_tile;
          run.per_cu = plan->num_cu / num_cu;
          run.granularity = run.resolved.kv_granularity;
          run.items = plan->num_works();
          if (run.items > trace_capacity) {
            std::fprintf(stderr, "trace buffer too small: %d items\n", run.items);
            return 1;
          }
          const std::vector<int32_t> pages = bench::ShuffledPages(run.batch, rng);

          // The other planner settings first, untraced: their measured times.
          for (int a = 0; a < kNumAlternatives; ++a) {
            bench::StagedCase alt;
            if (!bench::StageCase(run.batch, run.alt_plan[a], pages, buffers, &alt) ||
                !bench::RunChecked(alt, stream)) {
              return 1;
            }
            run.alt_measured_us[a] =
                1e3 * TimeGraph(
                          stream, [&] { LaunchMlaDecode(alt.decode, stream); }, 5, 5);
            run.alt_reduce_us[a] = ReduceUs(alt, buffers, stream);
          }

          bench::StagedCase staged;
          if (!bench::StageCase(run.batch, run.plan, pages, buffers, &staged) ||
              !bench::RunChecked(staged, stream)) {
            return 1;
          }
          run.kernel = MlaDecodeKernelName(staged.decode);
          run.measured_us =
              1e3 * TimeGraph(
                        stream, [&] { LaunchMlaDecode(staged.decode, stream); }, 5, 5);
          run.reduce_us = ReduceUs(staged, buffers, stream);
          // The traced launch.
          MlaDecodeParams traced = staged.decode;
          traced.trace = trace;
          traced.trace_capacity = trace_capacity;
          traced.trace_counts = trace_counts;
          traced.trace_clocks = true;
          MLAPS_CHECK_HIP(hipEventRecord(ev0, stream));
          if (LaunchMlaDecode(traced, stream) != 0) {
            std::fprintf(stderr, "traced launch refused: %s\n", MlaDecodeParamsError(traced));
            return 1;
          }
          MLAPS_CHECK_HIP(hipEventRecord(ev1, stream));
          MLAPS_CHECK_HIP(hipEventSynchronize(ev1));
          float ms = 0;
          MLAPS_CHECK_HIP(hipEventElapsedTime(&ms, ev0, ev1));
          run.traced_us = 1e3 * ms;
          std::vector<MlaTraceEntry> entries(run.items);
          const int blocks = run.plan.num_cu;
          std::vector<int32_t> counts(blocks);
          MLAPS_CHECK_HIP(hipMemcpy(entries.data(), trace, entries.size() * sizeof(MlaTraceEntry),
                                    hipMemcpyDeviceToHost));
          MLAPS_CHECK_HIP(
              hipMemcpy(counts.data(), trace_counts, counts.size() * 4, hipMemcpyDeviceToHost));

          sim::CostParams blocks_only = sim::BlockCostParams(run.batch, run.resolved);
          blocks_only.per_block = 1.0;
          blocks_only.per_item = 0.0;
          // The tile entries (the planner's item charge) are fitted on whole pages only, every
          // kernel of the fill together; the routed ones per kernel and kv_granularity.
          std::vector<Sample>* fill =
              family.page == 64 ? &samples[{run.dtype, run.rows, run.per_cu}] : nullptr;
          std::vector<Sample>& routed_fill =
              routed_samples[{run.dtype, run.kernel, run.rows, run.granularity}];
          run.cu_cycles.assign(blocks, 0.0);
          for (int c = 0; c < blocks; ++c) {
            const int w0 = run.plan.work_indptr[c], w1 = run.plan.work_indptr[c + 1];
            if (counts[c] != w1 - w0) {
              std::fprintf(stderr, "cu %d ran %d items, the plan gives it %d\n", c, counts[c],
                           w1 - w0);
              return 1;
            }
            for (int i = w0; i < w1; ++i) {
              const MlaTraceEntry& e = entries[i];
              const int64_t end = i + 1 < w1 ? entries[i + 1].clock_begin : e.clock_end;
              const Sample sample{
                  sim::WorkItemCost(run.batch, run.plan, run.plan.work_info[i], blocks_only),
                  static_cast<double>(end - e.clock_begin)};
              if (fill != nullptr) fill->push_back(sample);
              routed_fill.push_back(sample);
            }
            if (w1 > w0) {
              run.cu_cycles[c] =
                  static_cast<double>(entries[w1 - 1].clock_end - entries[w0].clock_begin);
            }
          }
          run.busiest_cycles = *std::max_element(run.cu_cycles.begin(), run.cu_cycles.end());
          runs.push_back(std::move(run));
          const Run& r = runs.back();
          std::printf(
              "[%3d/%d] %-4s H%-3d q%d %-29s %-6s rows %2d x%d items %5d: decode %8.1f + reduce "
              "%6.1f us (traced %8.1f us, busiest CU %.4g cycles); longest-first %8.1f + %6.1f "
              "us, no splits %8.1f us, item charge %8.1f + %6.1f us\n",
              static_cast<int>(runs.size()), total, r.dtype.c_str(), shape.heads, shape.qlen,
              r.family.c_str(), r.kernel.c_str(), r.rows, r.per_cu, r.items, r.measured_us,
              r.reduce_us, r.traced_us, r.busiest_cycles, r.alt_measured_us[0], r.alt_reduce_us[0],
              r.alt_measured_us[1], r.alt_measured_us[2], r.alt_reduce_us[2]);
          std::fflush(stdout);
        }
      }
    }
  }

  // The SM clock during the runs: the traced launch's event time is the busiest CU's
  // cycles / clock plus a fixed launch cost, so fit traced_us = cycles * k + c over the runs.
  std::vector<Sample> spans;
  for (const Run& r : runs) spans.push_back({r.busiest_cycles, r.traced_us});
  const Fit clock_fit = LeastSquares(spans);
  const double k_us = clock_fit.slope, event_us = clock_fit.intercept;
  const double clock_ghz = 1e-3 / k_us;
  std::printf(
      "\nSM clock during the runs: %.3f GHz (fit of traced time on busiest-CU cycles over %d "
      "runs; launch + event cost %.1f us; reported max %.3f GHz)\n",
      clock_ghz, static_cast<int>(runs.size()), event_us, clock_khz / 1e6);

  std::printf("\nFits (cycles of an item = a * blocks + b; blocks of kv_granularity = 64):\n");
  std::printf("%-5s %5s %6s %7s %12s %12s %10s %10s %7s %11s\n", "dtype", "rows", "per_sm", "items",
              "a cyc/block", "b cyc/item", "a ns", "b ns", "R^2", "median|res|");
  std::map<std::tuple<std::string, int, int>, Fit> fits;
  for (const auto& [key, s] : samples) {
    const Fit f = LeastSquares(s);
    fits[key] = f;
    std::printf("%-5s %5d %6d %7d %12.1f %12.1f %10.1f %10.1f %7.4f %10.1f%%\n",
                std::get<0>(key).c_str(), std::get<1>(key), std::get<2>(key), f.n, f.slope,
                f.intercept, f.slope / clock_ghz, f.intercept / clock_ghz, f.r2,
                100 * f.median_rel);
  }

  // The reduce (both dtypes: the partials are fp32 either way): reduce ns = ns_per_launch +
  // ns_per_partial_row x the partial rows it reads, over every timed reduce.
  std::vector<Sample> reduce_samples;
  for (const Run& r : runs) {
    if (r.reduce_us > 0) {
      reduce_samples.push_back(
          {static_cast<double>(sim::ReducePartialRows(r.batch, r.plan)), 1e3 * r.reduce_us});
    }
    for (int a = 0; a < kNumAlternatives; ++a) {
      if (r.alt_reduce_us[a] <= 0) continue;
      reduce_samples.push_back({static_cast<double>(sim::ReducePartialRows(r.batch, r.alt_plan[a])),
                                1e3 * r.alt_reduce_us[a]});
    }
  }
  const Fit reduce_fit = LeastSquares(reduce_samples);
  proto::ReduceCost reduce;
  reduce.set_ns_per_launch(std::max(0.0, reduce_fit.intercept));
  reduce.set_ns_per_partial_row(std::max(0.0, reduce_fit.slope));
  std::printf(
      "\nReduce (ns = launch + per partial row x rows, %d timed reduces, L2 flushed): %.1f ns + "
      "%.4f ns a row, R^2 %.4f, median |res| %.1f%%\n",
      reduce_fit.n, reduce.ns_per_launch(), reduce.ns_per_partial_row(), reduce_fit.r2,
      100 * reduce_fit.median_rel);
  auto reduce_sim_us = [&](const Batch& batch, const WorkPlan& plan) {
    return 1e-3 * ReduceNs(reduce, sim::ReducePartialRows(batch, plan));
  };

  std::printf("\nRouted fits (per kernel and kv_granularity; ns):\n");
  std::map<std::tuple<std::string, std::string, int, int>, Fit> routed_fits;
  for (const auto& [key, s] : routed_samples) {
    const Fit f = LeastSquares(s);
    routed_fits[key] = f;
    std::printf(
        "%-5s %-6s rows %2d g %2d items %6d: %10.1f ns/block %10.1f ns/item R^2 %.4f "
        "median|res| %.1f%%\n",
        std::get<0>(key).c_str(), std::get<1>(key).c_str(), std::get<2>(key), std::get<3>(key), f.n,
        f.slope / clock_ghz, f.intercept / clock_ghz, f.r2, 100 * f.median_rel);
  }

  // Predicted (simulator makespan under the fitted ns costs) vs measured decode time, and
  // whether the simulator orders the two policies as the GPU does.
  auto params_of = [&](const Run& r) {
    sim::CostParams p = sim::BlockCostParams(r.batch, r.resolved);
    const Fit& f = routed_fits[{r.dtype, r.kernel, r.rows, r.granularity}];
    p.per_block = f.slope / clock_ghz;
    p.per_item = f.intercept / clock_ghz;
    return p;
  };
  // The launch's time beyond the busiest CU's items (graph launch, ramp, drain): per dtype,
  // the median of measured less simulated makespan (sim::PredictedDecodeNs adds it).
  std::map<std::string, double> launch_us;
  for (const char* dtype : {"bf16", "fp8"}) {
    std::vector<double> gaps;
    for (const Run& r : runs) {
      if (r.dtype != dtype) continue;
      gaps.push_back(r.measured_us -
                     sim::EvaluatePlan(r.batch, r.plan, params_of(r)).makespan * 1e-3);
    }
    launch_us[dtype] = std::max(0.0, Median(gaps));
    std::printf("%s launch (median of measured - makespan over %zu runs): %.2f us\n", dtype,
                gaps.size(), launch_us[dtype]);
  }
  std::printf(
      "\nPredicted vs measured decode time (fitted costs: makespan + launch; err = (sim - "
      "measured) / measured; cu_err: median over busy CUs of |makespan - traced| / traced), the "
      "reduce, and the alternatives' decode + reduce against the default's (order: whether the "
      "simulator's totals rank them as the GPU's do):\n");
  std::printf(
      "%-5s %4s %4s %-26s %6s %11s %9s %8s %7s %9s %9s | %-13s %9s %9s %6s | %-13s %9s %9s %6s | "
      "%-13s %9s %9s %6s\n",
      "dtype", "H", "qlen", "family", "items", "measured_us", "sim_us", "err", "cu_err",
      "reduce_us", "sim_red", "alternative", "total_us", "sim_us", "order", "alternative",
      "total_us", "sim_us", "order", "alternative", "total_us", "sim_us", "order");
  std::vector<double> errs;
  int order_ok = 0, order_total = 0;
  for (const Run& r : runs) {
    const sim::CostParams p = params_of(r);
    const sim::CostReport rep = sim::EvaluatePlan(r.batch, r.plan, p);
    const double sim_us = rep.makespan * 1e-3 + launch_us[r.dtype];
    const double err = (sim_us - r.measured_us) / r.measured_us;
    errs.push_back(std::fabs(err));
    std::vector<double> cu_err;
    for (int c = 0; c < static_cast<int>(r.cu_cycles.size()); ++c) {
      if (r.cu_cycles[c] <= 0) continue;
      const double traced_ns = r.cu_cycles[c] / clock_ghz;
      cu_err.push_back(std::fabs(rep.cu_load[c] - traced_ns) / traced_ns);
    }
    const double reduce_sim = reduce_sim_us(r.batch, r.plan);
    std::printf("%-5s %4d %4d %-23s x%d %6d %11.1f %9.1f %+7.1f%% %6.1f%% %9.1f %9.1f",
                r.dtype.c_str(), r.shape.heads, r.shape.qlen, r.family.c_str(), r.per_cu, r.items,
                r.measured_us, sim_us, 100 * err, 100 * Median(cu_err), r.reduce_us, reduce_sim);
    const double total_us = r.measured_us + r.reduce_us, total_sim = sim_us + reduce_sim;
    for (int a = 0; a < kNumAlternatives; ++a) {
      const double alt_total = r.alt_measured_us[a] + r.alt_reduce_us[a];
      const double alt_sim_us = sim::EvaluatePlan(r.batch, r.alt_plan[a], p).makespan * 1e-3 +
                                launch_us[r.dtype] + reduce_sim_us(r.batch, r.alt_plan[a]);
      // The order counts only where the GPU separates the two by more than 3% (run-to-run
      // noise is ~1%).
      const double gap = (alt_total - total_us) / total_us;
      const char* order = "tie";
      if (std::fabs(gap) > 0.03) {
        ++order_total;
        const bool ok = (gap > 0) == (alt_sim_us > total_sim);
        order_ok += ok;
        order = ok ? "ok" : "WRONG";
      }
      std::printf(" | %-13s %9.1f %9.1f %6s", kAlternatives[a], alt_total, alt_sim_us, order);
    }
    std::printf("\n");
  }
  std::printf(
      "\nsimulator vs measured decode time over %zu runs: median |err| %.1f%%, max %.1f%%;"
      " planner settings ordered right in %d of %d comparisons where the GPU separates them "
      "by > 3%%\n",
      errs.size(), 100 * Median(errs), 100 * *std::max_element(errs.begin(), errs.end()), order_ok,
      order_total);

  // The registry's order: one block an SM first (the default grid), then two where fitted.
  std::printf("\n# registry entries (metadata/registry/sm90.textproto), per dtype:\n");
  std::printf("reduce { ns_per_launch: %.1f ns_per_partial_row: %.4f }\n", reduce.ns_per_launch(),
              reduce.ns_per_partial_row());
  for (const char* dtype : {"bf16", "fp8"}) {
    const Fit& f64 = fits[{dtype, 64, 1}];
    std::printf(
        "%s: cost { kv_granularity: %d ns_per_block: %.1f ns_per_item: %.1f ns_per_launch: "
        "%.1f\n",
        dtype, runs.front().resolved.kv_granularity, f64.slope / clock_ghz,
        f64.intercept / clock_ghz, 1e3 * launch_us[dtype]);
    for (int rows : {16, 32, 48, 64}) {
      for (int per_cu : {1, 2}) {
        const auto it = fits.find({dtype, rows, per_cu});
        if (it == fits.end()) continue;
        std::printf("    tile { rows: %d ns_per_block: %.1f ns_per_item: %.1f%s }\n", rows,
                    it->second.slope / clock_ghz, it->second.intercept / clock_ghz,
                    per_cu > 1 ? absl::StrCat(" blocks_per_cu: ", per_cu).c_str() : "");
      }
    }
    for (const auto& [key, f] : routed_fits) {
      if (std::get<0>(key) != dtype) continue;
      std::printf(
          "    routed { kernel: \"%s\" rows: %d kv_granularity: %d ns_per_block: %.1f "
          "ns_per_item: %.1f }\n",
          std::get<1>(key).c_str(), std::get<2>(key), std::get<3>(key), f.slope / clock_ghz,
          f.intercept / clock_ghz);
    }
    std::printf("  }\n");
  }
  return 0;
}

}  // namespace
}  // namespace mlaps

int main() { return mlaps::Main(); }
