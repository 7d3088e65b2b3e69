// The CPU sparse gather (sim/sparse_gather.h) against the contract of
// metadata/sparse_gather_spec.h: hand-checked examples in both map forms, each drop reason and
// row error, padded rows, outputs left alone where they must be, size errors, and randomized
// rows (fixed seeds) against a naive restatement of the rules.
#include "sim/sparse_gather.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/batch.h"
#include "metadata/sparse_gather_spec.h"
#include "metadata/sparse_layout.h"

namespace mlaps::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int32_t kPoison = 0x5A5A5A5A;

// One gather call's owning inputs.
struct Case {
  int topk = 0;
  std::vector<int32_t> topk_indices, token_to_seq, token_bound, indptr;
  SparseMapForm form = SparseMapForm::kBlockTable;
  int num_requests = 0;
  std::vector<int32_t> block_table;
  int max_blocks = 0, page_size = 1;
  std::vector<int32_t> kv_indptr, kv_indices;

  SparseGatherInputs Inputs() const {
    SparseGatherInputs in;
    in.topk = topk;
    in.topk_indices = topk_indices;
    in.token_to_seq = token_to_seq;
    in.token_bound = token_bound;
    in.sparse_kv_indptr = indptr;
    in.map.form = form;
    in.map.num_requests = num_requests;
    in.map.block_table = block_table;
    in.map.max_blocks = max_blocks;
    in.map.page_size = page_size;
    in.map.kv_indptr = kv_indptr;
    in.map.kv_indices = kv_indices;
    return in;
  }
};

// indptr of min(L_j, topk) per token (0 for padded rows), as MakeSparseLayout builds it.
std::vector<int32_t> LayoutIndptr(const Case& c) {
  std::vector<int32_t> indptr = {0};
  for (size_t t = 0; t < c.token_to_seq.size(); ++t) {
    const int32_t cap = c.token_to_seq[t] < 0 ? 0 : std::min(c.token_bound[t], c.topk);
    indptr.push_back(indptr.back() + std::max(cap, 0));
  }
  return indptr;
}

SparseGatherResult Gather(const Case& c, int64_t capacity = -1) {
  absl::StatusOr<SparseGatherResult> r = SparseGather(c.Inputs(), capacity);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SparseGatherResult{};
}

std::vector<int32_t> StatusRow(const SparseGatherResult& r, int t) {
  return std::vector<int32_t>(r.status.begin() + t * kSparseGatherStatusWords,
                              r.status.begin() + (t + 1) * kSparseGatherStatusWords);
}

// Two requests, page size 4. Request 0's pages: 7, -1 (hole), 2; request 1's: 5, 0, 9.
Case BlockTableExample() {
  Case c;
  c.topk = 6;
  c.num_requests = 2;
  c.page_size = 4;
  c.max_blocks = 3;
  c.block_table = {7, -1, 2, 5, 0, 9};
  c.token_to_seq = {0, 0, 1, -1};
  c.token_bound = {10, 11, 3, 0};
  c.topk_indices = {
      // token 0 (L 10): 9 -> page 2 slot 9; 0 -> 28; -1 invalid; 5 -> block 1 = -1 unmapped;
      // 10 out of bound; 0 again duplicate.
      9, 0, -1, 5, 10, 0,
      // token 1 (L 11): 10 -> 10; 3 -> 31; 12 out of bound (block 3 would be outside too);
      // -7 invalid; 8 -> 8; 3 duplicate.
      10, 3, 12, -7, 8, 3,
      // token 2 (request 1, L 3 < topk): 2 -> 22; 1 -> 21; 0 -> 20; 3 out of bound; -1, -1.
      2, 1, 0, 3, -1, -1,
      // token 3: padded row, its entries are not looked at.
      1, 2, 3, 4, 5, 6};
  c.indptr = LayoutIndptr(c);  // caps 6, 6, 3, 0
  return c;
}

