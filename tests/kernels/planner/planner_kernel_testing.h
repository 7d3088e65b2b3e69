// The GPU planner's checks against the host planner (PlanDecodeInto), shared by the GPU test
// (planner_kernel_test.hip) and the CPU emulation test (planner_kernel_emu_test.cc): batches
// and options (representative and random), the host's plan into sentinel-filled buffers of
// given capacities, the kernel's buffers compared word for word (guard words past each
// capacity must stay untouched), the host's first input error and too-small buffer mapped to
// the kernel's status word. Each Check* runs one property through a Runner, which owns the
// kernel's input and output memory:
//   const char* Name();                       // "gpu" / "emulated", for the progress lines
//   bool Fits(const Batch&, const Capacities&);
//   int64_t SharedLimit();                    // the most dynamic shared memory a launch gets
//   int64_t SharedBytes(const GpuPlannerParams&);  // the least a launch of these params
//                                                  // needs (its jump tables shrink to fit)
//   GpuPlannerParams Params(const Batch&, const Resolved&, const Capacities&, int max_qlen,
//                           int walk);  // index into kWalkModes
//   void Upload(const Batch&);                // the batch arrays as the kernel reads them
//   void Run(const GpuPlannerParams&);        // sentinel-fill the outputs, launch, read back
//   const int32_t* Buffer(int i);             // output buffer i (GpuPlanBuffer order)
//   GpuPlanStatus Status();
//   bool OutputsUntouched();                  // every output and guard word still kSentinel
// Plain C++ and gtest: no GPU headers.
#ifndef MLAPS_TESTS_KERNELS_PLANNER_PLANNER_KERNEL_TESTING_H_
#define MLAPS_TESTS_KERNELS_PLANNER_PLANNER_KERNEL_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/planner/planner_kernel.h"
#include "kernels/planner/planner_params.h"
#include "metadata/batch.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "metadata/registry.h"

