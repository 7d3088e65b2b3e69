// Fuzz targets: CP shard maps / views and the CP merge.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "metadata/cp_shard.h"
#include "sim/cp_merge.h"
#include "tests/fuzz/byte_reader.h"
#include "tests/fuzz/fuzz_targets.h"

namespace mlaps::fuzz {

// Shard views of a small batch: each rank's view is a valid CP batch, its kv_indices address
// the global cache's sub-pages, and the ranks' lengths add up to every request's length.
int FuzzCpShard(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  CpSharding s;
  s.world_size = in.Bool() ? static_cast<int>(in.InRange(1, 9)) : in.Take<int8_t>();
  s.interleave = in.Bool() ? 1 << in.InRange(0, 7) : in.Take<int16_t>();
  const int page_size = 1 << in.InRange(0, 8);
  std::vector<int> lens(in.InRange(1, 6));
  const int qlen = static_cast<int>(in.InRange(1, 4));
  for (int& l : lens) l = static_cast<int>(in.InRange(qlen, 3000));
  const Batch global = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, lens, qlen, page_size);
  std::vector<int32_t> pages(global.kv_indptr.back());
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(pages.size() - 1 - i);
  const int64_t sub_pages =
      s.interleave > 0 && page_size % s.interleave == 0
          ? int64_t{static_cast<int64_t>(pages.size())} * page_size / s.interleave
          : 0;
  std::vector<int64_t> total(lens.size(), 0);
  const int ranks = std::max(0, s.world_size);  // at most 127 (one signed byte)
  for (int rank = -1; rank <= ranks; ++rank) {
    absl::StatusOr<CpShardView> v = MakeCpShardView(global, pages, s, rank);
    const bool should_work =
        ValidateSharding(s, page_size).ok() && rank >= 0 && rank < s.world_size;
    if (v.ok() != should_work) {
      Fail(absl::StrCat("MakeCpShardView ok = ", v.ok(), " for W = ", s.world_size,
                        " I = ", s.interleave, " page ", page_size, " rank ", rank));
    }
    if (!v.ok()) continue;
    if (!ValidateBatch(v->batch).ok()) Fail("a shard view is not a valid batch");
    for (int32_t sub : v->kv_indices) {
      if (sub < 0 || sub >= sub_pages) Fail(absl::StrCat("sub-page ", sub, " outside the cache"));
    }
    for (size_t b = 0; b < lens.size(); ++b) total[b] += v->batch.kv_len(b);
  }
  if (ValidateSharding(s, page_size).ok()) {
    for (size_t b = 0; b < lens.size(); ++b) {
      if (total[b] != lens[b])
        Fail(absl::StrCat("shards of request ", b, " hold ", total[b], " of ", lens[b], " tokens"));
    }
  }
  return 0;
}

std::vector<std::string> CpShardSeeds() {
  std::vector<std::string> seeds;
  for (int w : {2, 3, 4, 7, 8}) {
    ByteWriter b;
    b.Put<uint8_t>(1);
    b.PutRange(w, 1, 9);
    b.Put<uint8_t>(1);
    b.PutRange(w % 3 == 0 ? 4 : 0, 0, 7);
    b.PutRange(6, 0, 8);
    b.PutRange(3, 1, 6);
    b.PutRange(2, 1, 4);
    for (int len : {13, 1200, 2999}) b.PutRange(len, 2, 3000);
    seeds.push_back(b.bytes());
  }
  return seeds;
}

// The merge on raw floats: never a NaN LSE; all-dead rows give O = 0, LSE = -inf; a row
// whose live ranks have finite O gets finite O.
int FuzzMerge(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const int world = static_cast<int>(in.InRange(1, 8));
  const int rows = static_cast<int>(in.InRange(1, 8));
  const int dim = static_cast<int>(in.InRange(1, 16));
  std::vector<std::vector<float>> o(world, std::vector<float>(rows * dim)),
      lse(world, std::vector<float>(rows));
  for (int r = 0; r < world; ++r) {
    for (float& x : lse[r]) x = in.Bool() ? in.Take<float>() : in.Take<int8_t>() / 4.0f;
    for (float& x : o[r]) x = in.Bool() ? in.Take<float>() : in.Take<int8_t>() / 16.0f;
  }
  std::vector<absl::Span<const float>> os(o.begin(), o.end()), ls(lse.begin(), lse.end());
  std::vector<float> out(rows * dim), out_lse(rows);
  if (!sim::MergeCpRanks(os, ls, rows, dim, absl::MakeSpan(out), absl::MakeSpan(out_lse)).ok()) {
    Fail("merge refused well-formed spans");
  }
  for (int row = 0; row < rows; ++row) {
    if (std::isnan(out_lse[row])) Fail("merged LSE is NaN");
    bool any_live = false, live_finite = true;
    for (int r = 0; r < world; ++r) {
      if (!std::isfinite(lse[r][row])) continue;
      any_live = true;
      for (int d = 0; d < dim; ++d) live_finite &= std::isfinite(o[r][row * dim + d]);
    }
    for (int d = 0; d < dim; ++d) {
      const float x = out[row * dim + d];
      if (!any_live && x != 0.0f) Fail("an all-dead row has O != 0");
      if (any_live && live_finite && std::isnan(x)) Fail("NaN from finite live ranks");
    }
    if (!any_live && out_lse[row] != -std::numeric_limits<float>::infinity()) {
      Fail("an all-dead row has LSE != -inf");
    }
  }
  return 0;
}

std::vector<std::string> MergeSeeds() {
  ByteWriter b;
  b.PutRange(3, 1, 8);
  b.PutRange(2, 1, 8);
  b.PutRange(4, 1, 16);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 2; ++i) {
      b.Put<uint8_t>(0);
      b.Put<int8_t>(static_cast<int8_t>(r * 3 - i));
    }
    for (int i = 0; i < 8; ++i) {
      b.Put<uint8_t>(0);
      b.Put<int8_t>(static_cast<int8_t>(i * 5 - r));
    }
  }
  return {b.bytes()};
}

}  // namespace mlaps::fuzz
