// The numeric executor: runs a WorkPlan work item by work item on simulated CUs the way the
// persistent decode kernel does (fp32 online softmax, fp32 partial buffers, a reduce pass,
// bf16 final O), and compares outputs with the fp64 reference under docs/design.md's gates.
//
// Execution model (what the GPU kernel is expected to do, bit for bit in the plan's
// interpretation, to fp32 rounding in the arithmetic):
//   * Every final row starts as O = 0, LSE = -inf; every partial row likewise.
//   * CU c = 0 .. num_cu-1 runs items work_indptr[c] .. work_indptr[c+1]-1 in order.
//   * Item (batch_idx v, qo [qs, qe), kv pages [ks, ke), kv_offset, partial_qo_loc):
//     request b = v / head_fold, head group g = v % head_fold covers heads
//     [g*H/r, (g+1)*H/r); folded q token t in [qs, qe) is token i = t - qo_indptr_folded[v]
//     of request b, i.e. Q / O row batch.qo_indptr[b] + i. The item reads request-local kv
//     tokens [begin, E) with begin = (ks - kv_indptr[b]) * page_size and
//     E = min((ke - kv_indptr[b]) * page_size, L) (L from kv_last_page_lens), through
//     kv_indices. The causal mask is rebuilt from what the kernel gets: the request length
//     the mask uses is E + kv_offset (so a wrong kv_offset gives a wrong mask; this is the
//     coverage definition of sim/plan_checker.h when kv_offset is right). Token i sees
//     j < E + kv_offset - qlen + i + 1 (dense causal), all of [begin, E) (non-causal or
//     sparse), or global positions per DecodeInputs::cp (causal CP).
//   * Per (token, head) row: fp32 online softmax over kv blocks of ExecutorOptions::kv_block
//     tokens counted from `begin`: logits = fp32 dot(q, k) * (sm_scale * q_scale * kv_scale
//     as floats); m, l, acc (512 fp32) rescaled per block; O = acc / l * kv_scale.
//     partial_qo_loc == -1: O rounded to bf16 into the final O, LSE = m + ln(l) (fp32).
//     Else: fp32 O and LSE = m + ln(l) into partial row partial_qo_loc + (t - qs).
//     A row that sees no kv token writes O = 0, LSE = -inf.
//   * Reduce, tile k: final rows [reduce_final_map[2k], reduce_final_map[2k+1]) merge the
//     pieces whose partial rows start at reduce_partial_map[reduce_indptr[k] ..
//     reduce_indptr[k+1]): lse = logsumexp of the pieces' LSEs (NaN / +inf / -inf pieces
//     count as -inf), O = sum exp(lse_p - lse) O_p (fp32), rounded to bf16; no live piece
//     gives O = 0, LSE = -inf.
#ifndef MLAPS_SIM_EXECUTOR_H_
#define MLAPS_SIM_EXECUTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "metadata/batch.h"
#include "metadata/types.h"
#include "metadata/work_plan.h"
#include "sim/reference.h"