namespace mlaps::testing {

inline constexpr int32_t kSentinel = 0x5A5A5A5A;  // every byte 0x5A: hipMemset-able
inline constexpr int64_t kGuardWords = 64;        // checked words past each buffer's capacity

// The walks the kernel can take to the same plan: the jump tables (GpuPlannerParams::
// jump_positions, when they hold the batch's cost axis), else rounds of the parallel walk
// (max_scan_iterations) and the warp windows, each at another block size (threads; 64 makes
// threads loop over several requests, CUs and positions). Mode 0 is the defaults.
struct WalkMode {
  int iterations, threads, jump_positions;
  const char* name;
};
inline constexpr int kDefaultJumpPositions = GpuPlannerParams{}.jump_positions;
inline constexpr WalkMode kWalkModes[] = {
    {GpuPlannerParams{}.max_scan_iterations, 0, kDefaultJumpPositions,
     "the defaults: jump tables, else rounds + warp windows"},
    {0, 64, kDefaultJumpPositions, "jump tables, 64 threads"},
    {8, 0, 0, "parallel rounds + warp windows, default threads"},
    {0, 64, 0, "warp windows only, 64 threads"},
    {1, 512, 0, "1 round + warp windows, 512 threads"},
};
inline constexpr int kNumWalkModes = static_cast<int>(std::size(kWalkModes));

// What the host planner needs besides the batch, resolved as PlanDecodeInto resolves it.
using Resolved = ResolvedPlan;
inline absl::StatusOr<Resolved> Resolve(const Batch& batch, const PlanOptions& options) {
  return ResolvePlan(batch, options);
}

// Capacities of the six buffers, in GpuPlanBuffer order.
struct Capacities {
  int64_t entries[6];  // work_info in rows
  int64_t Words(int i) const { return i == kGpuPlanBufWorkInfo ? 8 * entries[i] : entries[i]; }
};

inline Capacities FromPlanCapacity(const PlanCapacity& c) {
  return {{c.qo_indptr, c.work_indptr, c.work_info, c.reduce_indptr, c.reduce_final_map,
           c.reduce_partial_map}};
}

// The host planner into sentinel-filled buffers of the given capacities.
struct HostResult {
  absl::StatusOr<PlanSizes> sizes;
  std::vector<int32_t> words[6];
};

inline HostResult PlanOnHost(const Batch& batch, const PlanOptions& options,
                             const Capacities& caps) {
  std::vector<int32_t> words[6];
  for (int i = 0; i < 6; ++i) words[i].assign(caps.Words(i), kSentinel);
  PlanBuffers buffers{absl::MakeSpan(words[0]),
                      absl::MakeSpan(words[1]),
                      absl::MakeSpan(reinterpret_cast<WorkInfo*>(words[2].data()), caps.entries[2]),
                      absl::MakeSpan(words[3]),
                      absl::MakeSpan(words[4]),
                      absl::MakeSpan(words[5])};
  // Moving the vectors keeps their storage, which the spans point into.
  return HostResult{PlanDecodeInto(batch, options, buffers),
                    {std::move(words[0]), std::move(words[1]), std::move(words[2]),
                     std::move(words[3]), std::move(words[4]), std::move(words[5])}};
}

inline const char* const kBufferNames[6] = {"qo_indptr",        "work_indptr",
                                            "work_info",        "reduce_indptr",
                                            "reduce_final_map", "reduce_partial_map"};

// Where a run's six outputs (each followed by kGuardWords guard words, work_info 16-byte
// aligned) and its status word lie in one int32 slab, for buffers of `caps`.
struct SlabLayout {
  int64_t offsets[6] = {};
  int64_t status_offset = 0;
  int64_t used_words = 0;  // outputs, guards and the status
};

inline SlabLayout SlabFor(const Capacities& caps) {
  SlabLayout l;
  int64_t at = 0;
  for (int i = 0; i < 6; ++i) {
    l.offsets[i] = at;
    at += (caps.Words(i) + kGuardWords + 3) / 4 * 4;  // keep work_info 16-byte aligned
  }
  l.status_offset = at;
  l.used_words = at + static_cast<int64_t>(sizeof(GpuPlanStatus) / 4);
  return l;
}

// The number of int32 words the batch arrays take in the input slab (Upload's order:
// qo_indptr, kv_indptr, kv_last_page_lens).
inline int64_t InputWords(const Batch& batch) { return 3 * (int64_t{batch.num_requests()} + 1); }

inline std::vector<int32_t> InputSlab(const Batch& batch) {
  std::vector<int32_t> in(batch.qo_indptr);
  in.insert(in.end(), batch.kv_indptr.begin(), batch.kv_indptr.end());
  in.insert(in.end(), batch.kv_last_page_lens.begin(), batch.kv_last_page_lens.end());
  return in;
}

// Params for `batch` planned with `resolved` into buffers of `caps`: inputs in `inputs` (as
// InputSlab lays them out), outputs and status in `outputs` at `slab`'s offsets.
inline GpuPlannerParams ParamsFor(const Batch& batch, const Resolved& resolved,
                                  const Capacities& caps, int max_qlen, int walk,
                                  const int32_t* inputs, int32_t* outputs, const SlabLayout& slab) {
  const int b = batch.num_requests();
  GpuPlannerParams p = StaticPlannerParams(batch, resolved.options, resolved.variant, max_qlen);
  p.qo_indptr = inputs;
  p.kv_indptr = inputs + (b + 1);
  p.kv_last_page_lens = inputs + 2 * (b + 1);
  int32_t** outs[6] = {&p.out_qo_indptr, &p.work_indptr,      &p.work_info,
                       &p.reduce_indptr, &p.reduce_final_map, &p.reduce_partial_map};
  int64_t* capacity[6] = {&p.out_qo_indptr_capacity,    &p.work_indptr_capacity,
                          &p.work_info_capacity,        &p.reduce_indptr_capacity,
                          &p.reduce_final_map_capacity, &p.reduce_partial_map_capacity};
  for (int i = 0; i < 6; ++i) {
    *outs[i] = outputs + slab.offsets[i];
    *capacity[i] = caps.entries[i];
  }
  p.status = reinterpret_cast<GpuPlanStatus*>(outputs + slab.status_offset);
  if (walk < 0 || walk >= kNumWalkModes) std::abort();  // a test's own bug
  p.max_scan_iterations = kWalkModes[walk].iterations;
  p.threads = kWalkModes[walk].threads;
  p.jump_positions = kWalkModes[walk].jump_positions;
  return p;
}

// Word-compares the kernel's buffers (and guards) with the host's; "" when identical.
template <class Runner>
std::string CompareWithHost(Runner& runner, const HostResult& host, const Capacities& caps) {
  for (int i = 0; i < 6; ++i) {
    const int32_t* got = runner.Buffer(i);
    const std::vector<int32_t>& want = host.words[i];
    if (std::memcmp(got, want.data(), want.size() * sizeof(int32_t)) != 0) {
      for (size_t w = 0; w < want.size(); ++w) {
        if (got[w] != want[w]) {
          return std::string(kBufferNames[i]) + " word " + std::to_string(w) + ": kernel " +
                 std::to_string(got[w]) + ", host " + std::to_string(want[w]);
        }
      }
    }
    for (int64_t w = 0; w < kGuardWords; ++w) {
      if (got[caps.Words(i) + w] != kSentinel) {
        return std::string(kBufferNames[i]) + ": guard word " + std::to_string(w) +
               " past the capacity was written";
      }
    }
  }
  return "";
}

inline std::string Describe(const Batch& b, const Resolved& r) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%s H=%d B=%d max_qlen=%d page=%d causal=%d cp=%d topk=%d | fold=%d tokens/tile=%d "
                "num_cu=%d gran=%d overhead=%d max_split=%d kv_lanes=%d",
                std::string(ArchName(b.arch)).c_str(), b.num_heads, b.num_requests(), b.max_qlen(),
                b.page_size, b.causal, b.cp_round_robin, b.sparse_topk, r.variant.head_fold,
                r.variant.tokens_per_tile, r.options.num_cu, r.options.kv_granularity,
                r.options.fixed_overhead, r.options.max_split_per_batch, r.options.kv_lanes);
  return buf;
}

