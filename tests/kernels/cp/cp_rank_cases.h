// The CP rank runner's test cases (issue 17), shared by the CPU test of its host side
// (cp_rank_setup_test.cc) and the GPU test (cp_rank_runner_test.hip): the (H, qlen) shapes
// (16,4) (32,3) (64,2) (128,2) and (16,1), bf16 and fp8 (q_scale 0.7, kv_scale 1.3), W = 2,
// I = 1 (global page 16) and 16 (global page 64). Request 0 is as short as the mask allows
// (kv_len = qlen; 1 on (16,1): shorter than W, so rank 1 holds none of it; with I = 16
// shorter than W * I on every shape), so ranks see no token of some rows (O = 0, LSE = -inf
// before the merge). No GPU headers.
#ifndef MLAPS_TESTS_KERNELS_CP_CP_RANK_CASES_H_
#define MLAPS_TESTS_KERNELS_CP_CP_RANK_CASES_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "metadata/batch.h"
#include "metadata/cp_shard.h"
#include "metadata/types.h"
#include "sim/decode_case.h"
#include "sim/numerics.h"
#include "tests/kernels/decode/mla_decode_testing.h"

namespace mlaps::cp_testing {

struct RankCase {
  DType dtype;
  int heads, qlen;
  int world, interleave;
  std::vector<int> kv_lens;  // request 0 first: the short one
  std::string Name() const {
    return std::string(DTypeName(dtype)) + " H" + std::to_string(heads) + " q" +
           std::to_string(qlen) + " W" + std::to_string(world) + " I" + std::to_string(interleave);
  }
  CpSharding Sharding() const { return CpSharding{world, interleave}; }
  Batch Global() const {
    return MakeVarlenBatch(Arch::kSm90, dtype, heads, kv_lens, qlen, interleave == 1 ? 16 : 64);
  }
  sim::DecodeCase Case(uint64_t seed) const {
    const bool fp8 = dtype == DType::kFp8;
    return sim::MakeDecodeCase(Global(), seed, fp8 ? 0.7 : 1.0, fp8 ? 1.3 : 1.0);
  }
};

// Every shape x dtype x I at W = 2; `long_lens` are the other requests' kv lengths.
inline std::vector<RankCase> AllCases(const std::vector<int>& long_lens) {
  struct Shape {
    int heads, qlen;
  };
  const Shape shapes[] = {{16, 4}, {32, 3}, {64, 2}, {128, 2}, {16, 1}};
  std::vector<RankCase> out;
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::kBf16, DType::kFp8}) {
      for (int interleave : {1, 16}) {
        RankCase c{dtype, s.heads, s.qlen, 2, interleave, {s.qlen}};
        c.kv_lens.insert(c.kv_lens.end(), long_lens.begin(), long_lens.end());
        out.push_back(c);
      }
    }
  }
  return out;
}

// Q / KV values as the kernels' element bytes: the decode tests' conversion.
using testing::ToDeviceBytes;

}  // namespace mlaps::cp_testing

#endif  // MLAPS_TESTS_KERNELS_CP_CP_RANK_CASES_H_
