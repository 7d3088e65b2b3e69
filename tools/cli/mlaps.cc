// mlaps: plan, check and render MLA decode work plans.
//
//   mlaps [plan] [flags]      plan a batch (default: a DeepSeek-V3 MTP batch), summarize it
//                             and write an SVG Gantt chart (--svg, default mlaps_plan.svg)
//   mlaps check --plan F --batch F   exit 1 with every violated invariant when the plan is wrong
//   mlaps render --svg F.svg [plan flags]   the same, named for the chart
//   mlaps help
// Bad flags: one line on stderr, exit code 2.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/proto_io.h"
#include "sim/cost_model.h"
#include "sim/decode_case.h"
#include "sim/executor.h"
#include "sim/plan_checker.h"
#include "sim/raw_plan_io.h"
#include "sim/reference.h"
#include "tools/cli/flags.h"
#include "tools/cli/gantt_svg.h"

namespace mlaps::cli {
namespace {

constexpr int kUsageError = 2;

struct BatchFlags {
  std::string arch = "gfx950,sm90";
  std::string dtype = "fp8";
  std::string kv_dtype = "";
  int heads = 16;  // DeepSeek-V3's 128 heads over TP 8
  int qlen = 2;    // MTP: one draft token verified with the next
  int batch = 64;
  int ctx_min = 1024, ctx_max = 16384;
  int page_size = 64;
  int seed = 1;
  bool causal = true;
  bool cp_round_robin = false;
  std::string batch_file;
  // options
  int num_cu = 0, kv_granularity = 0, fixed_overhead = -1, max_split = 0;
  std::string policy = "greedy_payload";
  bool lse = true;