TEST(SparseGatherTest, HandCheckedBlockTable) {
  const Case c = BlockTableExample();
  ASSERT_THAT(c.indptr, ElementsAre(0, 6, 12, 15, 15));
  const SparseGatherResult r = Gather(c);
  EXPECT_THAT(r.counts, ElementsAre(2, 3, 3, 0));
  EXPECT_THAT(r.packed, ElementsAreArray({9, 28, -1, -1, -1, -1,  //
                                          10, 31, 8, -1, -1, -1,  //
                                          22, 21, 20}));
  EXPECT_THAT(r.dense, ElementsAreArray({9,  28, -1, -1, -1, -1,  //
                                         10, 31, 8,  -1, -1, -1,  //
                                         22, 21, 20, -1, -1, -1,  //
                                         -1, -1, -1, -1, -1, -1}));
  // invalid, out_of_bound, unmapped, duplicate, row error.
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(1, 1, 1, 1, kSparseRowOk));
  EXPECT_THAT(StatusRow(r, 1), ElementsAre(1, 1, 0, 1, kSparseRowOk));
  EXPECT_THAT(StatusRow(r, 2), ElementsAre(2, 1, 0, 0, kSparseRowOk));
  EXPECT_THAT(StatusRow(r, 3), ElementsAre(0, 0, 0, 0, kSparseRowOk));
  EXPECT_EQ(r.Total(kSparseDropDuplicate), 2);
}

// The same selections through the flat form: request 0's kv_indices list the slots of the
// block table example (hole at positions 4..7 as -1), request 1's likewise.
TEST(SparseGatherTest, HandCheckedFlatMatchesBlockTable) {
  const Case bt = BlockTableExample();
  Case c = bt;
  c.form = SparseMapForm::kFlat;
  c.block_table.clear();
  c.max_blocks = 0;
  c.kv_indptr = {0, 12, 24};
  for (int s = 0; s < 2; ++s) {
    for (int pos = 0; pos < 12; ++pos) {
      const int32_t page = bt.block_table[s * 3 + pos / 4];
      c.kv_indices.push_back(page < 0 ? -1 : page * 4 + pos % 4);
    }
  }
  const SparseGatherResult a = Gather(bt), b = Gather(c);
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.counts, b.counts);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.status, b.status);
}

TEST(SparseGatherTest, FlatFormRangesAndNegativeEntries) {
  Case c;
  c.form = SparseMapForm::kFlat;
  c.topk = 4;
  c.num_requests = 3;
  // Request 0: kv_indices[0..3) = 40, -5, 42. Request 1: [3, 2): malformed (lo > hi).
  // Request 2: [2, 9): hi beyond kv_indices (5 entries): malformed.
  c.kv_indptr = {0, 3, 2, 9};
  c.kv_indices = {40, -5, 42, 43, 44};
  c.token_to_seq = {0, 1, 2};
  c.token_bound = {5, 5, 5};
  c.topk_indices = {2, 1, 3, 0,  // 42; -5 unmapped; 3 >= 3 entries: unmapped; 40
                    0, 1, 2, 3,  // request 1 maps nothing
                    0, 1, 2, 3};
  c.indptr = LayoutIndptr(c);
  const SparseGatherResult r = Gather(c);
  EXPECT_THAT(r.counts, ElementsAre(2, 0, 0));
  EXPECT_THAT(std::vector<int32_t>(r.dense.begin(), r.dense.begin() + 4),
              ElementsAre(42, 40, -1, -1));
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(0, 0, 2, 0, 0));
  EXPECT_THAT(StatusRow(r, 1), ElementsAre(0, 0, 4, 0, 0));
  EXPECT_THAT(StatusRow(r, 2), ElementsAre(0, 0, 4, 0, 0));
}

TEST(SparseGatherTest, AllInvalidAndAllOutOfRange) {
  Case c;
  c.topk = 2048;
  c.num_requests = 1;
  c.page_size = 16;
  c.max_blocks = 200;
  for (int i = 0; i < 200; ++i) c.block_table.push_back(i);
  c.token_to_seq = {0, 0, 0};
  c.token_bound = {3000, 3000, 2};
  c.topk_indices.assign(3 * 2048, -1);
  for (int i = 0; i < 2048; ++i) {
    c.topk_indices[2048 + i] = 3000 + i;                     // token 1: all >= L
    c.topk_indices[4096 + i] = i % 2 == 0 ? 2 + i : -1 - i;  // token 2: L = 2 < topk
  }
  c.indptr = LayoutIndptr(c);
  ASSERT_THAT(c.indptr, ElementsAre(0, 2048, 4096, 4098));
  const SparseGatherResult r = Gather(c);
  EXPECT_THAT(r.counts, ElementsAre(0, 0, 0));
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(2048, 0, 0, 0, 0));
  EXPECT_THAT(StatusRow(r, 1), ElementsAre(0, 2048, 0, 0, 0));
  EXPECT_THAT(StatusRow(r, 2), ElementsAre(1024, 1024, 0, 0, 0));
  EXPECT_TRUE(std::all_of(r.packed.begin(), r.packed.end(), [](int32_t x) { return x == -1; }));
  EXPECT_TRUE(std::all_of(r.dense.begin(), r.dense.end(), [](int32_t x) { return x == -1; }));
}