struct MatchStats {
  int cases = 0, identical = 0, parallel_converged = 0, parallel_rounds = 0;
  int too_large = 0;    // more tiles than the device's shared memory holds: skipped
  int with_lanes = 0;   // cases whose host plan has kv lanes (PlanSizes::kv_lanes > 1)
  int jumped = 0;       // cases the default walk finished with its jump tables
  int last_rounds = 0;  // the last case's scan_iterations in the default walk
};

// Plans `batch` on both sides in every walk mode; returns "" when all are byte-identical.
template <class Runner>
std::string PlanAndCompare(Runner& runner, const Batch& batch, const PlanOptions& options,
                           MatchStats* stats) {
  absl::StatusOr<Resolved> r = Resolve(batch, options);
  if (!r.ok()) return "host resolve: " + std::string(r.status().message());
  const Capacities caps = FromPlanCapacity(r->capacity);
  if (!runner.Fits(batch, caps)) return "case too large for the test's slabs";
  const HostResult host = PlanOnHost(batch, r->options, caps);
  if (!host.sizes.ok()) return "host: " + std::string(host.sizes.status().message());
  if (runner.SharedBytes(runner.Params(batch, *r, caps, std::max(1, batch.max_qlen()), 0)) >
      runner.SharedLimit()) {
    ++stats->too_large;
    return "";
  }
  ++stats->cases;
  stats->with_lanes += host.sizes->kv_lanes > 1;
  runner.Upload(batch);
  for (int walk = 0; walk < kNumWalkModes; ++walk) {
    runner.Run(runner.Params(batch, *r, caps, std::max(1, batch.max_qlen()), walk));
    const GpuPlanStatus st = runner.Status();
    const std::string where =
        std::string(" [") + kWalkModes[walk].name + "] " + Describe(batch, *r);
    if (st.code != kGpuPlanOk) {
      return "kernel status " + std::to_string(st.code) + " index " + std::to_string(st.index) +
             where;
    }
    const PlanSizes& s = *host.sizes;
    if (st.num_virtual_requests != s.num_virtual_requests || st.num_works != s.num_works ||
        st.num_reduce_tiles != s.num_reduce_tiles || st.num_reduce_pieces != s.num_reduce_pieces ||
        st.num_partial_rows != s.num_partial_rows) {
      return "sizes differ: kernel works " + std::to_string(st.num_works) + " host " +
             std::to_string(s.num_works) + where;
    }
    const std::string diff = CompareWithHost(runner, host, caps);
    if (!diff.empty()) return diff + where;
    if (walk == 0 && st.scan_iterations >= 0 && st.scan_iterations < 1000) {
      ++stats->parallel_converged;
      stats->parallel_rounds += st.scan_iterations;
    }
    if (walk == 0) stats->jumped += st.scan_iterations >= 2000;
    if (walk == 0) stats->last_rounds = st.scan_iterations;
  }
  ++stats->identical;
  return "";
}

