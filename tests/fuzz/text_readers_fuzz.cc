// Fuzz target: the text-format readers. The input is "<batch text>\n---\n<plan text>" or,
// when it starts with "registry", a registry text. Parsed batches are validated; a valid
// batch and any parsed plan go through the checker (which must survive any plan: huge or
// negative indices, mismatched arrays); parsed registries are validated and, when sound,
// resolve a few queries.
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "golden/golden_cases.h"
#include "metadata/proto_io.h"
#include "metadata/registry.h"
#include "sim/plan_checker.h"
#include "tests/fuzz/fuzz_targets.h"

namespace mlaps {
namespace internal {
std::string_view EmbeddedFile(std::string_view basename);  // registry_data.cc
}  // namespace internal

namespace fuzz {

int FuzzTextReaders(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  if (absl::StartsWith(text, "registry")) {
    proto::KernelRegistry registry;
    if (!ParseTextProto(text.substr(8), &registry).ok()) return 0;
    if (!ValidateRegistry(registry).ok()) return 0;
    for (int h : {16, 32, 48, 64, 128}) {
      for (int q : {1, 2, 3, 4, 8}) {
        VariantQuery query;
        query.arch = Arch::kGfx950;
        query.num_heads = h;
        query.qlen = q;
        absl::StatusOr<ResolvedVariant> v = ResolveVariant(registry, query);
        if (v.ok() && (v->tokens_per_tile < 1 || v->head_fold < 1 ||
                       v->heads_per_group * v->head_fold != h)) {
          Fail("a validated registry resolved an impossible variant: " + v->name);
        }
      }
    }
    return 0;
  }
  const size_t split = text.find("\n---\n");
  proto::Batch pb;
  if (!ParseTextProto(text.substr(0, split), &pb).ok()) return 0;
  absl::StatusOr<Batch> batch = BatchFromProto(pb);
  if (!batch.ok() || !ValidateBatch(*batch).ok()) return 0;
  if (split == absl::string_view::npos) return 0;
  proto::WorkPlan pp;
  if (!ParseTextProto(text.substr(split + 5), &pp).ok()) return 0;
  absl::StatusOr<WorkPlan> plan = PlanFromProto(pp);
  if (!plan.ok()) return 0;
  sim::CheckOptions options;
  options.max_violations = 50;
  sim::CheckPlan(*batch, *plan, options);  // must not crash, whatever the plan says
  return 0;
}

std::vector<std::string> TextReaderSeeds() {
  std::vector<std::string> seeds;
  for (const golden::GoldenCase& c : golden::ReadableCases()) {
    absl::StatusOr<WorkPlan> plan = PlanDecode(c.batch, c.options);
    if (!plan.ok()) continue;
    seeds.push_back(PrintTextProto(BatchToProto(c.batch)) + "\n---\n" +
                    PrintTextProto(PlanToProto(*plan)));
  }
  for (const char* arch : {"gfx942.textproto", "gfx950.textproto", "sm90.textproto"}) {
    seeds.push_back("registry" + std::string(internal::EmbeddedFile(arch)));
  }
  return seeds;
}

}  // namespace fuzz
}  // namespace mlaps
