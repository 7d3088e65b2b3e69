// Compares planner policies under the simulator's block cost model: makespan over the lower
// bound, split tiles and pieces, per batch family, on 132 (sm90) and 256 (gfx950) CUs; on
// sm90 also the decode time predicted under the registry's calibrated costs (pred_us).
// bazel run //sim:policy_table
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "metadata/planner.h"
#include "sim/cost_model.h"
#include "sim/plan_checker.h"

namespace mlaps::sim {
namespace {

struct Family {
  std::string name;
  std::vector<int> kv_lens;
};

std::vector<Family> Families(int batch) {
  std::mt19937 rng(7);
  std::vector<Family> out;
  out.push_back({"uniform 4096", std::vector<int>(batch, 4096)});
  std::vector<int> zipf(batch);
  for (int i = 0; i < batch; ++i) {
    zipf[i] = std::max(64, static_cast<int>(65536 / std::pow(i + 1, 1.1)));
  }
  std::shuffle(zipf.begin(), zipf.end(), rng);
  out.push_back({"zipf s=1.1", zipf});
  std::vector<int> bimodal(batch);
  for (int i = 0; i < batch; ++i) bimodal[i] = rng() % 2 ? 512 : 16384;
  out.push_back({"bimodal 512/16k", bimodal});
  std::vector<int> one_long(batch, 1024);
  one_long[batch / 3] = 131072;
  out.push_back({"one 128k + 1k", one_long});
  std::vector<int> many_short(batch * 8, 700);
  out.push_back({"1024 x 700", many_short});
  return out;
}

}  // namespace
}  // namespace mlaps::sim

int main() {
  using namespace mlaps;
  std::printf("%-16s %-6s %-15s %9s %9s %7s %7s %7s %9s\n", "family", "cus", "policy", "makespan",
              "lower_bd", "ratio", "splits", "pieces", "pred_us");
  for (Arch arch : {Arch::kSm90, Arch::kGfx950}) {
    for (const sim::Family& f : sim::Families(128)) {
      for (PlanPolicy policy : {PlanPolicy::kGreedyPayload, PlanPolicy::kLongestFirst}) {
        Batch batch = MakeVarlenBatch(arch, DType::kFp8, 16, f.kv_lens, 2, 64);
        PlanOptions options;
        options.policy = policy;
        absl::StatusOr<WorkPlan> plan = PlanDecode(batch, options);
        if (!plan.ok()) {
          std::printf("%s: %s\n", f.name.c_str(), std::string(plan.status().message()).c_str());
          return 1;
        }
        if (!sim::CheckPlan(batch, *plan).empty()) {
          std::printf("%s: plan fails the checker\n", f.name.c_str());
          return 1;
        }
        const PlanOptions resolved = *ResolveOptions(batch, options);
        const sim::CostReport r =
            sim::EvaluatePlan(batch, *plan, sim::BlockCostParams(batch, resolved));
        // Predicted time where the registry has calibrated costs (sm90), else "-".
        absl::StatusOr<double> ns = sim::PredictedDecodeNs(batch, options, *plan);
        const std::string predicted = ns.ok() ? absl::StrFormat("%.1f", *ns * 1e-3) : "-";
        std::printf("%-16s %-6d %-15s %9.0f %9.0f %7.3f %7d %7d %9s\n", f.name.c_str(),
                    plan->num_cu, std::string(PolicyName(policy)).c_str(), r.makespan,
                    r.lower_bound, r.balance(), r.split_tiles, r.pieces, predicted.c_str());
      }
    }
  }
  return 0;
}
