// Every library entry point against each class of bad input, with the exact error it gets:
// a status code and the words of the message that name the field and the value. (The batch
// validator has its own table in tests/metadata/batch_test.cc, the registry validator in
// tests/metadata/registry_test.cc, the CLI in tests/tools/mlaps_cli_test.sh.)
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "metadata/capacity.h"
#include "metadata/cp_shard.h"
#include "metadata/planner.h"
#include "metadata/proto_io.h"
#include "metadata/sparse_layout.h"
#include "sim/cp_merge.h"
#include "sim/raw_plan_io.h"

namespace mlaps {
namespace {

struct Row {
  std::string entry_point, bad_input;
  std::function<absl::Status()> call;
  absl::StatusCode code;
  std::string message;  // a substring of the error message
};

Batch Good() { return MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 2, 2, 300, 16); }

absl::Status Plan(std::function<void(PlanOptions&)> f) {
  PlanOptions o;
  f(o);
  return PlanDecode(Good(), o).status();
}

absl::Status Capacity(std::function<void(CapacityQuery&)> f) {
  CapacityQuery q;
  f(q);
  return ComputePlanCapacity(q).status();
}

absl::Status Into(int work_info, int reduce) {
  Batch b = MakeUniformBatch(Arch::kSm90, DType::kBf16, 16, 1, 1, 20000, 1);
  PlanOptions o;
  o.num_cu = 4;
  std::vector<int32_t> qo(2), wi(5), ri(reduce + 1), rf(2 * reduce), rp(reduce * 4);
  std::vector<WorkInfo> works(work_info);
  return PlanDecodeInto(b, o,
                        {absl::MakeSpan(qo), absl::MakeSpan(wi), absl::MakeSpan(works),
                         absl::MakeSpan(ri), absl::MakeSpan(rf), absl::MakeSpan(rp)})
      .status();
}

absl::Status ParseBatch(const std::string& text) {
  proto::Batch p;
  absl::Status s = ParseTextProto(text, &p);
  if (!s.ok()) return s;
  return BatchFromProto(p).status();
}

absl::Status WriteAndReadRaw(const std::string& name, const std::string& bytes) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/raw_" + name;
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) return absl::InternalError("cannot create " + dir + ": " + made.message());
  std::ofstream(dir + "/work_indptr.bin", std::ios::binary) << std::string("\0\0\0\0", 4);
  std::ofstream(dir + "/work_info_set.bin", std::ios::binary) << bytes;
  return sim::ReadRawPlan(dir, 1).status();
}

absl::Status Merge(int world, int64_t rows, size_t o_size) {
  std::vector<float> o(o_size), lse(rows), out(rows * 4), out_lse(rows);
  std::vector<absl::Span<const float>> os(world, o), ls(world, lse);
  return sim::MergeCpRanks(os, ls, rows, 4, absl::MakeSpan(out), absl::MakeSpan(out_lse));
}