// topk > L_j: every position below L_j selected (shuffled, with -1s): all kept, in column order.
TEST(SparseGatherTest, TopkAboveBoundKeepsEveryPositionInOrder) {
  Case c;
  c.topk = 64;
  c.num_requests = 1;
  c.page_size = 1;
  c.max_blocks = 50;
  for (int i = 0; i < 50; ++i) c.block_table.push_back(1000 + i);
  c.token_to_seq = {0};
  c.token_bound = {37};
  std::vector<int32_t> row(64, -1);
  for (int i = 0; i < 37; ++i) row[i] = i;
  std::mt19937 rng(5);
  std::shuffle(row.begin(), row.end(), rng);
  c.topk_indices = row;
  c.indptr = LayoutIndptr(c);
  const SparseGatherResult r = Gather(c);
  ASSERT_EQ(r.counts[0], 37);
  std::vector<int32_t> want;
  for (int32_t v : row) {
    if (v >= 0) want.push_back(1000 + v);
  }
  EXPECT_EQ(r.packed, want);
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(27, 0, 0, 0, 0));
}

// A later copy of a position is a duplicate even when the first copy is unmapped; the first
// copy is judged (and counted) as unmapped.
TEST(SparseGatherTest, DuplicatesKeepFirstOccurrence) {
  Case c;
  c.topk = 8;
  c.num_requests = 1;
  c.page_size = 2;
  c.max_blocks = 4;
  c.block_table = {3, -1, 0, 1};  // position 2, 3 unmapped; 4, 5 -> slots 0, 1
  c.token_to_seq = {0};
  c.token_bound = {8};
  c.topk_indices = {5, 2, 5, 4, 2, 2, 0, 4};
  c.indptr = LayoutIndptr(c);
  const SparseGatherResult r = Gather(c);
  EXPECT_EQ(r.counts[0], 3);
  EXPECT_THAT(std::vector<int32_t>(r.packed.begin(), r.packed.begin() + 3), ElementsAre(1, 0, 6));
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(0, 0, 1, 4, 0));
}

// Block table unmapped cases: block past max_blocks (with L above the table's reach), a
// negative entry, and a slot past INT32_MAX; slot 0 is a real slot when the table says so.
TEST(SparseGatherTest, BlockTableUnmapped) {
  Case c;
  c.topk = 5;
  c.num_requests = 1;
  c.page_size = 64;
  c.max_blocks = 3;
  c.block_table = {0, -3, 40000000};  // 40000000 * 64 > INT32_MAX
  c.token_to_seq = {0};
  c.token_bound = {1000};
  c.topk_indices = {0, 64, 130, 192, 63};
  c.indptr = LayoutIndptr(c);
  const SparseGatherResult r = Gather(c);
  EXPECT_EQ(r.counts[0], 2);
  EXPECT_THAT(std::vector<int32_t>(r.packed.begin(), r.packed.begin() + 2), ElementsAre(0, 63));
  EXPECT_THAT(StatusRow(r, 0), ElementsAre(0, 0, 3, 0, 0));
}

