#include "kernels/cp/cp_rank_setup.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "metadata/types.h"

namespace mlaps::cp {

absl::StatusOr<CpRankSetup> MakeCpRankSetup(const Batch& global,
                                            absl::Span<const int32_t> global_kv_indices,
                                            const CpSharding& sharding, int rank,
                                            const PlanOptions& options) {
  if (options.policy != PlanPolicy::kGreedyPayload) {
    return absl::InvalidArgumentError(absl::StrCat("policy ", PolicyName(options.policy),
                                                   ": the GPU planner runs greedy_payload only"));
  }
  absl::StatusOr<CpShardView> view = MakeCpShardView(global, global_kv_indices, sharding, rank);
  if (!view.ok()) return view.status();
  CpRankSetup s;
  s.rank = rank;
  s.sharding = sharding;
  s.view = *std::move(view);
  const Batch& batch = s.view.batch;
  s.local_kv_indices.resize(s.view.kv_indices.size());
  for (size_t k = 0; k < s.local_kv_indices.size(); ++k) {
    s.local_kv_indices[k] = static_cast<int32_t>(k);
  }
  for (int64_t l : s.view.global_kv_len) s.global_kv_len.push_back(static_cast<int32_t>(l));
  // As PlanDecodeInto (ResolvePlan): options, grid, variant and capacity.
  absl::StatusOr<ResolvedPlan> plan = ResolvePlan(batch, options);
  if (!plan.ok()) return plan.status();
  s.options = plan->options;
  s.variant = std::move(plan->variant);
  s.capacity = plan->capacity;
  s.max_qlen = std::max(1, batch.max_qlen());
  s.rows = batch.total_q_tokens() * batch.num_heads;
  return s;
}

std::vector<float> GatherShardCache(const CpRankSetup& setup,
                                    absl::Span<const float> global_kv_cache) {
  const int64_t sub = int64_t{setup.sharding.interleave} * kHeadDimQk;  // floats a sub-page
  const int64_t n = static_cast<int64_t>(setup.view.kv_indices.size());
  std::vector<float> out(std::max<int64_t>(1, n) * sub, 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t from = int64_t{setup.view.kv_indices[k]} * sub;
    std::copy(global_kv_cache.begin() + from, global_kv_cache.begin() + from + sub,
              out.begin() + k * sub);
  }
  return out;
}

}  // namespace mlaps::cp
