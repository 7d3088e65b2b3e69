// Fuzz target: batch validation + planner + checker. Any batch the validator accepts must be
// planned (or refused with NotFound for an unsupported shape / InvalidArgument for options),
// every plan must pass the checker and fit the capacity computed from the batch's maxima,
// and planning into exactly-sized caller buffers must give the same plan (ASan sees any
// write past them); buffers one entry short must be refused, untouched.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "golden/golden_cases.h"
#include "metadata/capacity.h"
#include "metadata/planner.h"
#include "sim/plan_checker.h"
#include "tests/fuzz/byte_reader.h"
#include "tests/fuzz/fuzz_targets.h"

namespace mlaps::fuzz {
namespace {

constexpr int kHeads[] = {16, 32, 48, 64, 128};

// The byte format (see EncodeCase for the inverse).
struct Decoded {
  Batch batch;
  PlanOptions options;
};

Decoded Decode(ByteReader& in) {
  Decoded d;
  Batch& b = d.batch;
  b.arch = static_cast<Arch>(in.InRange(0, 2));
  const uint8_t flags = in.Take<uint8_t>();
  b.q_dtype = flags & 1 ? DType::kFp8 : DType::kBf16;
  b.kv_dtype = flags & 2 ? DType::kFp8 : DType::kBf16;
  b.causal = flags & 4;
  b.cp_round_robin = flags & 8;
  const bool sparse = flags & 16;
  d.options.policy = flags & 32 ? PlanPolicy::kLongestFirst : PlanPolicy::kGreedyPayload;
  d.options.lse = flags & 64;
  const int heads = static_cast<int>(in.InRange(0, 5));
  b.num_heads = heads < 5 ? kHeads[heads] : in.Take<int32_t>();
  const int page = static_cast<int>(in.InRange(0, 9));
  b.page_size = page < 9 ? 1 << page : in.Take<int32_t>();
  const int requests = static_cast<int>(in.InRange(1, 48));
  const int qlen = static_cast<int>(in.InRange(0, 8));  // 0: per request
  b.qo_indptr = {0};
  b.kv_indptr = {0};
  std::vector<int> qlens(requests, qlen);
  if (qlen == 0) {
    for (int& q : qlens) q = static_cast<int>(in.InRange(0, 8));
  }
  for (int r = 0; r < requests; ++r) {
    const int64_t kv = in.InRange(0, 65535);
    const int64_t ps = std::max(1, b.page_size);
    const int64_t pages = (kv + ps - 1) / ps;
    b.qo_indptr.push_back(b.qo_indptr.back() + qlens[r]);
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indptr.back() + pages));
    b.kv_last_page_lens.push_back(static_cast<int32_t>(pages == 0 ? 0 : kv - (pages - 1) * ps));
  }
  if (sparse) b.sparse_topk = static_cast<int>(in.InRange(0, 4096));
  d.options.num_cu = static_cast<int>(in.InRange(0, 300));
  const int gran = static_cast<int>(in.InRange(0, 10));
  d.options.kv_granularity = gran == 0 ? 0 : gran < 10 ? 1 << (gran - 1) : in.Take<int32_t>();
  d.options.fixed_overhead = static_cast<int>(in.InRange(-1, 8));
  d.options.max_split_per_batch = static_cast<int>(in.InRange(0, 10));
  // Corruptions: raw values written into the arrays, as a buggy engine would.
  const int corruptions = static_cast<int>(in.InRange(0, 3));
  for (int c = 0; c < corruptions; ++c) {
    const int array = static_cast<int>(in.InRange(0, 2));
    std::vector<int32_t>& v = array == 0   ? b.qo_indptr
                              : array == 1 ? b.kv_indptr
                                           : b.kv_last_page_lens;
    const size_t index = in.Take<uint16_t>() % v.size();
    v[index] = in.Take<int32_t>();
  }
  return d;
}

std::string Encode(const Batch& b, const PlanOptions& o) {
  ByteWriter w;
  w.PutRange(static_cast<int>(b.arch), 0, 2);
  w.Put<uint8_t>((b.q_dtype == DType::kFp8) | (b.kv_dtype == DType::kFp8) << 1 | b.causal << 2 |
                 b.cp_round_robin << 3 | (b.sparse_topk > 0) << 4 |
                 (o.policy == PlanPolicy::kLongestFirst) << 5 | o.lse << 6);
  w.PutRange(std::find(std::begin(kHeads), std::end(kHeads), b.num_heads) - kHeads, 0, 5);
  int page = 0;
  while ((1 << page) < b.page_size) ++page;
  w.PutRange(page, 0, 9);
  w.PutRange(b.num_requests(), 1, 48);
  w.PutRange(0, 0, 8);  // per-request qlens
  for (int r = 0; r < b.num_requests(); ++r) w.PutRange(b.qlen(r), 0, 8);
  for (int r = 0; r < b.num_requests(); ++r) w.PutRange(b.kv_len(r), 0, 65535);
  if (b.sparse_topk > 0) w.PutRange(b.sparse_topk, 0, 4096);
  w.PutRange(o.num_cu, 0, 300);
  int gran = 0;
  if (o.kv_granularity > 0) {
    while ((1 << gran) < o.kv_granularity) ++gran;
    ++gran;
  }
  w.PutRange(gran, 0, 10);
  w.PutRange(o.fixed_overhead, -1, 8);
  w.PutRange(o.max_split_per_batch, 0, 10);
  w.PutRange(0, 0, 3);
  return w.bytes();
}

}  // namespace

