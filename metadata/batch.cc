#include "metadata/batch.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaps {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

absl::Status Invalid(absl::string_view field, int64_t index, int64_t value, absl::string_view why) {
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, ": ", why));
  }
  return absl::InvalidArgumentError(absl::StrCat(field, "[", index, "] = ", value, ": ", why));
}

// indptr of B+1 entries starting at 0, non-decreasing.
absl::Status ValidateIndptr(absl::string_view field, const std::vector<int32_t>& indptr) {
  if (indptr.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", indptr.size(), " entries; need B+1 >= 2"));
  }
  if (indptr[0] != 0) return Invalid(field, 0, indptr[0], "must start at 0");
  for (size_t i = 1; i < indptr.size(); ++i) {
    if (indptr[i] < 0) return Invalid(field, i, indptr[i], "is negative");
    if (indptr[i] < indptr[i - 1]) {
      return Invalid(field, i, indptr[i],
                     absl::StrCat("is less than the previous entry ", indptr[i - 1],
                                  " (indptr must be non-decreasing)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int Batch::max_qlen() const {
  int m = 0;
  for (int b = 0; b < num_requests(); ++b) m = std::max(m, qlen(b));
  return m;
}

absl::Status ValidateBatch(const Batch& batch) {
  const int h = batch.num_heads;
  if (h != 16 && h != 32 && h != 48 && h != 64 && h != 128) {
    return Invalid("num_heads", -1, h, "must be one of 16, 32, 48, 64, 128");
  }
  if (!IsPowerOfTwo(batch.page_size) || batch.page_size > (1 << 20)) {
    return Invalid("page_size", -1, batch.page_size, "must be a power of two in [1, 2^20]");
  }
  if (batch.sparse_topk < 0) {
    return Invalid("sparse_topk", -1, batch.sparse_topk, "must be >= 0 (0: dense)");
  }
  if (absl::Status s = ValidateIndptr("qo_indptr", batch.qo_indptr); !s.ok()) return s;
  if (absl::Status s = ValidateIndptr("kv_indptr", batch.kv_indptr); !s.ok()) return s;
  const int64_t num_requests = static_cast<int64_t>(batch.qo_indptr.size()) - 1;
  if (batch.kv_indptr.size() != batch.qo_indptr.size()) {
    return absl::InvalidArgumentError(absl::StrCat("kv_indptr has ", batch.kv_indptr.size(),
                                                   " entries but qo_indptr has ",
                                                   batch.qo_indptr.size(), "; both must be B+1"));
  }
  if (static_cast<int64_t>(batch.kv_last_page_lens.size()) != num_requests) {
    return absl::InvalidArgumentError(absl::StrCat("kv_last_page_lens has ",
                                                   batch.kv_last_page_lens.size(),
                                                   " entries; need B = ", num_requests));
  }
  // Each request's q tokens are H rows each in the kernels' int32 row arithmetic.
  if (int64_t{batch.qo_indptr.back()} * h * 2 > kInt32Max) {
    return Invalid("qo_indptr", num_requests, batch.qo_indptr.back(),
                   absl::StrCat("total q tokens x num_heads x head folding overflows int32"));
  }
  int64_t total_kv_tokens = 0;
  for (int b = 0; b < num_requests; ++b) {
    const int qlen = batch.qlen(b);
    if (batch.sparse_topk > 0 ? qlen != 1 : qlen <= 0) {
      return Invalid("qlen", b, qlen,
                     batch.sparse_topk > 0
                         ? "must be 1 in a sparse per-token batch (qo_indptr = arange(T+1))"
                         : "must be >= 1 (qo_indptr[b+1] - qo_indptr[b])");
    }
    const int pages = batch.num_pages(b);
    const int32_t last = batch.kv_last_page_lens[b];
    if (pages > 0 && (last < 1 || last > batch.page_size)) {
      return Invalid("kv_last_page_lens", b, last,
                     absl::StrCat("must be in [1, page_size = ", batch.page_size, "]"));
    }
    if (pages == 0 && (last < 0 || last > batch.page_size)) {
      return Invalid(
          "kv_last_page_lens", b, last,
          absl::StrCat("must be in [0, page_size = ", batch.page_size, "] (request has no pages)"));
    }
    const int64_t kv_len = batch.kv_len(b);
    if (kv_len > kInt32Max) return Invalid("kv_len", b, kv_len, "overflows int32");
    total_kv_tokens += kv_len;
    if (total_kv_tokens > kInt32Max) {
      return Invalid("kv_len", b, kv_len, "the batch's total kv tokens overflow int32");
    }
    if (batch.sparse_topk > 0 && kv_len > batch.sparse_topk) {
      return Invalid("kv_len", b, kv_len,
                     absl::StrCat("exceeds sparse_topk = ", batch.sparse_topk,
                                  " in a sparse per-token batch"));
    }
    const bool dense_causal = batch.causal && !batch.cp_round_robin && batch.sparse_topk == 0;
    if (dense_causal && kv_len < qlen) {
      return Invalid(
          "kv_len", b, kv_len,
          absl::StrCat("is shorter than qlen = ", qlen, " (causal decode needs kv_len >= qlen)"));
    }
  }
  return absl::OkStatus();
}

Batch MakeVarlenBatch(Arch arch, DType dtype, int num_heads, absl::Span<const int> kv_lens,
                      int qlen, int page_size) {
  Batch batch;
  batch.arch = arch;
  batch.q_dtype = batch.kv_dtype = dtype;
  batch.num_heads = num_heads;
  batch.page_size = page_size;
  batch.qo_indptr.push_back(0);
  batch.kv_indptr.push_back(0);
  for (int kv_len : kv_lens) {
    const int pages = (kv_len + page_size - 1) / page_size;
    batch.qo_indptr.push_back(batch.qo_indptr.back() + qlen);
    batch.kv_indptr.push_back(batch.kv_indptr.back() + pages);
    batch.kv_last_page_lens.push_back(pages == 0 ? 0 : kv_len - (pages - 1) * page_size);
  }
  return batch;
}

Batch MakeUniformBatch(Arch arch, DType dtype, int num_heads, int batch_size, int qlen, int kv_len,
                       int page_size) {
  std::vector<int> kv_lens(batch_size, kv_len);
  return MakeVarlenBatch(arch, dtype, num_heads, kv_lens, qlen, page_size);
}

}  // namespace mlaps