namespace mlaps::sim {

struct ExecutorOptions {
  int kv_block = 64;  // kv tokens per online-softmax step (the kernel's BLOCK_N), >= 1
  // Rows of the fp32 partial buffers. -1: max(plan.num_partial_rows, the sum of the partial
  // items' q tokens), which every sound packing fits.
  int64_t partial_rows_capacity = -1;
  // Round final O to bf16 (the decode output). false keeps fp32: a CP rank's O is merged
  // with the other ranks' first, and rounding each rank's O to bf16 before the merge costs
  // accuracy where ranks cancel (AITER's round-robin test reports merge-out failures for
  // exactly that); the merged O is rounded once.
  bool final_o_bf16 = true;
};

struct ExecutorStats {
  int num_cu = 0;
  std::vector<int32_t> works_per_cu;      // [num_cu]: items each CU ran
  std::vector<int64_t> kv_tokens_per_cu;  // [num_cu]: sum over its items of E - begin
  int64_t final_items = 0;                // items with partial_qo_loc == -1
  int64_t partial_items = 0;              // items writing partial rows
  int64_t reduce_tiles = 0;               // reduce entries merged
  // Folded q tokens (each H / head_fold heads wide) by how often a final row was written
  // (by a final item or by the reduce): never (left O = 0, LSE = -inf) or more than once
  // (a broken plan; the last write wins, as a race on the GPU would let any win).
  int64_t unwritten_tokens = 0;
  int64_t rewritten_tokens = 0;
};

struct ExecutorOutput {
  std::vector<float> o;    // [total_q, H, 512], bf16 values (fp32 if !final_o_bf16)
  std::vector<float> lse;  // [total_q, H], fp32, natural log
  // The fp32 partial buffers after all items ran. Rows are folded q tokens, each
  // H / head_fold heads wide (the kernel's view of a virtual request); partial_rows rows
  // (ExecutorOptions::partial_rows_capacity).
  std::vector<float> partial_o;    // [partial_rows, H / head_fold, 512], normalized
  std::vector<float> partial_lse;  // [partial_rows, H / head_fold], max + ln(sum)
  int64_t partial_rows = 0;
  ExecutorStats stats;
};

// Runs `plan` on `inputs` (see the file comment). The plan need not be sound (CheckPlan):
// coverage gaps, overlaps and wrong kv_offsets run and give wrong numbers, which is how
// tests show the comparison has teeth. What would make the kernel read or write out of
// bounds is refused instead. Errors: ValidateDecodeInputs' errors; InvalidArgument naming
// the field for head_fold not dividing H, work_indptr not num_cu + 1 non-decreasing entries
// from 0 to the number of items, a plan qo_indptr differing from the batch's folded one, an
// item's batch_idx / qo range / kv pages outside its (virtual) request, partial_qo_loc
// < -1, partial rows (of items or reduce entries) outside the partial buffer, malformed
// reduce maps, or kv_block < 1.
absl::StatusOr<ExecutorOutput> ExecutePlan(const Batch& batch, const WorkPlan& plan,
                                           const DecodeInputs& inputs,
                                           const ExecutorOptions& options = {});

// docs/design.md's tolerance gates for floating outputs compared with the simulator / reference.
struct Gates {
  double max_cos_diff = 1e-5;      // 1 - 2 sum(xy) / sum(x^2 + y^2): 1e-5 bf16, 3e-2 fp8
  double abs_tol = 8e-4;           // an element passes if abs_err < abs_tol
  double rel_tol = 2.0 / 128;      //   or rel_err = abs_err / |expected| < rel_tol
  double max_fail_fraction = 0.0;  // elements allowed to fail the elementwise gate
  // mlaps' own LSE gate (no peer gate exists): max |lse - lse_ref| over finite pairs.
  double max_lse_abs_err = 1e-3;
};
// The gates for a dtype (the q/kv dtype of the batch): cosine 1e-5 for bf16, 3e-2 for fp8.
Gates GatesFor(DType dtype);

struct Comparison {
  double cos_diff = 0;       // over O elements that are finite in both
  double max_abs_err = 0;    // over those elements
  int64_t num_elements = 0;  // O elements compared
  int64_t num_failing = 0;   // failing abs_err < abs_tol or rel_err < rel_tol
  double fail_fraction = 0;
  int64_t worst_index = -1;  // flat O index of the largest abs error (-1: none)
  double worst_actual = 0, worst_expected = 0;
  int64_t o_mask_mismatches = 0;    // O elements whose inf / NaN class differs
  int64_t lse_mask_mismatches = 0;  // LSE entries whose inf (with sign) / NaN class differs
  double lse_max_abs_err = 0;       // over LSE pairs finite in both
  int64_t lse_worst_index = -1;
  bool passed = false;
  // One line: every measure, the gate it is held to, and PASS / FAIL.
  std::string Summary() const;
};

// Compares actual O / LSE with expected ones under `gates`. O spans are [rows, 512]-shaped
// flat arrays (the worst index decodes as row = index / 512, dim = index % 512); LSE spans
// any shape. cos_diff is 0 when every compared element is 0 in both.
// Errors: InvalidArgument when o sizes or lse sizes differ (naming which).
absl::StatusOr<Comparison> CompareOutputs(absl::Span<const float> o, absl::Span<const float> lse,
                                          absl::Span<const double> expected_o,
                                          absl::Span<const double> expected_lse,
                                          const Gates& gates);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_EXECUTOR_H_