int FuzzPlanner(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const Decoded d = Decode(in);
  const Batch& b = d.batch;
  const absl::Status valid = ValidateBatch(b);
  // A resource bound, not a correctness one: plans are O(q tokens); a corrupted indptr can
  // describe a valid batch of 60M tokens, whose plan takes gigabytes.
  if (valid.ok() && b.total_q_tokens() > (1 << 16)) return 0;
  absl::StatusOr<WorkPlan> plan = PlanDecode(b, d.options);
  if (!valid.ok()) {
    if (plan.ok()) Fail("the planner accepted a batch the validator rejects: " + valid.ToString());
    return 0;
  }
  if (!plan.ok()) {
    const absl::StatusCode code = plan.status().code();
    if (code != absl::StatusCode::kNotFound && code != absl::StatusCode::kInvalidArgument) {
      Fail("unexpected planner error: " + plan.status().ToString());
    }
    return 0;
  }
  const std::vector<sim::Violation> v = sim::CheckPlan(b, *plan);
  if (!v.empty()) Fail("accepted plan fails the checker:\n" + sim::FormatViolations(v));
  absl::StatusOr<PlanCapacity> cap =
      ComputePlanCapacity(CapacityQueryOf(b, plan->num_cu, d.options.lse));
  if (!cap.ok()) Fail("no capacity for a planned batch: " + cap.status().ToString());
  if (static_cast<int64_t>(plan->work_info.size()) > cap->work_info ||
      static_cast<int64_t>(plan->reduce_partial_map.size()) > cap->reduce_partial_map ||
      static_cast<int64_t>(plan->reduce_indptr.size()) > cap->reduce_indptr ||
      plan->num_partial_rows > cap->partial_rows) {
    Fail(absl::StrCat("plan exceeds its capacity: works ", plan->work_info.size(), " / ",
                      cap->work_info, ", pieces ", plan->reduce_partial_map.size(), " / ",
                      cap->reduce_partial_map));
  }
  // Exactly-sized caller buffers: same plan; one short: refused and untouched.
  const bool shrink = in.Bool();
  std::vector<int32_t> qo(plan->qo_indptr.size()), wi(plan->work_indptr.size()),
      ri(plan->reduce_indptr.size()), rf(plan->reduce_final_map.size()),
      rp(plan->reduce_partial_map.size());
  std::vector<WorkInfo> works(plan->work_info.size() - (shrink && !plan->work_info.empty()));
  const PlanBuffers buffers{absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(works),
                            absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)};
  absl::StatusOr<PlanSizes> sizes = PlanDecodeInto(b, d.options, buffers);
  if (works.size() < plan->work_info.size()) {
    if (sizes.ok() || sizes.status().code() != absl::StatusCode::kResourceExhausted) {
      Fail("a short work_info buffer was not refused");
    }
    return 0;
  }
  if (!sizes.ok()) Fail("exact buffers refused: " + sizes.status().ToString());
  if (wi != plan->work_indptr || rp != plan->reduce_partial_map ||
      !std::equal(works.begin(), works.end(), plan->work_info.begin(),
                  [](const WorkInfo& a, const WorkInfo& c) {
                    return std::memcmp(&a, &c, sizeof(WorkInfo)) == 0;
                  })) {
    Fail("PlanDecodeInto differs from PlanDecode");
  }
  return 0;
}

std::vector<std::string> PlannerSeeds() {
  std::vector<std::string> seeds;
  for (const std::string& family : golden::FamilyNames()) {
    const std::vector<golden::GoldenCase> cases = golden::FamilyCases(family);
    // Every 25th case of each family, with batches small enough for the format.
    for (size_t i = 0; i < cases.size(); i += 25) {
      if (cases[i].batch.num_requests() <= 48) {
        seeds.push_back(Encode(cases[i].batch, cases[i].options));
      }
    }
  }
  for (const golden::GoldenCase& c : golden::ReadableCases()) {
    if (c.batch.num_requests() <= 48) seeds.push_back(Encode(c.batch, c.options));
  }
  return seeds;
}

}  // namespace mlaps::fuzz