// A random valid batch over every supported mode: dense / MTP (uniform or varlen qlen), CP
// shards (kv 0 allowed), sparse per-token; page sizes 1..256; every arch, dtype and H.
inline Batch RandomBatch(std::mt19937& rng, bool big) {
  static const Arch kArchs[] = {Arch::kGfx942, Arch::kGfx950, Arch::kSm90};
  static const DType kDtypes[] = {DType::kBf16, DType::kFp8};
  static const int kHeads[] = {16, 32, 48, 64, 128};
  static const int kPages[] = {1, 1, 16, 64, 64, 256};
  const Arch arch = kArchs[rng() % 3];
  const DType dtype = kDtypes[rng() % 2];
  const int heads = kHeads[rng() % 5];
  const int mode = rng() % 6;  // 0-2 dense/MTP, 3 varlen qlen, 4 CP, 5 sparse
  const bool cp = mode == 4, sparse = mode == 5;
  const int page = sparse ? 1 : kPages[rng() % 6];
  const int qlen = sparse ? 1 : 1 + rng() % 8;
  const int batch = big ? 1 + rng() % 1024 : 1 + rng() % (rng() % 4 == 0 ? 300 : 40);
  const int kv_spread = rng() % 4 == 0 ? 20000 : rng() % 3 == 0 ? 40 : 600;
  std::vector<int> kv(batch);
  for (int& k : kv) k = (cp || sparse ? 0 : qlen) + rng() % kv_spread;
  if (sparse) {
    for (int& k : kv) k = std::min(k, 2048);
  }
  Batch b = MakeVarlenBatch(arch, dtype, heads, kv, qlen, page);
  b.cp_round_robin = cp;
  if (sparse) {
    b.sparse_topk = 2048;
    b.causal = false;
  }
  if (mode == 3) {  // varlen qlen, each request keeping kv >= qlen
    for (int i = 0; i < batch; ++i) {
      b.qo_indptr[i + 1] = b.qo_indptr[i] + 1 + rng() % qlen;
    }
  }
  if (!sparse && rng() % 8 == 0) b.causal = false;
  return b;
}

inline PlanOptions RandomOptions(std::mt19937& rng) {
  PlanOptions o;
  const int cu = rng() % 6;
  o.num_cu = cu == 0 ? 0 : cu == 1 ? 1 + rng() % 4 : cu == 2 ? 1 + rng() % 1024 : 1 + rng() % 320;
  o.kv_granularity = rng() % 2 ? 0 : 1 << (rng() % 9);
  if (rng() % 4 == 0) o.fixed_overhead = rng() % 5;
  o.max_split_per_batch = rng() % 4 == 0 ? 1 + rng() % 8 : 0;
  if (rng() % 3 == 0) o.kv_lanes = 1 + rng() % 8;  // else the arch's default
  return o;
}

// Host message "field[index] = value: why" -> the status the GPU must report.
struct ExpectedError {
  int code = -1;
  int index = -1;
  int64_t value = 0;
};

inline ExpectedError FromHostMessage(const std::string& m) {
  ExpectedError e;
  const size_t open = m.find('['), close = m.find(']'), eq = m.find(" = "), colon = m.find(':');
  if (open == std::string::npos || close == std::string::npos || eq == std::string::npos ||
      colon == std::string::npos) {
    return e;
  }
  const std::string field = m.substr(0, open);
  e.index = std::stoi(m.substr(open + 1, close - open - 1));
  e.value = std::stoll(m.substr(eq + 3, colon - eq - 3));
  auto has = [&m](const char* s) { return m.find(s) != std::string::npos; };
  if (field == "qo_indptr" || field == "kv_indptr") {
    const int base = field == "qo_indptr" ? kGpuPlanQoIndptrStart : kGpuPlanKvIndptrStart;
    if (has("must start at 0")) e.code = base;
    if (has("is negative")) e.code = base + 1;
    if (has("is less than the previous")) e.code = base + 2;
    if (has("total q tokens")) e.code = kGpuPlanQTokensOverflow;
  } else if (field == "qlen") {
    e.code = kGpuPlanQlenInvalid;
  } else if (field == "kv_last_page_lens") {
    e.code = kGpuPlanLastPageLenInvalid;
  } else if (field == "kv_len") {
    if (has("the batch's total kv tokens")) {
      e.code = kGpuPlanKvTotalOverflow;
    } else if (has("overflows int32")) {
      e.code = kGpuPlanKvLenOverflow;
    } else if (has("exceeds sparse_topk")) {
      e.code = kGpuPlanKvLenAboveTopk;
    } else if (has("shorter than qlen")) {
      e.code = kGpuPlanKvLenBelowQlen;
    }
  }
  return e;
}

