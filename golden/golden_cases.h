// The planner's golden cases: the seed test matrices (AITER's test_mla_persistent and its
// round-robin variant, the sparse MTP matrix) and the text each case renders to. The same
// code generates the files (//tools:regen_golden) and checks them (//tests/golden).
#ifndef MLAPS_GOLDEN_GOLDEN_CASES_H_
#define MLAPS_GOLDEN_GOLDEN_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "metadata/batch.h"
#include "metadata/planner.h"
#include "metadata/work_plan.h"

namespace mlaps::golden {

struct GoldenCase {
  std::string name;  // unique within its family, e.g. "sm90/fp8/h16q3/b32/ctx1024"
  Batch batch;
  PlanOptions options;
};

// Families: "dense" (pairs x batch x ctx x dtype x arch, uniform + one varlen per shape),
// "cp" (W in {2, 3, 4, 7, 8}, one line per rank), "sparse" (topk 2048, qlen 2 and 4).
std::vector<std::string> FamilyNames();
std::vector<GoldenCase> FamilyCases(const std::string& family);

// FNV-1a 64 of every plan array, in a fixed order.
uint64_t PlanDigest(const WorkPlan& plan);

// One line per case: name, counts and digest (or the planner's error code and message).
std::string RenderFamily(const std::string& family);

// The readable subset: small cases whose whole plan (text-format WorkPlan) is kept.
std::vector<GoldenCase> ReadableCases();
std::string RenderReadable(const GoldenCase& c);

}  // namespace mlaps::golden

#endif  // MLAPS_GOLDEN_GOLDEN_CASES_H_
