// Inputs for the numeric simulator (tests, mlaps simulate): a batch with deterministic random Q /
// KV values already rounded to the batch's dtype (bf16, or fp8 codes under per-tensor scales).
#ifndef MLAPS_SIM_DECODE_CASE_H_
#define MLAPS_SIM_DECODE_CASE_H_

#include <cstdint>
#include <vector>

#include "metadata/batch.h"
#include "sim/reference.h"

namespace mlaps::sim {

struct DecodeCase {
  Batch batch;
  std::vector<float> q;             // [total_q, H, 576]
  std::vector<float> kv_cache;      // [num_pages, page_size, 576]
  std::vector<int32_t> kv_indices;  // a permutation of the used pages (spare pages unused)
  double q_scale = 1.0, kv_scale = 1.0;

  // A view of this case's buffers (valid while the case lives and is not resized).
  DecodeInputs Inputs() const;
};

// Fills Q (N(0, q_std^2)) and KV (N(0, 1)) for `batch`, rounded to bf16, or for fp8 stored as
// Fp8Quantize(x, scale) in the arch's fp8 format with q_scale / kv_scale (scales ignored for
// bf16, which uses 1). The cache has 3 spare pages and kv_indices shuffles the pages.
DecodeCase MakeDecodeCase(const Batch& batch, uint64_t seed, double q_scale = 1.0,
                          double kv_scale = 1.0, double q_std = 2.0);

// Widens floats to doubles (to compare two float outputs with CompareOutputs).
std::vector<double> ToDouble(const std::vector<float>& x);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_DECODE_CASE_H_