// Breaks a valid batch in one of the ways ValidateBatch names.
inline void Corrupt(std::mt19937& rng, Batch& b) {
  const int n = b.num_requests();
  const int i = 1 + rng() % n;  // an indptr entry
  const int r = rng() % n;      // a request
  switch (rng() % 11) {
    case 0:
      b.qo_indptr[0] = rng() % 2 ? 1 : -1;
      break;
    case 1:
      b.qo_indptr[i] = -1 - static_cast<int>(rng() % 3);
      break;
    case 2:
      b.qo_indptr[i] = b.qo_indptr[i - 1] - 1 - rng() % 2;
      break;
    case 3:
      b.kv_indptr[0] = 1;
      break;
    case 4:
      b.kv_indptr[i] = b.kv_indptr[i - 1] - 1;
      break;
    case 5:  // too many q tokens for int32 rows
      for (int k = i; k <= n; ++k) b.qo_indptr[k] += (1 << 30) / b.num_heads;
      break;
    case 6: {  // an empty (dense) or two-token (sparse) q span
      const int shift = b.qo_indptr[r] - b.qo_indptr[r + 1] + (b.sparse_topk > 0 ? 2 : 0);
      for (int k = r + 1; k <= n; ++k) b.qo_indptr[k] += shift;
      break;
    }
    case 7:
      b.kv_last_page_lens[r] = rng() % 2 ? b.page_size + 1 : -1;
      break;
    case 8:  // kv shorter than qlen (dense causal) or longer than topk (sparse)
      if (b.sparse_topk > 0) {
        const int add = (b.sparse_topk + 5) - (b.kv_indptr[r + 1] - b.kv_indptr[r]);
        for (int k = r + 1; k <= n; ++k) b.kv_indptr[k] += add;
        b.kv_last_page_lens[r] = 1;
      } else {
        const int pages = b.kv_indptr[r + 1] - b.kv_indptr[r];
        for (int k = r + 1; k <= n; ++k) b.kv_indptr[k] -= pages - 1;
        b.kv_last_page_lens[r] = 1;
      }
      break;
    case 9:  // one request's kv tokens overflow int32 (kv_indptr itself stays in range)
      if (b.page_size >= 2) {
        for (int k = r + 1; k <= n; ++k) b.kv_indptr[k] += (1 << 30) / b.page_size * 2 + 1;
      }
      break;
    case 10:  // two requests of ~1.5 G tokens: the batch's total overflows
      if (b.page_size >= 2 && n >= 2) {
        const int r1 = r == n - 1 ? r - 1 : r, r2 = r1 + 1 + rng() % (n - r1 - 1);
        const int pages = 3 * ((1 << 29) / b.page_size);
        for (int k = r1 + 1; k <= n; ++k) b.kv_indptr[k] += pages;
        for (int k = r2 + 1; k <= n; ++k) b.kv_indptr[k] += pages;
      }
      break;
  }
}