TEST(SparseGatherTest, RowErrors) {
  Case c = BlockTableExample();
  c.token_to_seq = {0, 2, 0, -2};   // token 1: request 2 of 2; token 3: -2
  c.token_bound = {10, 11, -1, 0};  // token 2: negative bound
  const SparseGatherResult r = Gather(c);
  EXPECT_EQ(StatusRow(r, 1)[kSparseStatusRowError], kSparseRowBadSeq);
  EXPECT_EQ(StatusRow(r, 2)[kSparseStatusRowError], kSparseRowBadBound);
  EXPECT_EQ(StatusRow(r, 3)[kSparseStatusRowError], kSparseRowBadSeq);
  EXPECT_THAT(r.counts, ElementsAre(2, 0, 0, 0));
  for (int t = 1; t < 4; ++t) {
    EXPECT_THAT(StatusRow(r, t), testing::Contains(0).Times(4)) << t;
    for (int k = 0; k < 6; ++k) EXPECT_EQ(r.dense[t * 6 + k], -1);
  }
  // Spans of rows with errors (other than a bad span) are -1.
  EXPECT_THAT(std::vector<int32_t>(r.packed.begin() + 6, r.packed.end()),
              ElementsAreArray(std::vector<int32_t>(9, -1)));

  // Too small a span: token 0 may keep min(10, 6) = 6 but gets 5.
  Case small = BlockTableExample();
  small.indptr = {0, 5, 11, 14, 14};
  const SparseGatherResult s = Gather(small);
  EXPECT_EQ(StatusRow(s, 0)[kSparseStatusRowError], kSparseRowSpanTooSmall);
  EXPECT_EQ(StatusRow(s, 1)[kSparseStatusRowError], kSparseRowOk);
  EXPECT_EQ(s.counts[0], 0);
  EXPECT_EQ(s.counts[1], 3);
  EXPECT_THAT(std::vector<int32_t>(s.packed.begin() + 5, s.packed.begin() + 8),
              ElementsAre(10, 31, 8));
}

// A bad span writes no packed entry (and its row keeps nothing); spans beyond the buffer and
// decreasing ones are bad; entries outside every span are never written.
TEST(SparseGatherTest, BadSpansWriteNothingIntoPacked) {
  Case c = BlockTableExample();
  c.indptr = {0, 6, 4, 20, 20};  // token 1: [6, 4); token 2: [4, 20) past 18 entries
  std::vector<int32_t> packed(18, kPoison), counts(4, kPoison), dense(24, kPoison),
      status(20, kPoison);
  ASSERT_TRUE(SparseGatherInto(c.Inputs(), {absl::MakeSpan(packed), absl::MakeSpan(counts),
                                            absl::MakeSpan(dense), absl::MakeSpan(status)})
                  .ok());
  EXPECT_THAT(counts, ElementsAre(2, 0, 0, 0));
  EXPECT_EQ(status[1 * 5 + kSparseStatusRowError], kSparseRowBadSpan);
  EXPECT_EQ(status[2 * 5 + kSparseStatusRowError], kSparseRowBadSpan);
  EXPECT_EQ(status[3 * 5 + kSparseStatusRowError], kSparseRowBadSpan);  // [20, 20) > 18
  EXPECT_THAT(std::vector<int32_t>(packed.begin(), packed.begin() + 6),
              ElementsAre(9, 28, -1, -1, -1, -1));
  EXPECT_TRUE(
      std::all_of(packed.begin() + 6, packed.end(), [](int32_t x) { return x == kPoison; }));
  EXPECT_TRUE(std::none_of(dense.begin(), dense.end(), [](int32_t x) { return x == kPoison; }));
  EXPECT_TRUE(std::none_of(status.begin(), status.end(), [](int32_t x) { return x == kPoison; }));
}

// Packed entries past indptr[T] (spare capacity) and spans wider than min(L, topk) keep what
// they held / get -1.
TEST(SparseGatherTest, SpareCapacityUntouchedAndWideSpansFilled) {
  Case c = BlockTableExample();
  c.indptr = {0, 6, 14, 17, 17};  // token 1's span is 8 wide (> 6)
  std::vector<int32_t> packed(25, kPoison), counts(4), dense(24), status(20);
  ASSERT_TRUE(SparseGatherInto(c.Inputs(), {absl::MakeSpan(packed), absl::MakeSpan(counts),
                                            absl::MakeSpan(dense), absl::MakeSpan(status)})
                  .ok());
  EXPECT_THAT(std::vector<int32_t>(packed.begin() + 6, packed.begin() + 14),
              ElementsAre(10, 31, 8, -1, -1, -1, -1, -1));
  EXPECT_TRUE(
      std::all_of(packed.begin() + 17, packed.end(), [](int32_t x) { return x == kPoison; }));
}

