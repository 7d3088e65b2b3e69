// The GPU sparse gather (kernels/sparse_gather/sparse_gather.h) against the CPU model
// (sim/sparse_gather.h), every output word compared: hand examples, adversarial rows (all -1, all
// out of range, topk > L_j, padded rows, duplicates, negative block-table entries, malformed flat
// ranges, every row error), random batches in both map forms at page sizes 1, 16 and 64, topk from
// 1 to 4096, T up to 16384 at topk 2048. Outputs are poisoned before each run and surrounded by
// guard words: the GPU must write exactly the words the CPU writes (every counts / dense /
// status word, every span word) and leave the rest (guards, spare packed capacity) alone.
// Also: unaligned buffers (scalar paths), host API errors (nothing written), graph replay.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/platform/hip_runtime.h"
#include "kernels/sparse_gather/sparse_gather.h"
#include "metadata/sparse_gather_spec.h"
#include "sim/sparse_gather.h"

namespace mlaps {
namespace {

#define ASSERT_HIP_OK(expr)                                              \
  do {                                                                   \
    hipError_t e_ = (expr);                                              \
    ASSERT_EQ(e_, hipSuccess) << #expr << ": " << hipGetErrorString(e_); \
  } while (0)

constexpr int32_t kPoison = 0x5A5A5A5A;  // every byte 0x5A: hipMemset-able
constexpr int64_t kGuard = 64;           // guard words before and after every output

// One gather call's owning host inputs.
struct Case {
  std::string name;
  int topk = 0;
  std::vector<int32_t> topk_indices, token_to_seq, token_bound, indptr;
  SparseMapForm form = SparseMapForm::kBlockTable;
  int num_requests = 0;
  std::vector<int32_t> block_table;
  int max_blocks = 0, page_size = 1;
  std::vector<int32_t> kv_indptr, kv_indices;
  int64_t packed_capacity = -1;  // -1: indptr.back() + 37 spare entries