template <class Runner>
void CheckRepresentativeCases(Runner& runner) {
  struct Case {
    const char* name;
    Batch batch;
    PlanOptions options;
  };
  std::vector<Case> cases;
  // The benchmark's batches (metadata/planner_bench.cc): sm90, page 64, kv U[1k, 16k].
  for (int heads : {16, 128}) {
    for (int qlen : {1, 4}) {
      for (int batch : {1, 32, 128, 1024}) {
        std::mt19937 rng(batch * 31 + qlen);
        std::uniform_int_distribution<int> len(1024, 16384);
        std::vector<int> lens(batch);
        for (int& l : lens) l = len(rng);
        cases.push_back({"bench", MakeVarlenBatch(Arch::kSm90, DType::kBf16, heads, lens, qlen, 64),
                         PlanOptions{}});
      }
    }
  }
  // Uniform batches whose tile ends meet CU ends every few CUs (FlashMLA's b32 ctx 1024 step
  // shape on 264 and 132 CUs, b64 ctx 4096): the rounds do not settle, the jump tables finish.
  cases.push_back({"uniform b32 ctx1024",
                   MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 32, 1, 1024, 64),
                   PlanOptions{}});
  {
    PlanOptions o;
    o.num_cu = 132;
    cases.push_back({"uniform b32 ctx1024, 132 CUs",
                     MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 32, 1, 1024, 64), o});
  }
  cases.push_back({"uniform b64 ctx4096",
                   MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 64, 1, 4096, 64), PlanOptions{}});
  // One long request over many CUs; many tiny ones; page sizes 1 and 256 with small quanta.
  cases.push_back({"one 16k request",
                   MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 16384, 1), PlanOptions{}});
  cases.push_back(
      {"1024 tiny", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1024, 1, 3, 1), PlanOptions{}});
  {
    PlanOptions o;
    o.kv_granularity = 16;  // quantum = page 256 = 16 blocks
    cases.push_back({"page 256, granularity 16",
                     MakeUniformBatch(Arch::kSm90, DType::kBf16, 64, 37, 2, 5000, 256), o});
  }
  {
    PlanOptions o;
    o.num_cu = 8;
    o.max_split_per_batch = 3;
    cases.push_back(
        {"max split 3", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 2, 1, 16384, 1), o});
    o.max_split_per_batch = 1;
    cases.push_back(
        {"max split 1", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 5, 1, 4096, 16), o});
    o.max_split_per_batch = 2;
    cases.push_back(
        {"max split 2", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 3, 1, 16384, 1), o});
  }
  {
    // The host planner's own cases (tests/metadata/planner_test.cc): max split 1 still spreads
    // tiles over the CUs; a payload below one page of blocks grows to one split quantum.
    PlanOptions o;
    o.max_split_per_batch = 1;
    cases.push_back({"max split 1, 132 CUs",
                     MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 64, 1, 4096, 64), o});
    o = PlanOptions{};
    o.kv_granularity = 16;
    cases.push_back({"payload of one page",
                     MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 4096, 64), o});
    // Tiles too short to split (kv < quantum + tokens): an empty CU takes each whole.
    std::vector<int> lens;
    for (int i = 0; i < 6; ++i) lens.insert(lens.end(), {66, 66, 300, 67, 129, 1000, 66, 70});
    cases.push_back({"unsplittable tiles",
                     MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, lens, 4, 64), PlanOptions{}});
  }
  // gfx950 fp8 (32, 3): tiles of 2 and 1 tokens, causal trim; gfx942 H = 128 folded.
  cases.push_back({"gfx950 h32 q3", MakeUniformBatch(Arch::kGfx950, DType::kFp8, 32, 7, 3, 100, 16),
                   PlanOptions{}});
  cases.push_back({"gfx942 h128 fold",
                   MakeUniformBatch(Arch::kGfx942, DType::kFp8, 128, 40, 2, 3000, 1),
                   PlanOptions{}});
  {
    Batch b = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {0, 3, 700, 0, 9000}, 4, 1);
    b.cp_round_robin = true;
    cases.push_back({"CP shard with empty requests", b, PlanOptions{}});
  }
  {
    Batch b = MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {2048, 0, 17, 2048, 1, 1500}, 1, 1);
    b.sparse_topk = 2048;
    b.causal = false;
    cases.push_back({"sparse per-token", b, PlanOptions{}});
  }
  {
    PlanOptions o;
    o.num_cu = 1024;
    cases.push_back(
        {"1024 CUs", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 200, 1, 4000, 64), o});
    o.num_cu = 1;
    cases.push_back({"1 CU", MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 200, 1, 4000, 64), o});
  }
  // kv lanes: the seed shapes that have them (H x qlen > 64 rows on sm90), other CU counts
  // (130: 2 lanes of 4 requested), split limits (the one-thread walk), causal trim with
  // tiles of unequal tokens, CP shards with empty requests, sparse per-token.
  {
    PlanOptions o;
    o.kv_lanes = kMaxKvLanes;
    for (auto [heads, qlen] : {std::pair{128, 2}, {128, 1}, {64, 2}, {32, 3}}) {
      cases.push_back({"lanes seed shape",
                       MakeUniformBatch(Arch::kSm90, DType::kFp8, heads, 128, qlen, 8192, 64), o});
    }
    std::vector<int> lens;
    for (int i = 0; i < 40; ++i) lens.push_back(5 + (i * 7919) % 9000);
    cases.push_back(
        {"lanes varlen kv", MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, lens, 2, 64), o});
    cases.push_back({"lanes gfx942 h128 q3",
                     MakeVarlenBatch(Arch::kGfx942, DType::kBf16, 128, lens, 3, 16), o});
    o.num_cu = 130;
    cases.push_back(
        {"lanes 130 CUs", MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, lens, 2, 1), o});
    o.num_cu = 0;
    o.max_split_per_batch = 3;
    cases.push_back(
        {"lanes max split 3", MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, lens, 2, 64), o});
    o.max_split_per_batch = 1;
    cases.push_back(
        {"lanes max split 1", MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, lens, 2, 64), o});
    o.max_split_per_batch = 0;
    o.kv_lanes = 2;
    cases.push_back(
        {"lanes 2 of 4 tiles", MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, lens, 2, 64), o});
    o.kv_lanes = kMaxKvLanes;
    Batch cp = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 128, {0, 3, 700, 0, 9000, 64}, 2, 1);
    cp.cp_round_robin = true;
    cases.push_back({"lanes CP shard with empty requests", cp, o});
    Batch sparse =
        MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {2048, 0, 17, 2048, 1, 1500}, 1, 1);
    sparse.sparse_topk = 2048;
    sparse.causal = false;
    cases.push_back({"lanes sparse per-token", sparse, o});
  }
  MatchStats stats;
  for (const Case& c : cases) {
    const std::string diff = PlanAndCompare(runner, c.batch, c.options, &stats);
    EXPECT_EQ(diff, "") << c.name;
  }
  // A uniform batch of whole tiles a CU (128 tiles of 128 kv blocks on 132 CUs, each tile's
  // cost within the payload): the first round checks out from the uniform guesses.
  for (int overhead : {-1, 1, 4}) {
    PlanOptions o;
    o.num_cu = 132;
    o.fixed_overhead = overhead;
    const Batch whole = MakeUniformBatch(Arch::kSm90, DType::kFp8, 16, 128, 4, 8192, 64);
    MatchStats one;
    EXPECT_EQ(PlanAndCompare(runner, whole, o, &one), "") << "overhead " << overhead;
    absl::StatusOr<WorkPlan> plan = PlanDecode(whole, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (plan->num_reduce_tiles() == 0) {
      EXPECT_EQ(one.last_rounds, 1) << "overhead " << overhead;
    }
  }
  std::printf(
      "[%s planner] representative: %d cases x %d walk modes, %d byte-identical, %d with kv "
      "lanes, %d finished by the jump tables in the default walk\n",
      runner.Name(), stats.cases, kNumWalkModes, stats.identical, stats.with_lanes, stats.jumped);
  EXPECT_GE(stats.with_lanes, 10);
  EXPECT_GE(stats.jumped, 3);  // the uniform batches above whose rounds do not settle
}