TEST(SparseGatherTest, SizeErrorsNameTheBufferAndWriteNothing) {
  const Case good = BlockTableExample();
  struct Planted {
    void (*plant)(Case*);
    const char* name;
  };
  const Planted cases[] = {
      {[](Case* c) { c->topk_indices.pop_back(); }, "topk_indices"},
      {[](Case* c) { c->token_bound.pop_back(); }, "token_bound"},
      {[](Case* c) { c->indptr.pop_back(); }, "sparse_kv_indptr"},
      {[](Case* c) { c->block_table.pop_back(); }, "block_table"},
      {[](Case* c) { c->page_size = 3; }, "page_size"},
      {[](Case* c) { c->topk = 0; }, "topk"},
      {[](Case* c) { c->num_requests = -1; }, "num_requests"},
      {[](Case* c) { c->max_blocks = -1; }, "max_blocks"},
      {[](Case* c) {
         c->form = SparseMapForm::kFlat;
         c->kv_indptr = {0, 1};
       },
       "kv_indptr"},
  };
  for (const Planted& p : cases) {
    Case c = good;
    p.plant(&c);
    std::vector<int32_t> packed(15, kPoison), counts(4, kPoison), dense(24, kPoison),
        status(20, kPoison);
    const absl::Status s =
        SparseGatherInto(c.Inputs(), {absl::MakeSpan(packed), absl::MakeSpan(counts),
                                      absl::MakeSpan(dense), absl::MakeSpan(status)});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(p.name));
    for (const auto* v : {&packed, &counts, &dense, &status}) {
      EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](int32_t x) { return x == kPoison; }))
          << p.name;
    }
  }
  // Output sizes.
  const Case c = BlockTableExample();
  std::vector<int32_t> packed(15), counts(3), dense(24), status(20);
  EXPECT_THAT(
      std::string(SparseGatherInto(c.Inputs(), {absl::MakeSpan(packed), absl::MakeSpan(counts),
                                                absl::MakeSpan(dense), absl::MakeSpan(status)})
                      .message()),
      HasSubstr("counts"));
  counts.resize(4);
  status.resize(19);
  EXPECT_THAT(
      std::string(SparseGatherInto(c.Inputs(), {absl::MakeSpan(packed), absl::MakeSpan(counts),
                                                absl::MakeSpan(dense), absl::MakeSpan(status)})
                      .message()),
      HasSubstr("status"));
  // T * topk overflowing int32.
  SparseGatherDims d;
  d.num_tokens = 1 << 20;
  d.topk = 4096;
  EXPECT_THAT(std::string(ValidateSparseGatherDims(d).message()), HasSubstr("overflows"));
}

TEST(SparseGatherTest, EmptyBatch) {
  Case c;
  c.topk = 2048;
  c.indptr = {0};
  const SparseGatherResult r = Gather(c);
  EXPECT_TRUE(r.packed.empty());
  EXPECT_TRUE(r.counts.empty());
}

// ---- Randomized against a naive restatement of the rules -----------------------------------

struct Naive {
  std::vector<int32_t> kept;
  int32_t drops[kSparseNumDropReasons] = {};
};

// O(topk^2): a column is a duplicate if any earlier column holds its value.
Naive NaiveRow(const int32_t* row, int topk, int64_t bound, const SparseKvMap& map, int s) {
  Naive n;
  for (int c = 0; c < topk; ++c) {
    const int64_t v = row[c];
    if (v < 0) {
      ++n.drops[kSparseDropInvalid];
      continue;
    }
    if (v >= bound) {
      ++n.drops[kSparseDropOutOfBound];
      continue;
    }
    if (std::find(row, row + c, row[c]) != row + c) {
      ++n.drops[kSparseDropDuplicate];
      continue;
    }
    int64_t slot = -1;
    if (map.form == SparseMapForm::kBlockTable) {
      const int64_t b = v / map.page_size;
      if (b < map.max_blocks && map.block_table[s * map.max_blocks + b] >= 0) {
        slot = int64_t{map.block_table[s * map.max_blocks + b]} * map.page_size + v % map.page_size;
        if (slot > 2147483647) slot = -1;
      }
    } else {
      const int64_t lo = map.kv_indptr[s], hi = map.kv_indptr[s + 1];
      if (lo >= 0 && lo <= hi && hi <= static_cast<int64_t>(map.kv_indices.size()) && v < hi - lo) {
        slot = map.kv_indices[lo + v];
      }
    }
    if (slot < 0) {
      ++n.drops[kSparseDropUnmapped];
    } else {
      n.kept.push_back(static_cast<int32_t>(slot));
    }
  }
  return n;
}