TEST(BadInput, EveryEntryPointNamesTheProblem) {
  using C = absl::StatusCode;
  const std::vector<Row> rows = {
      // planner options
      {"PlanDecode", "num_cu < 0", [] { return Plan([](PlanOptions& o) { o.num_cu = -1; }); },
       C::kInvalidArgument, "num_cu = -1: must be in [1, 65536]"},
      {"PlanDecode", "num_cu too large",
       [] { return Plan([](PlanOptions& o) { o.num_cu = 70000; }); }, C::kInvalidArgument,
       "num_cu = 70000"},
      {"PlanDecode", "granularity not a power of two",
       [] { return Plan([](PlanOptions& o) { o.kv_granularity = 48; }); }, C::kInvalidArgument,
       "kv_granularity = 48: must be a power of two"},
      {"PlanDecode", "negative overhead",
       [] { return Plan([](PlanOptions& o) { o.fixed_overhead = -2; }); }, C::kInvalidArgument,
       "fixed_overhead = -2"},
      {"PlanDecode", "negative split limit",
       [] { return Plan([](PlanOptions& o) { o.max_split_per_batch = -4; }); }, C::kInvalidArgument,
       "max_split_per_batch = -4"},
      {"PlanDecode", "unsupported shape",
       [] {
         Batch b = MakeUniformBatch(Arch::kGfx950, DType::kFp8, 16, 2, 1, 300, 16);
         b.cp_round_robin = true;
         return PlanDecode(b, {}).status();
       },
       C::kNotFound, "supported nearby"},
      {"ParsePolicy", "unknown policy", [] { return ParsePolicy("fastest").status(); },
       C::kInvalidArgument, "policy 'fastest' is not one of: greedy_payload, longest_first"},
      // caller buffers
      {"PlanDecodeInto", "work_info too small", [] { return Into(1, 8); }, C::kResourceExhausted,
       "plan buffer work_info holds 1 entries but this plan needs"},
      {"PlanDecodeInto", "reduce maps too small", [] { return Into(64, 0); }, C::kResourceExhausted,
       "plan buffer reduce_indptr holds 1 entries"},
      // capacity
      {"ComputePlanCapacity", "max_batch 0",
       [] { return Capacity([](CapacityQuery& q) { q.max_batch = 0; }); }, C::kInvalidArgument,
       "max_batch >= 1 (got 0)"},
      {"ComputePlanCapacity", "no variant at all",
       [] {
         return Capacity([](CapacityQuery& q) {
           q.arch = Arch::kGfx950;
           q.num_heads = 48;
         });
       },
       C::kNotFound, "unsupported"},
      // text formats
      {"ParseTextProto", "syntax error", [] { return ParseBatch("num_heads: ?"); },
       C::kInvalidArgument, "cannot parse mlaps.proto.Batch: line 1:"},
      {"ParseTextProto", "unknown field", [] { return ParseBatch("heads: 16"); },
       C::kInvalidArgument, "heads"},
      {"BatchFromProto", "unknown arch", [] { return ParseBatch("arch: \"gfx1100\""); },
       C::kInvalidArgument, "arch 'gfx1100' is not one of gfx942, gfx950, sm90"},
      {"BatchFromProto", "unknown dtype",
       [] { return ParseBatch("arch: \"sm90\" q_dtype: \"fp4\""); }, C::kInvalidArgument,
       "dtype 'fp4' is not one of bf16, fp8"},
      {"PlanFromProto", "odd reduce_final_map",
       [] {
         proto::WorkPlan p;
         p.add_reduce_final_map(1);
         return PlanFromProto(p).status();
       },
       C::kInvalidArgument, "reduce_final_map has 1 entries; must be pairs"},
      {"ReadTextProtoFile", "missing file",
       [] {
         proto::Batch p;
         return ReadTextProtoFile("/nonexistent/batch.txt", &p);
       },
       C::kNotFound, "cannot open '/nonexistent/batch.txt' for reading"},
      // raw dumps
      {"ReadInt32File", "missing file",
       [] { return sim::ReadInt32File("/nonexistent.bin").status(); }, C::kNotFound,
       "cannot open '/nonexistent.bin'"},
      {"ReadRawPlan", "work_info not 8 int32 per item",
       [] { return WriteAndReadRaw("odd", std::string(12, '\0')); }, C::kInvalidArgument,
       "has 3 int32, not 8 per work item"},
      {"ReadRawPlan", "size not a multiple of 4",
       [] { return WriteAndReadRaw("ragged", std::string(6, '\0')); }, C::kInvalidArgument,
       "has 6 bytes, not a whole number of int32"},
      // CP shard maps
      {"MakeCpShardView", "W < 1",
       [] {
         return MakeCpShardView(Good(), {}, {0, 1}, 0).status();
       },
       C::kInvalidArgument, "cp world_size = 0: must be >= 1"},
      {"MakeCpShardView", "I not a power of two",
       [] {
         return MakeCpShardView(Good(), {}, {2, 3}, 0).status();
       },
       C::kInvalidArgument, "cp interleave = 3: must be a power of two"},
      {"MakeCpShardView", "I not dividing the page",
       [] {
         return MakeCpShardView(Good(), {}, {2, 32}, 0).status();
       },
       C::kInvalidArgument, "cp interleave = 32 does not divide page_size = 16"},
      {"MakeCpShardView", "rank outside W",
       [] {
         return MakeCpShardView(Good(), {}, {2, 1}, 2).status();
       },
       C::kInvalidArgument, "cp rank = 2: must be in [0, 2)"},
      {"MakeCpShardView", "kv_indices of the wrong size",
       [] {
         return MakeCpShardView(Good(), {1, 2, 3}, {2, 1}, 0).status();
       },
       C::kInvalidArgument, "kv_indices has 3 entries; kv_indptr[B] = 38"},
      {"MakeCpShardView", "request shorter than W (variant needs every rank)",
       [] {
         CpShardOptions strict;
         strict.require_nonempty_shards = true;
         Batch b = MakeVarlenBatch(Arch::kSm90, DType::kBf16, 16, {3, 100}, 1, 1);
         return MakeCpShardView(b, {}, {4, 1}, 0, strict).status();
       },
       C::kInvalidArgument, "request 0 has kv_len = 3 < W * I = 4"},
      // sparse layout
      {"MakeSparseLayout", "qlen 0",
       [] { return MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5}, 0, 2048, 1).status(); },
       C::kInvalidArgument, "qlen = 0: must be >= 1"},
      {"MakeSparseLayout", "topk 0",
       [] { return MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5}, 1, 0, 1).status(); },
       C::kInvalidArgument, "topk = 0: must be >= 1"},
      {"MakeSparseLayout", "padded batch smaller than the batch",
       [] {
         return MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5, 6}, 1, 2048, 1).status();
       },
       C::kInvalidArgument, "padded_batch = 1 is less than the batch size 2"},
      {"MakeSparseLayout", "negative context",
       [] { return MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {-7}, 1, 2048, 1).status(); },
       C::kInvalidArgument, "context_lens[0] = -7: must be >= 0"},
      {"MakeSparseLayout", "T * topk overflowing int32",
       [] {
         return MakeSparseLayout(Arch::kSm90, DType::kFp8, 64, {5}, 4, 1 << 20, 1024).status();
       },
       C::kInvalidArgument, "overflows int32"},
      // merge
      {"MergeCpRanks", "no ranks",
       [] {
         std::vector<float> out(4), lse(1);
         return sim::MergeCpRanks({}, {}, 1, 4, absl::MakeSpan(out), absl::MakeSpan(lse));
       },
       C::kInvalidArgument, "merge needs W >= 1 ranks"},
      {"MergeCpRanks", "a rank's O of the wrong size", [] { return Merge(2, 1, 3); },
       C::kInvalidArgument, "rank 0: O has 3 floats (want 4)"},
  };
  for (const Row& r : rows) {
    const absl::Status s = r.call();
    EXPECT_EQ(s.code(), r.code) << r.entry_point << " / " << r.bad_input << ": " << s;
    EXPECT_NE(std::string(s.message()).find(r.message), std::string::npos)
        << r.entry_point << " / " << r.bad_input << ":\n  got:  " << s.message() << "\n  want: ..."
        << r.message << "...";
  }
  std::printf("%zu bad-input classes over the entry points\n", rows.size());
}

}  // namespace
}  // namespace mlaps