template <class Runner>
void CheckRandomBatches(Runner& runner, int iterations, int min_cases, int big_every = 16,
                        uint32_t seed = 20261130) {
  std::mt19937 rng(seed);
  MatchStats stats;
  int unsupported = 0, failures = 0;
  for (int iter = 0; iter < iterations && failures < 5; ++iter) {
    const Batch batch = RandomBatch(rng, big_every > 0 && iter % big_every == 0);
    const PlanOptions options = RandomOptions(rng);
    if (!Resolve(batch, options).ok()) {
      ++unsupported;
      continue;
    }
    const std::string diff = PlanAndCompare(runner, batch, options, &stats);
    if (!diff.empty()) {
      ++failures;
      ADD_FAILURE() << "iter " << iter << ": " << diff;
    }
  }
  std::printf(
      "[%s planner] random: %d batches x %d walk modes, %d byte-identical, %d with kv lanes "
      "(skipped: %d unsupported shapes, %d over shared memory); parallel walk converged in %d "
      "of them, %.2f rounds on average; %d finished by the jump tables\n",
      runner.Name(), stats.cases, kNumWalkModes, stats.identical, stats.with_lanes, unsupported,
      stats.too_large, stats.parallel_converged,
      stats.parallel_converged ? double(stats.parallel_rounds) / stats.parallel_converged : 0.0,
      stats.jumped);
  EXPECT_EQ(stats.identical, stats.cases);
  EXPECT_GT(stats.cases, min_cases);
  EXPECT_GT(stats.with_lanes, 0);
}

