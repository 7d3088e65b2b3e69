// Merge of context-parallel ranks: each rank attended a disjoint shard of the kv tokens and
// produced (O_r, LSE_r) per (q token, head) row; the merged row is
//   g = logsumexp_r(LSE_r),  O = sum_r exp(LSE_r - g) * O_r
// with natural-log LSEs. LSE_r that is +inf or NaN counts as -inf (a broken or empty rank
// must not poison the row); a row where every rank is -inf gives O = 0, LSE = -inf.
// fp32 arithmetic in a fixed order (ranks ascending, fmaf accumulation), the contract the
// GPU merge kernel (kernels/cp/lse_merge.h) follows; expf/logf may differ by an ulp or two
// between the CPU and the GPU.
#ifndef MLAPS_SIM_CP_MERGE_H_
#define MLAPS_SIM_CP_MERGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace mlaps::sim {

// o_ranks[r]: [rows, dim]; lse_ranks[r]: [rows]; o_out [rows, dim]; lse_out [rows].
// Errors: InvalidArgument when no ranks are given or a span's size differs from rows * dim
// (O) or rows (LSE), naming the rank.
absl::Status MergeCpRanks(absl::Span<const absl::Span<const float>> o_ranks,
                          absl::Span<const absl::Span<const float>> lse_ranks, int64_t rows,
                          int dim, absl::Span<float> o_out, absl::Span<float> lse_out);

// One row's merge weights: exp(LSE_r - g) for each rank (0 for dead ranks) and g itself.
// Exposed so tests can state the rule once.
float MergeWeights(absl::Span<const float> lse, absl::Span<float> weights);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_CP_MERGE_H_
