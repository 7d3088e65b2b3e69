#include "metadata/sparse_gather_spec.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaps {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

absl::Status Invalid(const char* dim, int64_t value, const char* rule) {
  return absl::InvalidArgumentError(absl::StrCat("sparse gather: ", dim, " = ", value, ": ", rule));
}

}  // namespace

int64_t SparseTopkEntries(const SparseGatherDims& dims) { return dims.num_tokens * dims.topk; }

int64_t SparseStatusEntries(const SparseGatherDims& dims) {
  return dims.num_tokens * kSparseGatherStatusWords;
}

int64_t SparseBlockTableEntries(const SparseGatherDims& dims) {
  return dims.map_form == SparseMapForm::kBlockTable ? dims.num_requests * dims.max_blocks : 0;
}

absl::Status ValidateSparseGatherDims(const SparseGatherDims& dims) {
  if (dims.num_tokens < 0 || dims.num_tokens >= kInt32Max) {
    return Invalid("num_tokens", dims.num_tokens, "must be in [0, INT32_MAX)");
  }
  if (dims.topk < 1 || dims.topk > kInt32Max) {
    return Invalid("topk", dims.topk, "must be in [1, INT32_MAX]");
  }
  if (dims.num_tokens * dims.topk > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse gather: num_tokens * topk = ", dims.num_tokens, " * ", dims.topk,
                     " overflows int32"));
  }
  if (dims.num_requests < 0 || dims.num_requests >= kInt32Max) {
    return Invalid("num_requests", dims.num_requests, "must be in [0, INT32_MAX)");
  }
  if (dims.packed_capacity < 0 || dims.packed_capacity > kInt32Max) {
    return Invalid("packed_capacity", dims.packed_capacity, "must be in [0, INT32_MAX]");
  }
  switch (dims.map_form) {
    case SparseMapForm::kBlockTable:
      if (dims.page_size < 1 || dims.page_size > (1 << 20) ||
          (dims.page_size & (dims.page_size - 1)) != 0) {
        return Invalid("page_size", dims.page_size, "must be a power of two in [1, 2^20]");
      }
      if (dims.max_blocks < 0 || dims.max_blocks > kInt32Max) {
        return Invalid("max_blocks", dims.max_blocks, "must be in [0, INT32_MAX]");
      }
      if (dims.num_requests * dims.max_blocks > kInt32Max) {
        return absl::InvalidArgumentError(
            absl::StrCat("sparse gather: num_requests * max_blocks = ", dims.num_requests, " * ",
                         dims.max_blocks, " overflows int32"));
      }
      return absl::OkStatus();
    case SparseMapForm::kFlat:
      if (dims.num_kv_indices < 0 || dims.num_kv_indices > kInt32Max) {
        return Invalid("num_kv_indices", dims.num_kv_indices, "must be in [0, INT32_MAX]");
      }
      return absl::OkStatus();
  }
  return Invalid("map_form", static_cast<int64_t>(dims.map_form), "must be kBlockTable or kFlat");
}

}  // namespace mlaps