template <class Runner>
void CheckInvalidBatches(Runner& runner, int iterations, int min_checked) {
  std::mt19937 rng(77);
  int checked = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    Batch batch = RandomBatch(rng, false);
    const PlanOptions options = RandomOptions(rng);
    absl::StatusOr<Resolved> r = Resolve(batch, options);
    if (!r.ok()) continue;
    const int max_qlen = std::max(1, batch.max_qlen());
    Corrupt(rng, batch);
    const absl::Status host = ValidateBatch(batch);
    if (host.ok()) continue;  // some corruptions are harmless for some batches
    const ExpectedError want = FromHostMessage(std::string(host.message()));
    ASSERT_NE(want.code, -1) << "unmapped host error: " << host.message();
    const Capacities caps = FromPlanCapacity(r->capacity);
    runner.Upload(batch);
    // max_qlen stays what the engine sized for; a request above it is an error the host does
    // not have, which the test only accepts after the host's own first error.
    runner.Run(runner.Params(batch, *r, caps, max_qlen, checked % kNumWalkModes));
    const GpuPlanStatus st = runner.Status();
    ASSERT_EQ(st.code, want.code) << host.message() << " (gpu index " << st.index << ")";
    EXPECT_EQ(st.index, want.index) << host.message();
    EXPECT_EQ(st.value, want.value) << host.message();
    EXPECT_TRUE(runner.OutputsUntouched()) << host.message();
    ++checked;
  }
  std::printf("[%s planner] invalid batches: %d, each the host's first error, outputs untouched\n",
              runner.Name(), checked);
  EXPECT_GT(checked, min_checked);
}

template <class Runner>
void CheckQlenAboveTheConfiguredMaximum(Runner& runner) {
  const Batch batch = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {100, 200, 300}, 4, 16);
  absl::StatusOr<Resolved> r = Resolve(batch, PlanOptions{});
  ASSERT_TRUE(r.ok());
  runner.Upload(batch);
  runner.Run(runner.Params(batch, *r, FromPlanCapacity(r->capacity), 3, 0));
  EXPECT_EQ(runner.Status().code, kGpuPlanQlenAboveMax);
  EXPECT_EQ(runner.Status().index, 0);
  EXPECT_EQ(runner.Status().value, 4);
  EXPECT_TRUE(runner.OutputsUntouched());
}

template <class Runner>
void CheckSmallBuffers(Runner& runner, int iterations, int min_checked) {
  std::mt19937 rng(99);
  int checked = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    const Batch batch = RandomBatch(rng, false);
    const PlanOptions options = RandomOptions(rng);
    absl::StatusOr<Resolved> r = Resolve(batch, options);
    if (!r.ok()) continue;
    Capacities caps = FromPlanCapacity(r->capacity);
    const HostResult full = PlanOnHost(batch, r->options, caps);
    ASSERT_TRUE(full.sizes.ok()) << full.sizes.status();
    const PlanSizes& s = *full.sizes;
    const int64_t need[6] = {
        s.num_virtual_requests + 1, s.num_cu + 1,           s.num_works,
        s.num_reduce_tiles + 1,     2 * s.num_reduce_tiles, s.num_reduce_pieces};
    const int which = rng() % 6;
    if (need[which] == 0) continue;
    caps.entries[which] = need[which] - 1 - static_cast<int64_t>(rng() % 2) * (need[which] > 1);
    const HostResult host = PlanOnHost(batch, r->options, caps);
    ASSERT_EQ(host.sizes.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string message(host.sizes.status().message());
    int named = -1;
    for (int i = 0; i < 6; ++i) {
      if (message.find(std::string("plan buffer ") + kBufferNames[i] + " ") != std::string::npos) {
        named = i;
      }
    }
    runner.Upload(batch);
    runner.Run(runner.Params(batch, *r, caps, std::max(1, batch.max_qlen()), iter % kNumWalkModes));
    const GpuPlanStatus st = runner.Status();
    ASSERT_EQ(st.code, kGpuPlanBufferTooSmall) << message;
    EXPECT_EQ(st.index, named) << message;
    EXPECT_EQ(st.capacity, caps.entries[which]) << message;
    EXPECT_EQ(st.value, need[which]) << message;
    EXPECT_TRUE(runner.OutputsUntouched()) << message;
    // The host leaves its buffers unmodified too.
    for (int i = 0; i < 6; ++i) {
      EXPECT_TRUE(std::all_of(host.words[i].begin(), host.words[i].end(),
                              [](int32_t w) { return w == kSentinel; }));
    }
    ++checked;
  }
  std::printf("[%s planner] small buffers: %d, each the host's buffer, outputs untouched\n",
              runner.Name(), checked);
  EXPECT_GT(checked, min_checked);
}

}  // namespace mlaps::testing

#endif  // MLAPS_TESTS_KERNELS_PLANNER_PLANNER_KERNEL_TESTING_H_