  void Define(Flags& f) {
    f.Define("arch", &arch, "comma-separated: gfx942, gfx950, sm90 (one plan per arch)");
    f.Define("dtype", &dtype, "q dtype: bf16 | fp8");
    f.Define("kv_dtype", &kv_dtype, "kv dtype (default: --dtype)");
    f.Define("heads", &heads, "query heads H: 16, 32, 48, 64, 128");
    f.Define("qlen", &qlen, "q tokens per request (MTP verify)");
    f.Define("batch", &batch, "requests");
    f.Define("ctx_min", &ctx_min, "shortest kv length (varlen, uniform in [min, max])");
    f.Define("ctx_max", &ctx_max, "longest kv length; equal to ctx_min for a uniform batch");
    f.Define("page_size", &page_size, "tokens per KV page (power of two)");
    f.Define("seed", &seed, "seed of the varlen lengths");
    f.Define("causal", &causal, "MTP bottom-right causal mask");
    f.Define("cp_round_robin", &cp_round_robin, "plan as one CP round-robin shard");
    f.Define("batch_file", &batch_file, "read the batch (text-format mlaps.proto.Batch)");
    f.Define("num_cu", &num_cu, "compute units (0: the arch's: gfx942 304, gfx950 256, sm90 132)");
    f.Define("kv_granularity", &kv_granularity,
             "kv tokens per cost block (power of two; 0: max(16, page))");
    f.Define("fixed_overhead", &fixed_overhead,
             "blocks per work item (-1: the calibrated item cost, else max(1, 16/page))");
    f.Define("max_split", &max_split, "most pieces per qo tile (0: no limit)");
    f.Define("policy", &policy, "planner policy: greedy_payload");
    f.Define("lse", &lse, "the caller wants LSE");
  }
};

absl::StatusOr<std::vector<Batch>> MakeBatches(const BatchFlags& f) {
  std::vector<Batch> out;
  if (!f.batch_file.empty()) {
    proto::Batch p;
    if (absl::Status s = ReadTextProtoFile(f.batch_file, &p); !s.ok()) return s;
    absl::StatusOr<Batch> b = BatchFromProto(p);
    if (!b.ok()) return b.status();
    out.push_back(*b);
    return out;
  }
  if (f.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("--batch=", f.batch, ": must be >= 1"));
  if (f.ctx_min < 0 || f.ctx_max < f.ctx_min) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ctx_min=", f.ctx_min, " --ctx_max=", f.ctx_max, ": need 0 <= min <= max"));
  }
  absl::StatusOr<DType> q = ParseDType(f.dtype);
  if (!q.ok()) return q.status();
  absl::StatusOr<DType> kv = ParseDType(f.kv_dtype.empty() ? f.dtype : f.kv_dtype);
  if (!kv.ok()) return kv.status();
  std::mt19937 rng(f.seed);
  std::uniform_int_distribution<int> len(f.ctx_min, f.ctx_max);
  std::vector<int> lens(f.batch);
  for (int& l : lens) l = len(rng);
  for (absl::string_view name : absl::StrSplit(f.arch, ',')) {
    absl::StatusOr<Arch> arch = ParseArch(name);
    if (!arch.ok()) return arch.status();
    if (f.page_size < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("--page_size=", f.page_size, ": must be >= 1"));
    Batch b = MakeVarlenBatch(*arch, *q, f.heads, lens, f.qlen, f.page_size);
    b.kv_dtype = *kv;
    b.causal = f.causal;
    b.cp_round_robin = f.cp_round_robin;
    out.push_back(std::move(b));
  }
  return out;
}

absl::StatusOr<PlanOptions> MakeOptions(const BatchFlags& f) {
  PlanOptions o;
  o.num_cu = f.num_cu;
  o.kv_granularity = f.kv_granularity;
  o.fixed_overhead = f.fixed_overhead;
  o.max_split_per_batch = f.max_split;
  o.lse = f.lse;
  absl::StatusOr<PlanPolicy> p = ParsePolicy(f.policy);
  if (!p.ok()) return p.status();
  o.policy = *p;
  return o;
}

// "plan.textproto" -> "plan.sm90.textproto" when several archs are planned.
std::string PathFor(const std::string& path, const Batch& b, bool several) {
  if (!several) return path;
  const size_t dot = path.rfind('.');
  const std::string arch(ArchName(b.arch));
  return dot == std::string::npos ? path + "." + arch
                                  : path.substr(0, dot) + "." + arch + path.substr(dot);
}

void PrintSummary(const Batch& b, const WorkPlan& plan, const sim::CostReport& r) {
  int64_t kv_min = INT64_MAX, kv_max = 0, kv_sum = 0;
  for (int i = 0; i < b.num_requests(); ++i) {
    kv_min = std::min(kv_min, b.kv_len(i));
    kv_max = std::max(kv_max, b.kv_len(i));
    kv_sum += b.kv_len(i);
  }
  const int items_min = *std::min_element(r.cu_items.begin(), r.cu_items.end());
  const int items_max = *std::max_element(r.cu_items.begin(), r.cu_items.end());
  const double load_min = *std::min_element(r.cu_load.begin(), r.cu_load.end());
  absl::PrintF("%s (%d CUs): %s/%s, H=%d, qlen=%d, batch %d, kv %d..%d (mean %.0f), page %d%s\n",
               ArchName(b.arch), plan.num_cu, DTypeName(b.q_dtype), DTypeName(b.kv_dtype),
               b.num_heads, b.max_qlen(), b.num_requests(), kv_min, kv_max,
               static_cast<double>(kv_sum) / b.num_requests(), b.page_size,
               b.cp_round_robin ? ", CP shard" : "");
  absl::PrintF("  variant    %s: %d-row tiles, %d token(s)/tile, head fold %d\n", plan.variant,
               plan.rows_per_tile, plan.tokens_per_tile, plan.head_fold);
  absl::PrintF("  works      %d items; per CU min %d / mean %.2f / max %d\n", r.works, items_min,
               static_cast<double>(r.works) / plan.num_cu, items_max);
  absl::PrintF("  splits     %d split tiles in %d pieces -> %d reduce tiles, %d partial rows\n",
               r.split_tiles, r.pieces, plan.num_reduce_tiles(), plan.num_partial_rows);
  absl::PrintF(
      "  load       blocks per CU min %.0f / mean %.1f / max %.0f; makespan / lower bound "
      "= %.0f / %.0f = %.3f\n",
      load_min, r.total / plan.num_cu, r.makespan, r.makespan, r.lower_bound, r.balance());
}

// The decode time the simulator predicts for the plan under its variant's calibrated costs
// (registry); variants with none (the AMD registries) print nothing.
void PrintPredictedTime(const Batch& b, const PlanOptions& options, const WorkPlan& plan) {
  absl::StatusOr<double> ns = sim::PredictedDecodeNs(b, options, plan);
  if (!ns.ok()) return;
  absl::PrintF("  predicted  decode %.1f us (makespan under the registry's calibrated costs)\n",
               *ns * 1e-3);
}

int Fail(const absl::Status& s, int code) {
  std::fprintf(stderr, "mlaps: %s\n", std::string(s.message()).c_str());
  return code;
}

int RunPlan(const std::vector<std::string>& args) {
  BatchFlags bf;
  std::string out, batch_out, svg = "mlaps_plan.svg";
  Flags flags;
  bf.Define(flags);
  flags.Define("out", &out, "write the plan (text-format mlaps.proto.WorkPlan)");
  flags.Define("batch_out", &batch_out, "write the batch planned (text format, replayable)");
  flags.Define("svg", &svg, "where to write the SVG Gantt chart (empty: none)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(s, kUsageError);
  absl::StatusOr<std::vector<Batch>> batches = MakeBatches(bf);
  if (!batches.ok()) return Fail(batches.status(), kUsageError);
  absl::StatusOr<PlanOptions> options = MakeOptions(bf);
  if (!options.ok()) return Fail(options.status(), kUsageError);
  const bool several = batches->size() > 1;
  for (const Batch& b : *batches) {
    absl::StatusOr<WorkPlan> plan = PlanDecode(b, *options);
    if (!plan.ok()) {
      // A malformed batch or option is a usage error; an unsupported shape is not.
      return Fail(plan.status(),
                  plan.status().code() == absl::StatusCode::kInvalidArgument ? kUsageError : 1);
    }
    std::vector<sim::Violation> v = sim::CheckPlan(b, *plan);
    if (!v.empty()) {
      std::fprintf(stderr, "mlaps: internal error, the plan fails the checker:\n%s",
                   sim::FormatViolations(v).c_str());
      return 1;
    }
    const PlanOptions resolved = *ResolveOptions(b, *options);
    const sim::CostParams cost = sim::BlockCostParams(b, resolved);
    PrintSummary(b, *plan, sim::EvaluatePlan(b, *plan, cost));
    PrintPredictedTime(b, *options, *plan);
    if (!out.empty()) {
      const std::string path = PathFor(out, b, several);
      if (absl::Status s = WriteTextProtoFile(path, PlanToProto(*plan)); !s.ok()) return Fail(s, 1);
      absl::PrintF("  plan       written to %s\n", path);
    }
    if (!batch_out.empty()) {
      const std::string path = PathFor(batch_out, b, several);
      if (absl::Status s = WriteTextProtoFile(path, BatchToProto(b)); !s.ok()) return Fail(s, 1);
      absl::PrintF("  batch      written to %s\n", path);
    }
    if (!svg.empty()) {
      const std::string path = PathFor(svg, b, several);
      std::ofstream f(path);
      f << RenderGanttSvg(b, *plan, cost,
                          absl::StrCat("mlaps plan: ", ArchName(b.arch), ", ", plan->variant));
      if (!f) return Fail(absl::PermissionDeniedError(absl::StrCat("cannot write ", path)), 1);
      char cwd[4096];
      absl::PrintF("  gantt      SVG written to %s%s\n",
                   path[0] == '/' ? "" : absl::StrCat(getcwd(cwd, sizeof cwd) ? cwd : ".", "/"),
                   path);
    }
  }
  return 0;
}

int RunCheck(const std::vector<std::string>& args) {
  std::string plan_path, batch_path, raw_dir, arch = "sm90", dtype = "bf16";
  int num_cu = -1, head_fold = -1, partial_rows = -1, heads = 16, page_size = 1, topk = 0;
  bool causal = true, cp = false;
  Flags flags;
  flags.Define("plan", &plan_path, "text-format mlaps.proto.WorkPlan");
  flags.Define("batch", &batch_path, "text-format mlaps.proto.Batch");
  flags.Define("raw_dir", &raw_dir,
               "instead of --plan/--batch: a folder of raw int32 dumps (work_indptr.bin, "
               "work_info_set.bin, reduce_*.bin, qo_indptr.bin, kv_indptr.bin, "
               "kv_last_page_lens.bin); the batch's other fields come from the flags below");
  flags.Define("arch", &arch, "--raw_dir: gfx942 | gfx950 | sm90");
  flags.Define("dtype", &dtype, "--raw_dir: bf16 | fp8");
  flags.Define("heads", &heads, "--raw_dir: query heads H");
  flags.Define("page_size", &page_size, "--raw_dir: tokens per page");
  flags.Define("causal", &causal, "--raw_dir: MTP causal rule");
  flags.Define("cp_round_robin", &cp, "--raw_dir: a CP shard");
  flags.Define("sparse_topk", &topk, "--raw_dir: sparse per-token batch");
  flags.Define("num_cu", &num_cu, "expected CUs (-1: the plan's)");
  flags.Define("head_fold", &head_fold, "head folding ratio (-1: the plan's; raw dumps: 1)");
  flags.Define("partial_rows", &partial_rows, "partial buffer rows available (-1: unbounded)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(s, kUsageError);
  absl::StatusOr<WorkPlan> plan;
  absl::StatusOr<Batch> batch;
  if (!raw_dir.empty()) {
    absl::StatusOr<Arch> a = ParseArch(arch);
    if (!a.ok()) return Fail(a.status(), kUsageError);
    absl::StatusOr<DType> d = ParseDType(dtype);
    if (!d.ok()) return Fail(d.status(), kUsageError);
    Batch b;
    b.arch = *a;
    b.q_dtype = b.kv_dtype = *d;
    b.num_heads = heads;
    b.page_size = page_size;
    b.causal = causal;
    b.cp_round_robin = cp;
    b.sparse_topk = topk;
    if (absl::Status s = sim::ReadRawBatch(raw_dir, &b); !s.ok()) return Fail(s, kUsageError);
    batch = b;
    plan = sim::ReadRawPlan(raw_dir, head_fold > 0 ? head_fold : 1);
    if (!plan.ok()) return Fail(plan.status(), kUsageError);
  } else {
    if (plan_path.empty() || batch_path.empty()) {
      return Fail(
          absl::InvalidArgumentError("check needs --plan FILE and --batch FILE, or --raw_dir DIR"),
          kUsageError);
    }
    proto::WorkPlan pp;
    proto::Batch pb;
    if (absl::Status s = ReadTextProtoFile(plan_path, &pp); !s.ok()) return Fail(s, kUsageError);
    if (absl::Status s = ReadTextProtoFile(batch_path, &pb); !s.ok()) return Fail(s, kUsageError);
    plan = PlanFromProto(pp);
    if (!plan.ok()) return Fail(plan.status(), 1);
    batch = BatchFromProto(pb);
    if (!batch.ok()) return Fail(batch.status(), kUsageError);
  }
  if (absl::Status s = ValidateBatch(*batch); !s.ok()) return Fail(s, kUsageError);
  sim::CheckOptions options;
  options.num_cu = num_cu;
  options.head_fold = head_fold;
  options.partial_rows_capacity = partial_rows;
  std::vector<sim::Violation> v = sim::CheckPlan(*batch, *plan, options);
  if (v.empty()) {
    absl::PrintF("plan OK: %d work items on %d CUs, %d split tiles\n", plan->num_works(),
                 plan->num_cu, plan->num_reduce_tiles());
    return 0;
  }
  absl::PrintF("plan has %d violation(s):\n%s", v.size(), sim::FormatViolations(v));
  return 1;
}

// A numeric run of a small batch: plan -> check -> executor (fp32, bf16 O) vs the fp64
// reference, with docs/design.md's gates. Exit 1 when a gate fails.
int RunSimulate(const std::vector<std::string>& args) {
  BatchFlags bf;
  bf.arch = "sm90";
  bf.dtype = "bf16";
  bf.batch = 4;
  bf.ctx_min = 200;
  bf.ctx_max = 2000;
  bf.page_size = 16;
  bf.num_cu = 16;  // few CUs, so that tiles are split and the reduce runs
  double q_scale = 0.7, kv_scale = 1.3;
  Flags flags;
  bf.Define(flags);
  flags.Define("q_scale", &q_scale, "fp8 per-tensor Q descale");
  flags.Define("kv_scale", &kv_scale, "fp8 per-tensor KV descale");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(s, kUsageError);
  absl::StatusOr<std::vector<Batch>> batches = MakeBatches(bf);
  if (!batches.ok()) return Fail(batches.status(), kUsageError);
  absl::StatusOr<PlanOptions> options = MakeOptions(bf);
  if (!options.ok()) return Fail(options.status(), kUsageError);
  int failed = 0;
  for (const Batch& b : *batches) {
    absl::StatusOr<WorkPlan> plan = PlanDecode(b, *options);
    if (!plan.ok()) {
      return Fail(plan.status(),
                  plan.status().code() == absl::StatusCode::kInvalidArgument ? kUsageError : 1);
    }
    if (std::vector<sim::Violation> v = sim::CheckPlan(b, *plan); !v.empty()) {
      std::fprintf(stderr, "mlaps: the plan fails the checker:\n%s",
                   sim::FormatViolations(v).c_str());
      return 1;
    }
    const sim::DecodeCase inputs = sim::MakeDecodeCase(b, bf.seed, q_scale, kv_scale);
    absl::StatusOr<sim::ExecutorOutput> out = sim::ExecutePlan(b, *plan, inputs.Inputs());
    if (!out.ok()) return Fail(out.status(), 1);
    absl::StatusOr<sim::ReferenceOutput> ref = sim::ReferenceDecode(b, inputs.Inputs());
    if (!ref.ok()) return Fail(ref.status(), 1);
    absl::StatusOr<sim::Comparison> cmp =
        sim::CompareOutputs(out->o, out->lse, ref->o, ref->lse, sim::GatesFor(b.kv_dtype));
    if (!cmp.ok()) return Fail(cmp.status(), 1);
    absl::PrintF(
        "%s: %s/%s H=%d qlen=%d batch %d page %d on %d CUs: %d items (%d partial), "
        "%d reduce tiles\n",
        ArchName(b.arch), DTypeName(b.q_dtype), DTypeName(b.kv_dtype), b.num_heads, b.max_qlen(),
        b.num_requests(), b.page_size, plan->num_cu, plan->num_works(), out->stats.partial_items,
        plan->num_reduce_tiles());
    absl::PrintF("  executor vs fp64 reference: %s\n", cmp->Summary());
    if (!cmp->passed) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

void PrintHelp() {
  BatchFlags bf;
  Flags flags;
  bf.Define(flags);
  std::printf(
      "mlaps: plans, checks and renders MLA decode work plans (persistent scheduling).\n"
      "  mlaps [plan] [flags]             plan a batch, print a summary, write "
      "mlaps_plan.<arch>.svg\n"
      "  mlaps render [flags] [--svg F]   plan and write an SVG Gantt chart\n"
      "  mlaps simulate [flags]           run a small batch's plan numerically vs the reference\n"
      "  mlaps check --plan F --batch F   verify a plan (exit 1 and the violations if wrong)\n"
      "  mlaps check --raw_dir D [...]    the same for raw int32 dumps of an engine's tensors\n"
      "plan flags:\n%s",
      flags.Help().c_str());
}

}  // namespace
}  // namespace mlaps::cli

int main(int argc, char** argv) {
  // Under `bazel run`, relative paths mean the user's directory, not the runfiles tree.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY"); wd != nullptr) {
    if (chdir(wd) != 0) std::fprintf(stderr, "mlaps: cannot enter %s\n", wd);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command = "plan";
  if (!args.empty() && args[0].rfind("--", 0) != 0) {
    command = args[0];
    args.erase(args.begin());
  }
  // `render` is `plan` (which writes the SVG unless --svg=""), kept as the documented name.
  if (command == "plan" || command == "render") return mlaps::cli::RunPlan(args);
  if (command == "check") return mlaps::cli::RunCheck(args);
  if (command == "simulate") return mlaps::cli::RunSimulate(args);
  if (command == "help" || command == "-h") {
    mlaps::cli::PrintHelp();
    return 0;
  }
  std::fprintf(stderr, "mlaps: unknown command '%s' (plan, render, simulate, check, help)\n",
               command.c_str());
  return 2;
}