// A random case: B requests of random context, qlen tokens each plus padded requests, topk
// entries per row mixing valid distinct positions, -1, negatives, out-of-bound values and
// duplicates; maps with holes.
Case RandomCase(std::mt19937& rng, SparseMapForm form, int page_size, int topk) {
  std::uniform_int_distribution<int> pick(0, 99);
  const int b = 1 + rng() % 4, padded = rng() % 2, qlen = 1 + rng() % 4;
  Case c;
  c.form = form;
  c.topk = topk;
  c.num_requests = b;
  c.page_size = form == SparseMapForm::kFlat ? 1 : page_size;
  std::vector<int> lens(b);
  for (int& l : lens) l = rng() % (3 * topk);
  const int max_len = *std::max_element(lens.begin(), lens.end());
  if (form == SparseMapForm::kBlockTable) {
    // Sometimes too few columns for the longest request.
    c.max_blocks = (max_len + page_size - 1) / page_size + 1 - (pick(rng) < 20 ? 2 : 0);
    c.max_blocks = std::max(c.max_blocks, 0);
    for (int i = 0; i < b * c.max_blocks; ++i) {
      c.block_table.push_back(pick(rng) < 5 ? -1 - pick(rng) : static_cast<int32_t>(rng() % 5000));
    }
  } else {
    c.kv_indptr = {0};
    for (int s = 0; s < b; ++s) {
      const int n = std::max(0, lens[s] - (pick(rng) < 20 ? 5 : 0));
      for (int i = 0; i < n; ++i) {
        c.kv_indices.push_back(pick(rng) < 5 ? -1 : static_cast<int32_t>(rng() % 100000));
      }
      c.kv_indptr.push_back(static_cast<int32_t>(c.kv_indices.size()));
    }
  }
  for (int s = 0; s < b + padded; ++s) {
    for (int j = 0; j < qlen; ++j) {
      const bool real = s < b;
      c.token_to_seq.push_back(real ? s : -1);
      const int bound = real ? std::max(lens[s] - qlen + j + 1, 0) : 0;
      c.token_bound.push_back(bound);
      for (int k = 0; k < topk; ++k) {
        const int p = pick(rng);
        int32_t v;
        if (p < 10) {
          v = -1;
        } else if (p < 12) {
          v = -static_cast<int32_t>(rng() % 1000) - 2;
        } else if (p < 17) {
          v = bound + static_cast<int32_t>(rng() % 100);
        } else if (p < 22 && k > 0) {
          v = c.topk_indices[c.topk_indices.size() - 1 - rng() % k];  // a duplicate
        } else {
          v = bound > 0 ? static_cast<int32_t>(rng() % bound) : -1;
        }
        c.topk_indices.push_back(v);
      }
    }
  }
  c.indptr = LayoutIndptr(c);
  return c;
}

TEST(SparseGatherTest, RandomizedMatchesNaiveRules) {
  std::mt19937 rng(20240611);
  int64_t kept_total = 0, drops_total[kSparseNumDropReasons] = {};
  for (int iter = 0; iter < 300; ++iter) {
    const SparseMapForm form = iter % 3 == 0 ? SparseMapForm::kFlat : SparseMapForm::kBlockTable;
    const int page = (int[]){1, 16, 64}[iter % 3];
    const int topk = (int[]){1, 7, 64, 300}[iter % 4];
    const Case c = RandomCase(rng, form, page, topk);
    const SparseGatherResult r = Gather(c);
    const SparseGatherInputs in = c.Inputs();
    for (size_t t = 0; t < c.token_to_seq.size(); ++t) {
      SCOPED_TRACE(testing::Message() << "iter " << iter << " token " << t);
      ASSERT_EQ(r.Status(t, kSparseStatusRowError), kSparseRowOk);
      const int s = c.token_to_seq[t];
      Naive n;
      if (s >= 0) n = NaiveRow(c.topk_indices.data() + t * topk, topk, c.token_bound[t], in.map, s);
      ASSERT_EQ(r.counts[t], static_cast<int32_t>(n.kept.size()));
      for (int k = 0; k < kSparseNumDropReasons; ++k) {
        ASSERT_EQ(r.Status(t, k), n.drops[k]) << "reason " << k;
        drops_total[k] += n.drops[k];
      }
      if (s >= 0) {
        int sum = r.counts[t];
        for (int k = 0; k < kSparseNumDropReasons; ++k) sum += r.Status(t, k);
        ASSERT_EQ(sum, topk);
      }
      kept_total += n.kept.size();
      n.kept.resize(topk, -1);
      ASSERT_TRUE(std::equal(n.kept.begin(), n.kept.end(), r.dense.begin() + t * topk));
      const int lo = c.indptr[t], hi = c.indptr[t + 1];
      ASSERT_TRUE(std::equal(r.packed.begin() + lo, r.packed.begin() + hi, n.kept.begin()));
    }
  }
  // Every kind of entry occurred.
  EXPECT_GT(kept_total, 1000);
  for (int k = 0; k < kSparseNumDropReasons; ++k) EXPECT_GT(drops_total[k], 50) << k;
}