  int64_t num_tokens() const { return static_cast<int64_t>(token_to_seq.size()); }
  int64_t Capacity() const {
    return packed_capacity >= 0 ? packed_capacity : std::max(indptr.back(), 0) + 37;
  }
  sim::SparseGatherInputs Inputs() const {
    sim::SparseGatherInputs in;
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

std::vector<int32_t> LayoutIndptr(const Case& c) {
  std::vector<int32_t> indptr = {0};
  for (int64_t t = 0; t < c.num_tokens(); ++t) {
    const int32_t cap = c.token_to_seq[t] < 0 ? 0 : std::min(c.token_bound[t], c.topk);
    indptr.push_back(indptr.back() + std::max(cap, 0));
  }
  return indptr;
}

// ---- Case builders ----------------------------------------------------------------------

struct Mix {
  int invalid = 0;         // percent of columns -1 (or another negative value)
  int out = 0;             // percent >= L_j
  int dup = 0;             // percent repeating an earlier column
  int map_holes = 0;       // percent of negative map entries
  bool short_map = false;  // the map ends before the longest request does
};

// B requests of context in [min_len, max_len], qlen tokens each, `padded` padded requests.
// Rows: min(L_j, topk) distinct positions below L_j in random order, -1 padded, then `mix`
// noise planted over random columns.
Case RandomCase(std::mt19937& rng, SparseMapForm form, int page_size, int topk, int batch, int qlen,
                int padded, int min_len, int max_len, const Mix& mix) {
  std::uniform_int_distribution<int> pct(0, 99);
  Case c;
  c.form = form;
  c.topk = topk;
  c.num_requests = batch;
  c.page_size = form == SparseMapForm::kFlat ? 1 : page_size;
  std::vector<int> lens(batch);
  for (int& l : lens) l = min_len + static_cast<int>(rng() % (max_len - min_len + 1));
  const int longest = batch > 0 ? *std::max_element(lens.begin(), lens.end()) : 0;
  if (form == SparseMapForm::kBlockTable) {
    c.max_blocks = std::max(1, (longest + page_size - 1) / page_size - (mix.short_map ? 2 : 0));
    c.block_table.resize(int64_t{batch} * c.max_blocks);
    for (int32_t& e : c.block_table) {
      e = pct(rng) < mix.map_holes ? -1 - static_cast<int32_t>(rng() % 3)
                                   : static_cast<int32_t>(rng() % (1 << 20));
    }
  } else {
    c.kv_indptr = {0};
    for (int s = 0; s < batch; ++s) {
      const int n = std::max(0, lens[s] - (mix.short_map ? 100 : 0));
      for (int i = 0; i < n; ++i) {
        c.kv_indices.push_back(pct(rng) < mix.map_holes ? -1
                                                        : static_cast<int32_t>(rng() % (1 << 26)));
      }
      c.kv_indptr.push_back(static_cast<int32_t>(c.kv_indices.size()));
    }
  }
  std::vector<int32_t> pool;
  for (int s = 0; s < batch + padded; ++s) {
    for (int j = 0; j < qlen; ++j) {
      const bool real = s < batch;
      c.token_to_seq.push_back(real ? s : -1);
      const int bound = real ? std::max(lens[s] - qlen + j + 1, 0) : 0;
      c.token_bound.push_back(bound);
      // Distinct positions: a partial Fisher-Yates over [0, bound).
      const int keep = std::min(bound, topk);
      pool.resize(bound);
      std::iota(pool.begin(), pool.end(), 0);
      for (int i = 0; i < keep; ++i) std::swap(pool[i], pool[i + rng() % (bound - i)]);
      const size_t row0 = c.topk_indices.size();
      c.topk_indices.insert(c.topk_indices.end(), pool.begin(), pool.begin() + keep);
      c.topk_indices.resize(row0 + topk, -1);
      int32_t* row = c.topk_indices.data() + row0;
      for (int k = 0; k < topk; ++k) {
        const int p = pct(rng);
        if (p < mix.invalid) {
          row[k] = p % 2 ? -1 : -2 - static_cast<int32_t>(rng() % 100000);
        } else if (p < mix.invalid + mix.out) {
          row[k] = bound + static_cast<int32_t>(rng() % 5000);
        } else if (p < mix.invalid + mix.out + mix.dup && k > 0) {
          row[k] = row[rng() % k];
        }
      }
      if (!real) {  // the padded row's values are garbage that must not be looked at
        for (int k = 0; k < topk; ++k) row[k] = static_cast<int32_t>(rng());
      }
    }
  }
  c.indptr = LayoutIndptr(c);
  return c;
}

// ---- Running both -----------------------------------------------------------------------

struct Outputs {
  std::vector<int32_t> packed, counts, dense, status;  // each with kGuard words either side
};

Outputs PoisonedOutputs(const Case& c) {
  const int64_t t = c.num_tokens();
  Outputs o;
  o.packed.assign(c.Capacity() + 2 * kGuard, kPoison);
  o.counts.assign(t + 2 * kGuard, kPoison);
  o.dense.assign(t * c.topk + 2 * kGuard, kPoison);
  o.status.assign(t * kSparseGatherStatusWords + 2 * kGuard, kPoison);
  return o;
}

Outputs CpuRun(const Case& c) {
  Outputs o = PoisonedOutputs(c);
  auto inner = [](std::vector<int32_t>& v) {
    return absl::MakeSpan(v.data() + kGuard, v.size() - 2 * kGuard);
  };
  const absl::Status s = sim::SparseGatherInto(
      c.Inputs(), {inner(o.packed), inner(o.counts), inner(o.dense), inner(o.status)});
  EXPECT_TRUE(s.ok()) << s;
  return o;
}

// Device buffers for one case: inputs uploaded, outputs in one poisoned slab.
class Device {
 public:
  ~Device() {
    for (void* p : allocations_) (void)hipFree(p);
  }

  // `misalign` shifts topk_indices and dense by one int32 (the scalar load / store paths).
  GpuSparseGatherParams Upload(const Case& c, bool misalign = false) {
    GpuSparseGatherParams p;
    p.dims = sim::DimsOf(c.Inputs(), c.Capacity());
    p.topk_indices = Put(c.topk_indices, misalign);
    p.token_to_seq = Put(c.token_to_seq);
    p.token_bound = Put(c.token_bound);
    p.sparse_kv_indptr = Put(c.indptr);
    p.block_table = Put(c.block_table);
    p.kv_indptr = Put(c.kv_indptr);
    p.kv_indices = Put(c.kv_indices);
    host_ = PoisonedOutputs(c);
    sizes_[0] = host_.packed.size();
    sizes_[1] = host_.counts.size();
    sizes_[2] = host_.dense.size() + (misalign ? 1 : 0);
    sizes_[3] = host_.status.size();
    int64_t words = 0;  // each buffer starts 16-byte aligned (the vector paths)
    for (int64_t n : sizes_) words += (n + 3) / 4 * 4;
    slab_ = Alloc(words);
    slab_words_ = words;
    int32_t* at = slab_;
    int32_t** outs[4] = {&p.packed, &p.counts, &p.dense, &p.status};
    for (int i = 0; i < 4; ++i) {
      starts_[i] = at;
      *outs[i] = at + kGuard + (i == 2 && misalign ? 1 : 0);
      at += (sizes_[i] + 3) / 4 * 4;
    }
    misalign_ = misalign;
    Poison();
    return p;
  }

  void Poison() { ASSERT_HIP_OK(hipMemset(slab_, 0x5A, slab_words_ * sizeof(int32_t))); }

  Outputs Download() {
    Outputs o = host_;
    std::vector<int32_t>* outs[4] = {&o.packed, &o.counts, &o.dense, &o.status};
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> raw(sizes_[i]);
      EXPECT_EQ(hipMemcpy(raw.data(), starts_[i], raw.size() * 4, hipMemcpyDeviceToHost),
                hipSuccess);
      const int shift = i == 2 && misalign_ ? 1 : 0;
      if (shift) {
        EXPECT_EQ(raw[0], kPoison) << "word before the shifted dense buffer";
      }
      std::copy(raw.begin() + shift, raw.end(), outs[i]->begin());
    }
    return o;
  }

 private:
  int32_t* Alloc(int64_t words) {
    int32_t* d = nullptr;
    EXPECT_EQ(hipMalloc(&d, std::max<int64_t>(words, 1) * sizeof(int32_t)), hipSuccess);
    allocations_.push_back(d);
    return d;
  }
  const int32_t* Put(const std::vector<int32_t>& v, bool misalign = false) {
    if (v.empty()) return nullptr;
    int32_t* d = Alloc(v.size() + (misalign ? 1 : 0));
    EXPECT_EQ(hipMemcpy(d + (misalign ? 1 : 0), v.data(), v.size() * 4, hipMemcpyHostToDevice),
              hipSuccess);
    return d + (misalign ? 1 : 0);
  }

  std::vector<void*> allocations_;
  Outputs host_;
  int32_t* slab_ = nullptr;
  int64_t slab_words_ = 0;
  int32_t* starts_[4] = {};
  int64_t sizes_[4] = {};
  bool misalign_ = false;
};

// Packed words that lie in two or more well-formed spans (only a bad-span row makes any):
// the spec leaves them unspecified.
std::vector<char> OverlappedWords(const Case& c) {
  std::vector<int> cover(c.Capacity(), 0);
  for (int64_t t = 0; t < c.num_tokens(); ++t) {
    const int64_t lo = c.indptr[t], hi = c.indptr[t + 1];
    if (lo < 0 || lo > hi || hi > c.Capacity()) continue;
    for (int64_t i = lo; i < hi; ++i) ++cover[i];
  }
  std::vector<char> overlapped(cover.size());
  for (size_t i = 0; i < cover.size(); ++i) overlapped[i] = cover[i] > 1;
  return overlapped;
}

// Compares word for word; returns mismatches (first few printed).
int64_t CompareWords(const char* what, const std::vector<int32_t>& gpu,
                     const std::vector<int32_t>& cpu, const std::vector<char>* skip = nullptr) {
  EXPECT_EQ(gpu.size(), cpu.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(gpu.size(), cpu.size()); ++i) {
    if (skip != nullptr && i >= kGuard && i - kGuard < skip->size() && (*skip)[i - kGuard]) {
      continue;
    }
    if (gpu[i] != cpu[i]) {
      if (bad < 5) {
        ADD_FAILURE() << what << "[" << static_cast<int64_t>(i) - kGuard << "]: gpu " << gpu[i]
                      << " cpu " << cpu[i] << (cpu[i] == kPoison ? " (must stay untouched)" : "")
                      << (gpu[i] == kPoison ? " (not written)" : "");
      }
      ++bad;
    }
  }
  return bad;
}

// Expected-write structure of the CPU result itself: guards untouched, counts / dense /
// status fully written, packed written exactly on well-formed spans.
void CheckWriteSet(const Case& c, const Outputs& cpu) {
  auto all_poison = [](const std::vector<int32_t>& v, int64_t from, int64_t to) {
    return std::all_of(v.begin() + from, v.begin() + to, [](int32_t x) { return x == kPoison; });
  };
  auto none_poison = [](const std::vector<int32_t>& v, int64_t from, int64_t to) {
    return std::none_of(v.begin() + from, v.begin() + to, [](int32_t x) { return x == kPoison; });
  };
  for (const auto* v : {&cpu.packed, &cpu.counts, &cpu.dense, &cpu.status}) {
    const int64_t n = static_cast<int64_t>(v->size());
    ASSERT_TRUE(all_poison(*v, 0, kGuard));
    ASSERT_TRUE(all_poison(*v, n - kGuard, n));
  }
  ASSERT_TRUE(none_poison(cpu.counts, kGuard, cpu.counts.size() - kGuard));
  ASSERT_TRUE(none_poison(cpu.dense, kGuard, cpu.dense.size() - kGuard));
  ASSERT_TRUE(none_poison(cpu.status, kGuard, cpu.status.size() - kGuard));
  std::vector<char> in_span(c.Capacity(), 0);
  for (int64_t t = 0; t < c.num_tokens(); ++t) {
    const int64_t lo = c.indptr[t], hi = c.indptr[t + 1];
    if (lo < 0 || lo > hi || hi > c.Capacity()) continue;
    std::fill(in_span.begin() + lo, in_span.begin() + hi, 1);
  }
  for (int64_t i = 0; i < c.Capacity(); ++i) {
    ASSERT_EQ(cpu.packed[kGuard + i] == kPoison, !in_span[i]) << "packed[" << i << "]";
  }
}

struct Totals {
  int64_t kept = 0, drops[kSparseNumDropReasons] = {}, row_errors = 0, padded = 0;
};

// Runs `c` on both and compares every word. Returns the CPU's totals (for coverage checks).
Totals RunAndCompare(const Case& c, bool misalign = false) {
  SCOPED_TRACE(c.name + (misalign ? " (unaligned)" : ""));
  const Outputs cpu = CpuRun(c);
  CheckWriteSet(c, cpu);
  Device dev;
  const GpuSparseGatherParams p = dev.Upload(c, misalign);
  const absl::Status launched = LaunchGpuSparseGather(p, nullptr);
  EXPECT_TRUE(launched.ok()) << launched;
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
  const Outputs gpu = dev.Download();
  const std::vector<char> overlapped = OverlappedWords(c);
  int64_t bad = CompareWords("packed", gpu.packed, cpu.packed, &overlapped);
  bad += CompareWords("counts", gpu.counts, cpu.counts);
  bad += CompareWords("dense", gpu.dense, cpu.dense);
  bad += CompareWords("status", gpu.status, cpu.status);
  EXPECT_EQ(bad, 0);
  Totals totals;
  for (int64_t t = 0; t < c.num_tokens(); ++t) {
    totals.kept += cpu.counts[kGuard + t];
    const int32_t* st = cpu.status.data() + kGuard + t * kSparseGatherStatusWords;
    for (int k = 0; k < kSparseNumDropReasons; ++k) totals.drops[k] += st[k];
    totals.row_errors += st[kSparseStatusRowError] != kSparseRowOk;
    totals.padded += c.token_to_seq[t] == -1;
  }
  return totals;
}

// ---- Hand examples and adversarial rows ---------------------------------------------------

// The CPU test's hand example: two requests, page 4, a hole in request 0's table.
Case HandExample() {
  Case c;
  c.name = "hand example";
  c.topk = 6;
  c.num_requests = 2;
  c.page_size = 4;
  c.max_blocks = 3;
  c.block_table = {7, -1, 2, 5, 0, 9};
  c.token_to_seq = {0, 0, 1, -1};
  c.token_bound = {10, 11, 3, 0};
  c.topk_indices = {9, 0, -1, 5, 10, 0, 10, 3, 12, -7, 8, 3, 2, 1, 0, 3, -1, -1, 1, 2, 3, 4, 5, 6};
  c.indptr = LayoutIndptr(c);
  return c;
}

TEST(SparseGatherGpu, HandExample) {
  const Case c = HandExample();
  const Outputs cpu = CpuRun(c);
  EXPECT_EQ(cpu.counts[kGuard + 0], 2);
  EXPECT_EQ(cpu.packed[kGuard + 0], 9);
  EXPECT_EQ(cpu.packed[kGuard + 1], 28);
  RunAndCompare(c);
  RunAndCompare(c, /*misalign=*/true);
}

TEST(SparseGatherGpu, AdversarialRows) {
  std::mt19937 rng(77);
  for (SparseMapForm form : {SparseMapForm::kBlockTable, SparseMapForm::kFlat}) {
    for (int page : {1, 16, 64}) {
      if (form == SparseMapForm::kFlat && page != 1) continue;
      const char* fname = form == SparseMapForm::kFlat ? "flat" : "block table";
      const std::string tag = std::string(fname) + " page " + std::to_string(page);
      // All -1.
      Case c = RandomCase(rng, form, page, 2048, 3, 4, 1, 2000, 3000, {});
      std::fill(c.topk_indices.begin(), c.topk_indices.end(), -1);
      c.name = tag + ": all -1";
      Totals tot = RunAndCompare(c);
      EXPECT_EQ(tot.kept, 0);
      EXPECT_EQ(tot.drops[kSparseDropInvalid], 12 * 2048);
      // All out of range.
      c = RandomCase(rng, form, page, 2048, 2, 2, 0, 2500, 2600, {});
      for (size_t i = 0; i < c.topk_indices.size(); ++i) {
        c.topk_indices[i] = c.token_bound[i / 2048] + static_cast<int32_t>(i % 4096);
      }
      c.name = tag + ": all out of range";
      tot = RunAndCompare(c);
      EXPECT_EQ(tot.drops[kSparseDropOutOfBound], 4 * 2048);
      // topk > L_j everywhere (short contexts), -1 padded rows, plus padded requests.
      c = RandomCase(rng, form, page, 2048, 4, 4, 2, 1, 300, {});
      c.name = tag + ": topk > L_j, padded rows";
      tot = RunAndCompare(c);
      EXPECT_GT(tot.kept, 0);
      EXPECT_EQ(tot.padded, 8);
      // Heavy duplicates: every row one value repeated, and a row of two alternating values.
      c = RandomCase(rng, form, page, 2048, 2, 2, 0, 3000, 3000, {});
      std::fill(c.topk_indices.begin(), c.topk_indices.begin() + 2048, 5);
      for (int k = 0; k < 2048; ++k) c.topk_indices[2048 + k] = k % 2 ? 17 : 2999 - 1;
      c.name = tag + ": duplicates";
      tot = RunAndCompare(c);
      EXPECT_EQ(tot.drops[kSparseDropDuplicate], 2047 + 2046);  // 5 x 2048; 17 / 2998
      // Noise: negatives, out of bound, duplicates, map holes, a map too short.
      Mix mix;
      mix.invalid = 10;
      mix.out = 10;
      mix.dup = 10;
      mix.map_holes = 10;
      mix.short_map = true;
      c = RandomCase(rng, form, page, 2048, 3, 4, 1, 1500, 3000, mix);
      c.name = tag + ": noise + holes + short map";
      tot = RunAndCompare(c);
      for (int k = 0; k < kSparseNumDropReasons; ++k) EXPECT_GT(tot.drops[k], 0) << c.name << k;
      // Hash-table stress: many positions whose hashes collide (multiples of a large power of
      // two), duplicated.
      c = RandomCase(rng, form, page, 2048, 1, 1, 0, 3000, 3000, {});
      c.token_bound[0] = 1 << 30;
      for (int k = 0; k < 2048; ++k) c.topk_indices[k] = (k % 1500) << 16;
      c.name = tag + ": colliding hashes";
      RunAndCompare(c);
    }
  }
}

TEST(SparseGatherGpu, NegativeAndOverflowingBlockTableEntries) {
  Case c;
  c.name = "block table entries";
  c.topk = 8;
  c.num_requests = 2;
  c.page_size = 64;
  c.max_blocks = 3;
  c.block_table = {0, -3, 40000000, -1, 1, 33554431};  // 40000000 * 64 > INT32_MAX
  c.token_to_seq = {0, 1};
  c.token_bound = {1000, 1000};
  c.topk_indices = {0, 64, 130, 192, 63,  999, 0,   0,  //
                    0, 64, 128, 191, 127, 65,  200, -1};
  c.indptr = LayoutIndptr(c);
  const Totals tot = RunAndCompare(c);
  EXPECT_GT(tot.drops[kSparseDropUnmapped], 3);
}

TEST(SparseGatherGpu, RowErrors) {
  Case c = HandExample();
  c.name = "bad seq / bound";
  c.token_to_seq = {0, 2, 0, -2};
  c.token_bound = {10, 11, -1, 0};
  Totals tot = RunAndCompare(c);
  EXPECT_EQ(tot.row_errors, 3);

  c = HandExample();
  c.name = "span too small";
  c.indptr = {0, 5, 11, 14, 14};
  tot = RunAndCompare(c);
  EXPECT_EQ(tot.row_errors, 1);

  // Bad spans: decreasing (overlap, left unspecified by the spec and skipped), past the
  // capacity, negative.
  c = HandExample();
  c.name = "bad spans";
  c.indptr = {0, 6, 4, 20, 20};
  c.packed_capacity = 18;
  tot = RunAndCompare(c);
  EXPECT_EQ(tot.row_errors, 3);
  c.indptr = {-4, 6, 12, 15, 15};
  c.packed_capacity = -1;
  c.name = "negative span start";
  tot = RunAndCompare(c);
  EXPECT_EQ(tot.row_errors, 1);

  // A flat map whose ranges are malformed: every entry unmapped.
  c = HandExample();
  c.name = "malformed flat ranges";
  c.form = SparseMapForm::kFlat;
  c.block_table.clear();
  c.max_blocks = 0;
  c.kv_indptr = {5, 3, 1 << 30};
  c.kv_indices = {1, 2, 3, 4, 5, 6, 7, 8};
  tot = RunAndCompare(c);
  EXPECT_EQ(tot.kept, 0);
}

// Many random shapes: topk from 1 to 4096 (every per-thread width), both forms, all pages.
TEST(SparseGatherGpu, RandomShapes) {
  std::mt19937 rng(4242);
  const int topks[] = {1, 2, 7, 31, 64, 100, 255, 256, 257, 511, 1000, 2048, 3000, 4096};
  Totals all;
  int n = 0;
  for (int topk : topks) {
    for (int rep = 0; rep < 6; ++rep) {
      const SparseMapForm form = rep % 3 == 2 ? SparseMapForm::kFlat : SparseMapForm::kBlockTable;
      const int page = (int[]){1, 16, 64}[rep % 3];
      Mix mix;
      mix.invalid = rep % 2 ? 5 : 0;
      mix.out = rep % 2 ? 5 : 0;
      mix.dup = rep >= 3 ? 5 : 0;
      mix.map_holes = rep >= 4 ? 3 : 0;
      mix.short_map = rep == 5;
      Case c = RandomCase(rng, form, page, topk, 1 + rng() % 6, 1 + rng() % 4, rng() % 2, 1,
                          3 * topk + 10, mix);
      c.name = "topk " + std::to_string(topk) + " rep " + std::to_string(rep);
      const Totals t = RunAndCompare(c, /*misalign=*/rep == 1);
      all.kept += t.kept;
      for (int k = 0; k < kSparseNumDropReasons; ++k) all.drops[k] += t.drops[k];
      ++n;
    }
  }
  std::printf(
      "[random shapes] %d cases: kept %lld, invalid %lld, out of bound %lld, "
      "unmapped %lld, duplicate %lld\n",
      n, static_cast<long long>(all.kept), static_cast<long long>(all.drops[0]),
      static_cast<long long>(all.drops[1]), static_cast<long long>(all.drops[2]),
      static_cast<long long>(all.drops[3]));
}

// T = 16384 tokens at topk 2048 (4096 requests x qlen 4), contexts straddling topk, both forms
// and all pages, with some noise.
TEST(SparseGatherGpu, LargeBatches) {
  std::mt19937 rng(16384);
  for (int page : {1, 16, 64}) {
    for (SparseMapForm form : {SparseMapForm::kBlockTable, SparseMapForm::kFlat}) {
      if (form == SparseMapForm::kFlat && page != 1) continue;
      Mix mix;
      mix.invalid = 1;
      mix.out = 1;
      mix.dup = 1;
      mix.map_holes = 1;
      Case c = RandomCase(rng, form, page, 2048, 4096, 4, 0, 1024, 6000, mix);
      c.name = std::string(form == SparseMapForm::kFlat ? "flat" : "block table") + " page " +
               std::to_string(page) + ", T = 16384";
      ASSERT_EQ(c.num_tokens(), 16384);
      const Totals t = RunAndCompare(c);
      std::printf("[%s] kept %lld of %lld\n", c.name.c_str(), static_cast<long long>(t.kept),
                  static_cast<long long>(c.num_tokens() * 2048));
    }
  }
}

// ---- Host API -----------------------------------------------------------------------------

TEST(SparseGatherGpu, HostApiErrorsLaunchNothing) {
  const Case c = HandExample();
  Device dev;
  const GpuSparseGatherParams good = dev.Upload(c);
  struct Planted {
    void (*plant)(GpuSparseGatherParams*);
    const char* name;
  };
  const Planted cases[] = {
      {[](GpuSparseGatherParams* p) { p->dims.topk = 4097; }, "topk"},
      {[](GpuSparseGatherParams* p) { p->dims.topk = 0; }, "topk"},
      {[](GpuSparseGatherParams* p) { p->dims.page_size = 48; }, "page_size"},
      {[](GpuSparseGatherParams* p) { p->topk_indices = nullptr; }, "topk_indices"},
      {[](GpuSparseGatherParams* p) { p->block_table = nullptr; }, "block_table"},
      {[](GpuSparseGatherParams* p) { p->packed = nullptr; }, "packed"},
      {[](GpuSparseGatherParams* p) { p->status = nullptr; }, "status"},
      {[](GpuSparseGatherParams* p) {
         p->dense = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(p->dense) + 2);
       },
       "dense"},
      {[](GpuSparseGatherParams* p) { p->dims.map_form = SparseMapForm::kFlat; }, "kv_indptr"},
      {[](GpuSparseGatherParams* p) { p->dims.num_tokens = -1; }, "num_tokens"},
  };
  for (const Planted& planted : cases) {
    GpuSparseGatherParams p = good;
    planted.plant(&p);
    const absl::Status s = LaunchGpuSparseGather(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << planted.name;
    EXPECT_NE(std::string(s.message()).find(planted.name), std::string::npos) << s;
  }
  ASSERT_HIP_OK(hipDeviceSynchronize());
  const Outputs o = dev.Download();
  for (const auto* v : {&o.packed, &o.counts, &o.dense, &o.status}) {
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](int32_t x) { return x == kPoison; }));
  }
  // T = 0: nothing to do.
  GpuSparseGatherParams empty;
  empty.dims.topk = 2048;
  int32_t* indptr = nullptr;
  ASSERT_HIP_OK(hipMalloc(&indptr, sizeof(int32_t)));
  empty.sparse_kv_indptr = indptr;
  EXPECT_TRUE(LaunchGpuSparseGather(empty, nullptr).ok());
  ASSERT_HIP_OK(hipFree(indptr));
}

