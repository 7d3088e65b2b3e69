#include "golden/golden_cases.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "metadata/cp_shard.h"
#include "metadata/proto_io.h"
#include "metadata/sparse_layout.h"

namespace mlaps::golden {
namespace {

struct Pair {
  int heads, qlen;
};
// The seed's (nhead, qlen) pairs (AITER PR #4521 test plan).
constexpr Pair kSeedPairs[] = {{16, 3}, {16, 4}, {16, 6}, {32, 2},  {32, 3}, {32, 4},
                               {64, 1}, {64, 2}, {64, 3}, {128, 1}, {128, 2}};

std::vector<int> VarlenLengths(int batch, int ctx, int qlen, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(std::max(qlen, ctx / 8), ctx * 2);
  std::vector<int> out(batch);
  for (int& l : out) l = len(rng);
  return out;
}

std::vector<GoldenCase> DenseCases() {
  std::vector<GoldenCase> out;
  for (Arch arch : {Arch::kGfx950, Arch::kSm90}) {
    for (DType dtype : {DType::kFp8, DType::kBf16}) {
      for (const Pair& p : kSeedPairs) {
        for (int batch : {32, 64, 128}) {
          const std::string shape = absl::StrCat(ArchName(arch), "/", DTypeName(dtype), "/h",
                                                 p.heads, "q", p.qlen, "/b", batch);
          for (int ctx : {1024, 5000, 8192, 16384}) {
            out.push_back({absl::StrCat(shape, "/ctx", ctx),
                           MakeUniformBatch(arch, dtype, p.heads, batch, p.qlen, ctx, 64),
                           PlanOptions{}});
          }
          const uint32_t seed = static_cast<uint32_t>(p.heads * 1000 + p.qlen * 10 + batch);
          out.push_back({absl::StrCat(shape, "/varlen", seed),
                         MakeVarlenBatch(arch, dtype, p.heads,
                                         VarlenLengths(batch, 8192, p.qlen, seed), p.qlen, 64),
                         PlanOptions{}});
        }
      }
    }
  }
  return out;
}

// The round-robin seed's shapes; every rank of every W.
std::vector<GoldenCase> CpCases() {
  constexpr Pair kCpPairs[] = {{16, 4}, {32, 3}, {64, 1}, {64, 2}, {128, 2}, {16, 8}, {64, 17}};
  std::vector<GoldenCase> out;
  for (Arch arch : {Arch::kGfx950, Arch::kSm90}) {
    for (const Pair& p : kCpPairs) {
      for (int ctx : {13, 1200, 8192}) {
        for (int batch : {1, 32}) {
          Batch global = MakeUniformBatch(arch, DType::kFp8, p.heads, batch, p.qlen, ctx, 1);
          for (int w : {2, 3, 4, 7, 8}) {
            for (int rank = 0; rank < w; ++rank) {
              absl::StatusOr<Batch> shard = MakeCpShardBatch(global, {w, 1}, rank);
              if (!shard.ok()) continue;
              out.push_back({absl::StrCat(ArchName(arch), "/fp8/h", p.heads, "q", p.qlen, "/b",
                                          batch, "/ctx", ctx, "/w", w, "r", rank),
                             *shard, PlanOptions{}});
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<GoldenCase> SparseCases() {
  std::vector<GoldenCase> out;
  for (Arch arch : {Arch::kGfx950, Arch::kSm90}) {
    for (int heads : {16, 64, 128}) {
      for (int qlen : {2, 4}) {
        for (int batch : {32, 128}) {
          const uint32_t seed = static_cast<uint32_t>(heads * 100 + qlen * 10 + batch);
          std::vector<int> lens = VarlenLengths(batch, 5000, qlen, seed);
          std::vector<int32_t> ctx(lens.begin(), lens.end());
          absl::StatusOr<SparseLayout> layout =
              MakeSparseLayout(arch, DType::kFp8, heads, ctx, qlen, 2048, batch + 4);
          if (!layout.ok()) continue;
          out.push_back({absl::StrCat(ArchName(arch), "/fp8/h", heads, "q", qlen, "/b", batch,
                                      "+4pad/topk2048/seed", seed),
                         layout->batch, PlanOptions{}});
        }
      }
    }
  }
  return out;
}

void Mix(uint64_t& h, int32_t x) {
  const uint32_t u = static_cast<uint32_t>(x);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
}

}  // namespace

std::vector<std::string> FamilyNames() { return {"dense", "cp", "sparse"}; }

std::vector<GoldenCase> FamilyCases(const std::string& family) {
  if (family == "dense") return DenseCases();
  if (family == "cp") return CpCases();
  if (family == "sparse") return SparseCases();
  return {};
}

uint64_t PlanDigest(const WorkPlan& plan) {
  uint64_t h = 14695981039346656037ull;
  for (int32_t x : plan.qo_indptr) Mix(h, x);
  for (int32_t x : plan.work_indptr) Mix(h, x);
  for (const WorkInfo& w : plan.work_info) {
    for (int32_t x : {w.batch_idx, w.partial_qo_loc, w.qo_start, w.qo_end, w.kv_start, w.kv_end,
                      w.kv_offset, w.pad}) {
      Mix(h, x);
    }
  }
  for (int32_t x : plan.reduce_indptr) Mix(h, x);
  for (int32_t x : plan.reduce_final_map) Mix(h, x);
  for (int32_t x : plan.reduce_partial_map) Mix(h, x);
  return h;
}

std::string RenderFamily(const std::string& family) {
  std::string out = absl::StrCat("# mlaps planner goldens, family '", family,
                                 "'. Regenerate with: bazel run //tools:regen_golden\n",
                                 "# name variant cus works split_tiles pieces partial_rows "
                                 "digest\n");
  for (const GoldenCase& c : FamilyCases(family)) {
    absl::StatusOr<WorkPlan> plan = PlanDecode(c.batch, c.options);
    if (!plan.ok()) {
      absl::StrAppend(&out, c.name, " error ", absl::StatusCodeToString(plan.status().code()), ": ",
                      plan.status().message(), "\n");
      continue;
    }
    absl::StrAppendFormat(&out, "%s %s cus=%d works=%d split_tiles=%d pieces=%d rows=%d %016x\n",
                          c.name, plan->variant, plan->num_cu, plan->num_works(),
                          plan->num_reduce_tiles(), plan->reduce_partial_map.size(),
                          plan->num_partial_rows, PlanDigest(*plan));
  }
  return out;
}

std::vector<GoldenCase> ReadableCases() {
  auto with_cus = [](int n) {
    PlanOptions o;
    o.num_cu = n;
    return o;
  };
  std::vector<GoldenCase> out;
  out.push_back({"sm90_bf16_h16q1_b3_varlen_cu4",
                 MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {300, 40, 1000}, 1, 16),
                 with_cus(4)});
  out.push_back({"gfx950_fp8_h32q3_b2_cu3",
                 MakeUniformBatch(Arch::kGfx950, DType::kFp8, 32, 2, 3, 700, 64), with_cus(3)});
  out.push_back({"sm90_fp8_h128q2_b2_fold_cu5",
                 MakeVarlenBatch(Arch::kSm90, DType::kFp8, 128, {513, 90}, 2, 1), with_cus(5)});
  Batch global = MakeUniformBatch(Arch::kSm90, DType::kFp8, 64, 2, 2, 23, 1);
  out.push_back(
      {"sm90_fp8_h64q2_cp_w3_rank1_cu2", *MakeCpShardBatch(global, {3, 1}, 1), with_cus(2)});
  absl::StatusOr<SparseLayout> sparse =
      MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, std::vector<int32_t>{3000, 2}, 2, 2048, 3);
  out.push_back({"sm90_fp8_h64q2_sparse_topk2048_cu4", sparse->batch, with_cus(4)});
  return out;
}

std::string RenderReadable(const GoldenCase& c) {
  std::string out = absl::StrCat("# mlaps readable golden '", c.name,
                                 "'. Regenerate with: bazel run //tools:regen_golden\n");
  absl::StatusOr<WorkPlan> plan = PlanDecode(c.batch, c.options);
  if (!plan.ok()) return absl::StrCat(out, "# error: ", plan.status().ToString(), "\n");
  absl::StrAppend(&out, PrintTextProto(PlanToProto(*plan)));
  return out;
}

}  // namespace mlaps::golden
