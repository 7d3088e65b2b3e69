#include "sim/decode_case.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "metadata/types.h"
#include "sim/numerics.h"

namespace mlaps::sim {

DecodeInputs DecodeCase::Inputs() const {
  DecodeInputs in;
  in.q = q;
  in.kv_cache = kv_cache;
  in.kv_indices = kv_indices;
  in.q_scale = q_scale;
  in.kv_scale = kv_scale;
  return in;
}

DecodeCase MakeDecodeCase(const Batch& batch, uint64_t seed, double q_scale, double kv_scale,
                          double q_std) {
  DecodeCase c;
  c.batch = batch;
  const bool fp8 = batch.q_dtype == DType::kFp8;
  c.q_scale = fp8 ? q_scale : 1.0;
  c.kv_scale = fp8 ? kv_scale : 1.0;
  const Fp8Format format = Fp8FormatOf(batch.arch);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto store = [&](float x, double scale) {
    return fp8 ? Fp8Quantize(x, static_cast<float>(scale), format) : RoundToBf16(x);
  };
  c.q.resize(batch.total_q_tokens() * batch.num_heads * kHeadDimQk);
  for (float& x : c.q) x = store(static_cast<float>(q_std) * normal(rng), c.q_scale);
  const int32_t used = batch.kv_indptr.back();
  const int32_t pages = used + 3;
  c.kv_cache.resize(int64_t{pages} * batch.page_size * kHeadDimQk);
  for (float& x : c.kv_cache) x = store(normal(rng), c.kv_scale);
  std::vector<int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.kv_indices.assign(perm.begin(), perm.begin() + used);
  return c;
}

std::vector<double> ToDouble(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

}  // namespace mlaps::sim
