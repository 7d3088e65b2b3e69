#include "sim/raw_plan_io.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace mlaps::sim {

absl::StatusOr<std::vector<int32_t>> ReadInt32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' has ", bytes.size(), " bytes, not a whole number of int32"));
  }
  std::vector<int32_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&bytes[4 * i]);
    out[i] = static_cast<int32_t>(uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 |
                                  uint32_t{b[3]} << 24);
  }
  return out;
}

absl::StatusOr<WorkPlan> ReadRawPlan(const std::string& dir, int head_fold) {
  WorkPlan plan;
  absl::StatusOr<std::vector<int32_t>> indptr = ReadInt32File(dir + "/work_indptr.bin");
  if (!indptr.ok()) return indptr.status();
  absl::StatusOr<std::vector<int32_t>> info = ReadInt32File(dir + "/work_info_set.bin");
  if (!info.ok()) return info.status();
  if (indptr->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/work_indptr.bin is empty"));
  }
  if (info->size() % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/work_info_set.bin has ", info->size(), " int32, not 8 per work item"));
  }
  plan.work_indptr = *indptr;
  plan.num_cu = static_cast<int>(indptr->size()) - 1;
  plan.head_fold = head_fold;
  // An engine's buffer may be larger than the plan: keep the items work_indptr covers, if
  // it is sane; the checker reports the rest.
  size_t items = info->size() / 8;
  if (plan.work_indptr.back() >= 0 && static_cast<size_t>(plan.work_indptr.back()) <= items) {
    items = plan.work_indptr.back();
  }
  plan.work_info.resize(items);
  std::memcpy(plan.work_info.data(), info->data(), items * sizeof(WorkInfo));
  for (const char* name : {"reduce_indptr", "reduce_final_map", "reduce_partial_map"}) {
    const std::string path = absl::StrCat(dir, "/", name, ".bin");
    if (!std::ifstream(path)) continue;
    absl::StatusOr<std::vector<int32_t>> v = ReadInt32File(path);
    if (!v.ok()) return v.status();
    if (std::strcmp(name, "reduce_indptr") == 0) plan.reduce_indptr = *v;
    if (std::strcmp(name, "reduce_final_map") == 0) plan.reduce_final_map = *v;
    if (std::strcmp(name, "reduce_partial_map") == 0) plan.reduce_partial_map = *v;
  }
  return plan;
}

absl::Status ReadRawBatch(const std::string& dir, Batch* batch) {
  for (auto [name, target] :
       {std::pair{"qo_indptr", &batch->qo_indptr}, std::pair{"kv_indptr", &batch->kv_indptr},
        std::pair{"kv_last_page_lens", &batch->kv_last_page_lens}}) {
    absl::StatusOr<std::vector<int32_t>> v = ReadInt32File(absl::StrCat(dir, "/", name, ".bin"));
    if (!v.ok()) return v.status();
    *target = *v;
  }
  return absl::OkStatus();
}

}  // namespace mlaps::sim