// Captured once into a graph, replayed with new topk_indices uploaded in between: each replay
// matches the CPU on that step's inputs.
TEST(SparseGatherGpu, GraphReplayReadsInputsAtRunTime) {
  std::mt19937 rng(9);
  Case c = RandomCase(rng, SparseMapForm::kBlockTable, 64, 2048, 8, 4, 1, 1500, 4000, {});
  c.name = "graph step 0";
  Device dev;
  const GpuSparseGatherParams p = dev.Upload(c);
  hipStream_t stream;
  ASSERT_HIP_OK(hipStreamCreate(&stream));
  hipGraph_t graph;
  hipGraphExec_t exec;
  ASSERT_HIP_OK(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  const absl::Status captured = LaunchGpuSparseGather(p, stream);
  ASSERT_HIP_OK(hipStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_HIP_OK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      for (int32_t& v : c.topk_indices) v = v < 0 ? static_cast<int32_t>(rng() % 50) : v / 2;
      ASSERT_HIP_OK(hipMemcpy(const_cast<int32_t*>(p.topk_indices), c.topk_indices.data(),
                              c.topk_indices.size() * 4, hipMemcpyHostToDevice));
    }
    dev.Poison();
    ASSERT_HIP_OK(hipGraphLaunch(exec, stream));
    ASSERT_HIP_OK(hipStreamSynchronize(stream));
    const Outputs gpu = dev.Download();
    const Outputs cpu = CpuRun(c);
    EXPECT_EQ(CompareWords("packed", gpu.packed, cpu.packed), 0) << "step " << step;
    EXPECT_EQ(CompareWords("dense", gpu.dense, cpu.dense), 0) << "step " << step;
    EXPECT_EQ(CompareWords("status", gpu.status, cpu.status), 0) << "step " << step;
    EXPECT_EQ(CompareWords("counts", gpu.counts, cpu.counts), 0) << "step " << step;
  }
  ASSERT_HIP_OK(hipGraphExecDestroy(exec));
  ASSERT_HIP_OK(hipGraphDestroy(graph));
  ASSERT_HIP_OK(hipStreamDestroy(stream));
}

}  // namespace
}  // namespace mlaps
