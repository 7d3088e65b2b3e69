// Merge of W context-parallel ranks' attention outputs on the GPU (docs/design.md "CP
// round-robin"): per (q token, head) row,
//   g = logsumexp_r(lse_r),  O = sum_r exp(lse_r - g) * O_r,
// natural-log LSEs; +inf and NaN LSEs count as -inf; a row whose ranks are all -inf gives
// O = 0, LSE = -inf. The contract and the arithmetic order are sim/cp_merge.h's (fp32,
// ranks ascending, fma accumulation); expf/logf may differ from the CPU's by an ulp.
#ifndef MLAPS_KERNELS_LSE_MERGE_H_
#define MLAPS_KERNELS_LSE_MERGE_H_

#include <cstdint>

namespace mlaps::kernels {

struct LseMergeParams {
  // Inputs, rank-major as an all-gather leaves them: o_ranks [W][rows][dim] fp32 (each
  // rank's normalized O), lse_ranks [W][rows] fp32.
  const float* o_ranks = nullptr;
  const float* lse_ranks = nullptr;
  int world_size = 0;  // W, in [1, kMaxWorld]
  int64_t rows = 0;    // q tokens x heads
  int dim = 512;       // 4, 8 or 16 floats per lane: 4..16 x warpSize (512 on MLA)
  // Outputs: o_out [rows][dim] as bf16 bits (out_bf16) or fp32; lse_out [rows] fp32.
  void* o_out = nullptr;
  float* lse_out = nullptr;
  bool out_bf16 = true;
};

inline constexpr int kMaxWorld = 64;

// Launch status: 0 ok; otherwise the launch is refused (nothing runs) for a bad parameter.
enum class LseMergeError : int {
  kOk = 0,
  kBadWorld = 1,      // world_size outside [1, kMaxWorld]
  kBadShape = 2,      // rows < 0 or dim not a positive multiple of 4 * (warp size / 32) * 8
  kNullPointer = 3,   // a required pointer is null while rows > 0
  kLaunchFailed = 4,  // the runtime refused the launch (see the returned runtime error)
};

// Enqueues the merge on `stream` (a hipStream_t / cudaStream_t, passed as void*).
// runtime_error, when given, receives the runtime's error code of the launch.
LseMergeError LaunchLseMerge(const LseMergeParams& params, void* stream,
                             int* runtime_error = nullptr);

}  // namespace mlaps::kernels

#endif  // MLAPS_KERNELS_LSE_MERGE_H_