// ---- With MakeSparseLayout and CompactSparseBatch ------------------------------------------

TEST(SparseGatherTest, LayoutIndptrWithoutDropsCompactsToTheLayoutBatch) {
  const std::vector<int32_t> lens = {3000, 2049};
  absl::StatusOr<SparseLayout> layout =
      MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, lens, /*qlen=*/4, /*topk=*/2048,
                       /*padded_batch=*/3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  Case c;
  c.topk = 2048;
  c.num_requests = 2;
  c.form = SparseMapForm::kFlat;
  c.kv_indptr = {0, 3000, 3000 + 2049};
  for (int i = 0; i < 5049; ++i) c.kv_indices.push_back(5049 - i);
  c.token_to_seq = layout->token_to_seq;
  c.token_bound = layout->token_bound;
  c.indptr = layout->batch.kv_indptr;
  std::mt19937 rng(3);
  for (size_t t = 0; t < c.token_to_seq.size(); ++t) {
    std::vector<int32_t> pos(std::max(c.token_bound[t], 0));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    std::shuffle(pos.begin(), pos.end(), rng);
    pos.resize(std::min<size_t>(pos.size(), 2048));
    pos.resize(2048, -1);
    c.topk_indices.insert(c.topk_indices.end(), pos.begin(), pos.end());
  }
  const SparseGatherResult r = Gather(c);
  for (size_t t = 0; t < c.token_to_seq.size(); ++t) {
    EXPECT_EQ(r.counts[t], c.indptr[t + 1] - c.indptr[t]) << t;
  }
  EXPECT_EQ(
      r.Total(kSparseDropUnmapped) + r.Total(kSparseDropDuplicate) + r.Total(kSparseDropOutOfBound),
      0);
  absl::StatusOr<GatheredBatch> g = CompactSparseBatch(layout->batch, c.indptr, r.packed, r.counts);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->batch.kv_indptr, layout->batch.kv_indptr);
  EXPECT_EQ(g->kv_indices, r.packed);
  EXPECT_TRUE(ValidateBatch(g->batch).ok());
}

TEST(SparseGatherTest, CompactSparseBatchShrinksSpansToCounts) {
  absl::StatusOr<SparseLayout> layout =
      MakeSparseLayout(Arch::kSm90, DType::kBf16, 16, {5}, /*qlen=*/2, /*topk=*/4,
                       /*padded_batch=*/1);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->batch.kv_indptr, (std::vector<int32_t>{0, 4, 8}));
  const std::vector<int32_t> packed = {7, 8, -1, -1, 9, -1, -1, -1};
  absl::StatusOr<GatheredBatch> g =
      CompactSparseBatch(layout->batch, layout->batch.kv_indptr, packed, {2, 1});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->batch.kv_indptr, ElementsAre(0, 2, 3));
  EXPECT_THAT(g->kv_indices, ElementsAre(7, 8, 9));
  EXPECT_TRUE(ValidateBatch(g->batch).ok());
  EXPECT_FALSE(CompactSparseBatch(layout->batch, layout->batch.kv_indptr, packed, {5, 1}).ok());
  EXPECT_FALSE(CompactSparseBatch(layout->batch, {0, 4}, packed, {2, 1}).ok());
}

}  // namespace
}  // namespace mlaps::sim
