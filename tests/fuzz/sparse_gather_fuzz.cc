// Fuzz target: the sparse KV gather's CPU model (sim/sparse_gather.h) on arbitrary rows and
// maps, checked against the spec's rules re-derived here independently: for a live row,
// counts + the four drop counts = topk, kept slots are exactly the slots of the first
// occurrences of valid mapped positions in column order, the span tail is -1, the dense row is
// the kept prefix then -1; padded and erroneous rows keep nothing.
#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "sim/sparse_gather.h"
#include "tests/fuzz/byte_reader.h"
#include "tests/fuzz/fuzz_targets.h"

namespace mlaps::fuzz {
namespace {

// The slot of (seq, pos) under the map, or -1 when unmapped (spec rule 4).
int64_t Slot(const sim::SparseKvMap& m, int seq, int64_t pos) {
  if (m.form == SparseMapForm::kBlockTable) {
    const int64_t block = pos / m.page_size;
    if (block >= m.max_blocks) return -1;
    const int64_t page = m.block_table[int64_t{seq} * m.max_blocks + block];
    if (page < 0) return -1;
    const int64_t slot = page * m.page_size + pos % m.page_size;
    return slot > std::numeric_limits<int32_t>::max() ? -1 : slot;
  }
  const int64_t lo = m.kv_indptr[seq], hi = m.kv_indptr[seq + 1];
  if (lo < 0 || lo > hi || hi > static_cast<int64_t>(m.kv_indices.size())) return -1;
  if (pos >= hi - lo) return -1;
  const int32_t slot = m.kv_indices[lo + pos];
  return slot < 0 ? -1 : slot;
}

}  // namespace

int FuzzSparseGather(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const int topk = static_cast<int>(in.InRange(1, 64));
  const int tokens = static_cast<int>(in.InRange(1, 24));
  const int requests = static_cast<int>(in.InRange(1, 6));
  sim::SparseKvMap map;
  map.num_requests = requests;
  map.form = in.Bool() ? SparseMapForm::kFlat : SparseMapForm::kBlockTable;
  std::vector<int32_t> table, indptr, indices;
  if (map.form == SparseMapForm::kBlockTable) {
    map.page_size = 1 << in.InRange(0, 6);
    map.max_blocks = static_cast<int>(in.InRange(1, 16));
    for (int i = 0; i < requests * map.max_blocks; ++i) {
      table.push_back(in.Bool() ? static_cast<int32_t>(in.InRange(-2, 1000)) : in.Take<int32_t>());
    }
    map.block_table = table;
  } else {
    indptr.push_back(0);
    for (int r = 0; r < requests; ++r) {
      indptr.push_back(in.Bool() ? indptr.back() + static_cast<int32_t>(in.InRange(0, 80))
                                 : static_cast<int32_t>(in.InRange(-5, 400)));
    }
    const int n = static_cast<int>(in.InRange(0, 400));
    for (int i = 0; i < n; ++i) indices.push_back(static_cast<int32_t>(in.InRange(-3, 5000)));
    map.kv_indptr = indptr;
    map.kv_indices = indices;
  }
  std::vector<int32_t> seq(tokens), bound(tokens), kv_indptr(tokens + 1, 0), topk_indices;
  for (int t = 0; t < tokens; ++t) {
    seq[t] = static_cast<int32_t>(in.InRange(-2, requests));
    bound[t] = in.Bool() ? static_cast<int32_t>(in.InRange(-1, 200)) : in.Take<int16_t>();
    const int64_t need = std::min<int64_t>(std::max(bound[t], 0), topk);
    kv_indptr[t + 1] = kv_indptr[t] + static_cast<int32_t>(in.Bool() ? need : in.InRange(0, 70));
  }
  if (in.Bool()) kv_indptr[in.InRange(0, tokens)] = in.Take<int16_t>();  // a broken indptr
  for (int i = 0; i < tokens * topk; ++i) {
    topk_indices.push_back(in.Bool() ? static_cast<int32_t>(in.InRange(-2, 220))
                                     : in.Take<int32_t>());
  }
  sim::SparseGatherInputs inputs{topk, topk_indices, seq, bound, kv_indptr, map};
  const int64_t capacity =
      std::max<int32_t>(0, *std::max_element(kv_indptr.begin(), kv_indptr.end()));
  absl::StatusOr<sim::SparseGatherResult> r = sim::SparseGather(inputs, capacity);
  if (!r.ok()) return 0;
  // A row with a bad span means the indptr is not monotone: other spans may overlap, and
  // what overlapping spans hold is unspecified (the spec), so packed is checked only without.
  bool spans_disjoint = true;
  for (int t = 0; t < tokens; ++t) {
    spans_disjoint &= r->Status(t, kSparseStatusRowError) != kSparseRowBadSpan;
  }
  for (int t = 0; t < tokens; ++t) {
    const int32_t err = r->Status(t, kSparseStatusRowError);
    const int32_t count = r->counts[t];
    const int32_t* dense = &r->dense[int64_t{t} * topk];
    if (err != kSparseRowOk || seq[t] == -1) {
      if (count != 0) Fail(absl::StrCat("token ", t, ": a dead row kept ", count));
      for (int c = 0; c < topk; ++c) {
        if (dense[c] != -1) Fail("a dead row's dense entry is not -1");
      }
      continue;
    }
    // The rules, re-derived.
    std::vector<int32_t> kept;
    int64_t drops[4] = {0, 0, 0, 0};
    std::set<int32_t> seen;
    for (int c = 0; c < topk; ++c) {
      const int32_t v = topk_indices[int64_t{t} * topk + c];
      if (v < 0) {
        ++drops[kSparseDropInvalid];
      } else if (v >= bound[t]) {
        ++drops[kSparseDropOutOfBound];
      } else if (!seen.insert(v).second) {
        ++drops[kSparseDropDuplicate];
      } else if (const int64_t slot = Slot(map, seq[t], v); slot < 0) {
        ++drops[kSparseDropUnmapped];
      } else {
        kept.push_back(static_cast<int32_t>(slot));
      }
    }
    if (count != static_cast<int32_t>(kept.size())) {
      Fail(absl::StrCat("token ", t, ": kept ", count, ", the rules keep ", kept.size()));
    }
    for (int reason = 0; reason < kSparseNumDropReasons; ++reason) {
      if (r->Status(t, reason) != drops[reason]) {
        Fail(absl::StrCat("token ", t, ": drop reason ", reason, " counted ", r->Status(t, reason),
                          ", the rules say ", drops[reason]));
      }
    }
    for (int c = 0; c < topk; ++c) {
      const int32_t want = c < count ? kept[c] : -1;
      if (dense[c] != want) Fail(absl::StrCat("token ", t, " dense[", c, "] wrong"));
    }
    for (int32_t i = kv_indptr[t]; spans_disjoint && i < kv_indptr[t + 1]; ++i) {
      const int32_t want = i - kv_indptr[t] < count ? kept[i - kv_indptr[t]] : -1;
      if (r->packed[i] != want) Fail(absl::StrCat("token ", t, " packed[", i, "] wrong"));
    }
  }
  return 0;
}

std::vector<std::string> SparseGatherSeeds() {
  std::vector<std::string> seeds;
  for (int form = 0; form < 2; ++form) {
    ByteWriter w;
    w.PutRange(16, 1, 64);  // topk
    w.PutRange(4, 1, 24);   // tokens
    w.PutRange(2, 1, 6);    // requests
    w.Put<uint8_t>(form);
    if (form == 0) {
      w.PutRange(2, 0, 6);  // page 4
      w.PutRange(8, 1, 16);
      for (int i = 0; i < 16; ++i) {
        w.Put<uint8_t>(1);
        w.PutRange(i % 5 == 4 ? -1 : 10 + i, -2, 1000);
      }
    } else {
      for (int r = 0; r < 2; ++r) {
        w.Put<uint8_t>(1);
        w.PutRange(30, 0, 80);
      }
      w.PutRange(60, 0, 400);
      for (int i = 0; i < 60; ++i) w.PutRange(i % 7 == 6 ? -1 : 100 + i, -3, 5000);
    }
    for (int t = 0; t < 4; ++t) {
      w.PutRange(t % 3 == 2 ? -1 : t % 2, -2, 6);
      w.Put<uint8_t>(1);
      w.PutRange(t * 9 + 3, -1, 200);
      w.Put<uint8_t>(1);
    }
    w.Put<uint8_t>(0);
    for (int i = 0; i < 4 * 16; ++i) {
      w.Put<uint8_t>(1);
      w.PutRange(i % 11 == 10 ? -1 : (i * 7) % 40, -2, 220);
    }
    seeds.push_back(w.bytes());
  }
  return seeds;
}

}  // namespace mlaps::fuzz
