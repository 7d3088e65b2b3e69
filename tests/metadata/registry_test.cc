// Tests of the kernel registry: the embedded per-arch text protos, ValidateRegistry and
// ResolveVariant (see metadata/registry.h and docs/design.md section 6).
#include "metadata/registry.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace mlaps {
namespace {

constexpr char kFp8Q1H16[] = "mla_a8w8_qh16_qseqlen1_gqaratio16_ps";
constexpr char kFp8Q2H16[] = "mla_a8w8_qh16_qseqlen2_gqaratio16_ps";
constexpr char kFp8Q1H32[] = "mla_a8w8_qh32_qseqlen1_gqaratio32_ps";
constexpr char kFp8Q4H16[] = "mla_a8w8_qh16_qseqlen4_gqaratio16_ps";
constexpr char kFp8Q4H32[] = "mla_a8w8_qh32_qseqlen4_gqaratio32_ps";
constexpr char kFp8Q4H16Cp[] = "mla_a8w8_qh16_qseqlen4_gqaratio16_ps_cprr";
constexpr char kFp8Q4H32Cp[] = "mla_a8w8_qh32_qseqlen4_gqaratio32_ps_cprr";
constexpr char kBf16Q4H16[] = "mla_a16w16_qh16_qseqlen4_gqaratio16_ps";
constexpr char kBf16Q4H32[] = "mla_a16w16_qh32_qseqlen4_gqaratio32_ps";
constexpr char kBf16Q4H32Cp[] = "mla_a16w16_qh32_qseqlen4_gqaratio32_ps_cprr";
constexpr char kBf16Q1H64Cp[] = "mla_a16w16_qh64_qseqlen1_gqaratio64_ps_cprr";

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

VariantQuery Query(Arch arch, DType dtype, int heads, int qlen, bool cp = false, bool lse = false) {
  VariantQuery q;
  q.arch = arch;
  q.q_dtype = dtype;
  q.kv_dtype = dtype;
  q.num_heads = heads;
  q.qlen = qlen;
  q.cp_round_robin = cp;
  q.lse = lse;
  return q;
}

struct Expect {
  int heads;
  int qlen;
  const char* name;
  int rows_per_tile;
  int tokens_per_tile;
  int head_fold;
};

std::string Describe(const VariantQuery& q) {
  return std::string(ArchName(q.arch)) + " " + std::string(DTypeName(q.q_dtype)) +
         " H=" + std::to_string(q.num_heads) + " qlen=" + std::to_string(q.qlen) +
         (q.cp_round_robin ? " cp" : "") + (q.lse ? " lse" : "");
}

void CheckTable(Arch arch, DType dtype, bool cp, const std::vector<Expect>& table) {
  for (const Expect& e : table) {
    for (bool lse : {false, true}) {
      const VariantQuery q = Query(arch, dtype, e.heads, e.qlen, cp, lse);
      SCOPED_TRACE(Describe(q));
      absl::StatusOr<ResolvedVariant> v = ResolveVariant(q);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->name, e.name);
      EXPECT_EQ(v->rows_per_tile, e.rows_per_tile);
      EXPECT_EQ(v->tokens_per_tile, e.tokens_per_tile);
      EXPECT_EQ(v->head_fold, e.head_fold);
      EXPECT_EQ(v->heads_per_group, e.heads / e.head_fold);
      EXPECT_LE(v->heads_per_group * v->tokens_per_tile, v->rows_per_tile);
    }
  }
}

void CheckUnsupported(const VariantQuery& q, const std::vector<std::string>& needles) {
  SCOPED_TRACE(Describe(q));
  absl::StatusOr<ResolvedVariant> v = ResolveVariant(q);
  ASSERT_FALSE(v.ok()) << "resolved to " << v->name;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
  const std::string msg(v.status().message());
  EXPECT_TRUE(Contains(msg, "unsupported")) << msg;
  for (const std::string& n : needles)
    EXPECT_TRUE(Contains(msg, n)) << "missing '" << n << "' in: " << msg;
}

TEST(RegistryTest, AllEmbeddedRegistriesLoadAndValidate) {
  for (Arch arch : {Arch::kGfx942, Arch::kGfx950, Arch::kSm90}) {
    SCOPED_TRACE(ArchName(arch));
    absl::StatusOr<proto::KernelRegistry> r = LoadRegistry(arch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->arch(), ArchName(arch));
    EXPECT_GT(r->kernel_size(), 0);
    EXPECT_TRUE(ValidateRegistry(*r).ok());
    for (const proto::KernelRow& row : r->kernel()) {
      EXPECT_TRUE(row.ps()) << row.name();
      EXPECT_TRUE(row.lse()) << row.name();
      EXPECT_FALSE(row.prefill()) << row.name();
    }
  }
}

TEST(RegistryTest, NoCprrRowsOnGfx942) {
  absl::StatusOr<proto::KernelRegistry> r = LoadRegistry(Arch::kGfx942);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const proto::KernelRow& row : r->kernel()) EXPECT_FALSE(row.cprr()) << row.name();
}

TEST(RegistryTest, Gfx950Fp8NonCp) {
  CheckTable(Arch::kGfx950, DType::kFp8, /*cp=*/false,
             {
                 {16, 1, kFp8Q1H16, 64, 1, 1},
                 {16, 2, kFp8Q2H16, 64, 2, 1},
                 {32, 1, kFp8Q1H32, 64, 1, 1},
                 {16, 3, kFp8Q4H16, 64, 3, 1},
                 {16, 4, kFp8Q4H16, 64, 4, 1},
                 {16, 6, kFp8Q4H32, 128, 6, 1},
                 {16, 8, kFp8Q4H32, 128, 8, 1},
                 {16, 12, kFp8Q4H32, 128, 8, 1},
                 {32, 2, kFp8Q4H16, 64, 2, 1},
                 {32, 3, kFp8Q4H16, 64, 2, 1},  // tiles of 2 and 1 tokens
                 {32, 4, kFp8Q4H32, 128, 4, 1},
                 {32, 8, kFp8Q4H32, 128, 4, 1},
                 {64, 1, kFp8Q4H16, 64, 1, 1},
                 {64, 2, kFp8Q4H32, 128, 2, 1},
                 {64, 3, kFp8Q4H32, 128, 2, 1},
                 {128, 1, kFp8Q4H32, 128, 1, 1},
                 {128, 2, kFp8Q4H32, 128, 1, 1},
                 {128, 7, kFp8Q4H32, 128, 1, 1},
             });
}

TEST(RegistryTest, Gfx950Fp8QSeqLenColumn) {
  absl::StatusOr<ResolvedVariant> v = ResolveVariant(Query(Arch::kGfx950, DType::kFp8, 16, 2));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->q_seq_len, 2);
  v = ResolveVariant(Query(Arch::kGfx950, DType::kFp8, 64, 1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->q_seq_len, 4);
  EXPECT_EQ(v->heads_per_group, 64);
}

TEST(RegistryTest, Gfx950Fp8Cp) {
  CheckTable(Arch::kGfx950, DType::kFp8, /*cp=*/true,
             {
                 {16, 3, kFp8Q4H16Cp, 64, 3, 1},
                 {16, 4, kFp8Q4H16Cp, 64, 4, 1},
                 {16, 6, kFp8Q4H32Cp, 128, 6, 1},
                 {16, 9, kFp8Q4H32Cp, 128, 8, 1},
                 {32, 2, kFp8Q4H16Cp, 64, 2, 1},
                 {32, 3, kFp8Q4H16Cp, 64, 2, 1},
                 {32, 4, kFp8Q4H32Cp, 128, 4, 1},
                 {32, 5, kFp8Q4H32Cp, 128, 4, 1},
                 {64, 1, kFp8Q4H16Cp, 64, 1, 1},
                 {64, 2, kFp8Q4H32Cp, 128, 2, 1},
                 {64, 3, kFp8Q4H32Cp, 128, 2, 1},
                 {128, 1, kFp8Q4H32Cp, 128, 1, 1},
                 {128, 2, kFp8Q4H32Cp, 128, 1, 1},
             });
}

TEST(RegistryTest, Gfx950Fp8CpLacksQSeqLen1And2Kernels) {
  CheckUnsupported(Query(Arch::kGfx950, DType::kFp8, 16, 1, /*cp=*/true),
                   {"gfx950", "fp8/fp8", "H=16", "qlen=1", "cp_round_robin=true",
                    "supported nearby: (16,3) (16,4)"});
  CheckUnsupported(Query(Arch::kGfx950, DType::kFp8, 16, 2, /*cp=*/true),
                   {"H=16", "qlen=2", "supported nearby: (16,3)"});
  CheckUnsupported(Query(Arch::kGfx950, DType::kFp8, 32, 1, /*cp=*/true),
                   {"H=32", "qlen=1", "supported nearby: (32,2)", "(64,1)"});
}

TEST(RegistryTest, NearbyListHasAtMostSixShapes) {
  absl::StatusOr<ResolvedVariant> v =
      ResolveVariant(Query(Arch::kGfx950, DType::kFp8, 16, 1, /*cp=*/true));
  ASSERT_FALSE(v.ok());
  const std::string msg(v.status().message());
  const size_t at = msg.find("supported nearby:");
  ASSERT_NE(at, std::string::npos) << msg;
  int shapes = 0;
  for (size_t i = at; i < msg.size(); ++i) shapes += msg[i] == '(';
  EXPECT_EQ(shapes, 6) << msg;
  EXPECT_TRUE(Contains(msg, "supported nearby: (16,3) (16,4) (32,2)")) << msg;
}

TEST(RegistryTest, Gfx950Bf16NonCp) {
  CheckTable(Arch::kGfx950, DType::kBf16, /*cp=*/false,
             {
                 {16, 1, kBf16Q4H16, 64, 1, 1},
                 {16, 2, kBf16Q4H16, 64, 2, 1},
                 {16, 3, kBf16Q4H16, 64, 3, 1},
                 {16, 4, kBf16Q4H16, 64, 4, 1},
                 {16, 6, kBf16Q4H32, 128, 6, 1},
                 {32, 1, kBf16Q4H16, 64, 1, 1},
                 {32, 2, kBf16Q4H16, 64, 2, 1},
                 {32, 3, kBf16Q4H32, 128, 3, 1},
                 {32, 4, kBf16Q4H32, 128, 4, 1},
                 {64, 1, kBf16Q4H16, 64, 1, 1},
                 {64, 2, kBf16Q4H32, 128, 2, 1},
                 {64, 3, kBf16Q4H32, 128, 2, 1},
                 {128, 1, kBf16Q4H32, 128, 1, 1},
                 {128, 2, kBf16Q4H32, 128, 1, 1},
             });
}

TEST(RegistryTest, Gfx950Bf16Cp) {
  CheckTable(Arch::kGfx950, DType::kBf16, /*cp=*/true,
             {
                 {16, 1, kBf16Q4H32Cp, 128, 1, 1},
                 {16, 3, kBf16Q4H32Cp, 128, 3, 1},
                 {16, 10, kBf16Q4H32Cp, 128, 8, 1},
                 {32, 1, kBf16Q4H32Cp, 128, 1, 1},
                 {32, 2, kBf16Q4H32Cp, 128, 2, 1},
                 {32, 6, kBf16Q4H32Cp, 128, 4, 1},
                 {64, 1, kBf16Q1H64Cp, 64, 1, 1},
                 {64, 2, kBf16Q1H64Cp, 64, 1, 1},
                 {64, 4, kBf16Q1H64Cp, 64, 1, 1},
                 {128, 1, kBf16Q4H32Cp, 128, 1, 1},
                 {128, 3, kBf16Q4H32Cp, 128, 1, 1},
             });
}

TEST(RegistryTest, Gfx942) {
  for (DType dtype : {DType::kFp8, DType::kBf16}) {
    const char* name = dtype == DType::kFp8 ? "mla_a8w8_qh64_qseqlen4_gqaratio16_ps"
                                            : "mla_a16w16_qh16_m16x4_n16x1_coex0_mask1_ps";
    CheckTable(Arch::kGfx942, dtype, /*cp=*/false,
               {
                   {16, 1, name, 64, 1, 1},
                   {16, 3, name, 64, 3, 1},
                   {16, 4, name, 64, 4, 1},
                   {16, 6, name, 64, 4, 1},
                   {32, 1, name, 64, 1, 1},
                   {32, 3, name, 64, 2, 1},
                   {64, 1, name, 64, 1, 1},
                   {64, 3, name, 64, 1, 1},
                   {128, 1, name, 64, 1, 2},
                   {128, 2, name, 64, 1, 2},
               });
    CheckUnsupported(Query(Arch::kGfx942, dtype, 16, 1, /*cp=*/true),
                     {"gfx942", "cp_round_robin=true", "no shape is supported"});
    CheckUnsupported(Query(Arch::kGfx942, dtype, 48, 1), {"H=48", "supported nearby:"});
  }
  EXPECT_EQ(Fp8FormatOf(Arch::kGfx942), Fp8Format::kE4m3fnuz);
}

TEST(RegistryTest, Sm90) {
  for (bool cp : {false, true}) {
    for (DType dtype : {DType::kBf16, DType::kFp8}) {
      const std::string name =
          std::string("mlaps_sm90_") + std::string(DTypeName(dtype)) + "_m64" + (cp ? "_cprr" : "");
      CheckTable(Arch::kSm90, dtype, cp,
                 {
                     {16, 1, name.c_str(), 64, 1, 1},
                     {16, 4, name.c_str(), 64, 4, 1},
                     {16, 7, name.c_str(), 64, 4, 1},
                     {32, 3, name.c_str(), 64, 2, 1},
                     {48, 1, name.c_str(), 64, 1, 1},
                     {48, 3, name.c_str(), 64, 1, 1},
                     {64, 2, name.c_str(), 64, 1, 1},
                     {128, 1, name.c_str(), 64, 1, 2},
                     {128, 4, name.c_str(), 64, 1, 2},
                 });
      absl::StatusOr<ResolvedVariant> v = ResolveVariant(Query(Arch::kSm90, dtype, 128, 2, cp));
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->heads_per_group, 64);
      // The resolved variant carries its row's calibrated cost (one entry per rows in use, 16
      // rows also at two blocks a CU), and a cprr twin reuses its twin's constants (the
      // registry says so).
      EXPECT_GT(v->cost.ns_per_block(), 0);
      EXPECT_EQ(v->cost.tile_size(), 5);
      absl::StatusOr<ResolvedVariant> twin = ResolveVariant(Query(Arch::kSm90, dtype, 128, 2, !cp));
      ASSERT_TRUE(twin.ok());
      EXPECT_EQ(v->cost.SerializeAsString(), twin->cost.SerializeAsString());
      // Every variant carries the arch's reduce entry.
      EXPECT_EQ(v->reduce.SerializeAsString(),
                LoadRegistry(Arch::kSm90)->reduce().SerializeAsString());
    }
  }
}

TEST(RegistryTest, TheFirstCostEntryOfTheRowsSetsTheDefaultOccupancy) {
  // sm90 16-row tiles: one block a CU first (the narrow-tile kernel), two (the compact
  // layout) second; swapped, the default becomes two blocks a CU.
  absl::StatusOr<proto::KernelRegistry> registry = LoadRegistry(Arch::kSm90);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const VariantQuery query = Query(Arch::kSm90, DType::kFp8, 16, 1, false);
  absl::StatusOr<ResolvedVariant> v = ResolveVariant(*registry, query);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->blocks_per_cu, 1);
  for (proto::KernelRow& row : *registry->mutable_kernel()) {
    proto::CostModel* cost = row.mutable_cost();
    std::vector<int> sixteen;
    for (int k = 0; k < cost->tile_size(); ++k) {
      if (cost->tile(k).rows() == 16) sixteen.push_back(k);
    }
    ASSERT_EQ(sixteen.size(), 2u) << row.name();
    EXPECT_LE(cost->tile(sixteen[0]).blocks_per_cu(), 1) << row.name();
    EXPECT_EQ(cost->tile(sixteen[1]).blocks_per_cu(), 2) << row.name();
    cost->mutable_tile()->SwapElements(sixteen[0], sixteen[1]);
  }
  ASSERT_TRUE(ValidateRegistry(*registry).ok());
  v = ResolveVariant(*registry, query);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->blocks_per_cu, 2);
  // Fuller tiles keep one block a CU either way.
  v = ResolveVariant(*registry, Query(Arch::kSm90, DType::kFp8, 16, 2, false));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->blocks_per_cu, 1);
}

TEST(RegistryTest, H48OnlyOnSm90) {
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    for (bool cp : {false, true}) {
      EXPECT_TRUE(ResolveVariant(Query(Arch::kSm90, dtype, 48, 2, cp)).ok());
    }
  }
  CheckUnsupported(Query(Arch::kGfx950, DType::kFp8, 48, 1),
                   {"gfx950", "fp8/fp8", "H=48", "qlen=1", "cp_round_robin=false",
                    "supported nearby:", "(64,1)", "(32,1)"});
  CheckUnsupported(Query(Arch::kGfx950, DType::kBf16, 48, 4, /*cp=*/true),
                   {"bf16/bf16", "H=48", "qlen=4", "supported nearby:"});
}

TEST(RegistryTest, MalformedQuery) {
  for (auto [h, q] : {std::pair{0, 1}, std::pair{16, 0}, std::pair{-16, 1}, std::pair{16, -2}}) {
    absl::StatusOr<ResolvedVariant> v = ResolveVariant(Query(Arch::kGfx950, DType::kFp8, h, q));
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  }
}

TEST(RegistryTest, MixedDtypesUnsupported) {
  VariantQuery q = Query(Arch::kGfx950, DType::kBf16, 16, 1);
  q.kv_dtype = DType::kFp8;
  CheckUnsupported(q, {"bf16/fp8", "no shape is supported"});
}

TEST(RegistryTest, RegistryOfOtherArchIsNotFound) {
  absl::StatusOr<proto::KernelRegistry> r = LoadRegistry(Arch::kSm90);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<ResolvedVariant> v = ResolveVariant(*r, Query(Arch::kGfx950, DType::kFp8, 16, 1));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(v.status().message()), "sm90")) << v.status();
}

proto::KernelRegistry Parse(const std::string& text) {
  proto::KernelRegistry r;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &r)) << text;
  return r;
}

constexpr char kLseRegistry[] = R"pb(
  arch: "gfx950"
  kernel {
    name: "no_lse"
    q_type: "fp8"
    kv_type: "fp8"
    ps: true
    q_seq_len: 4
    lse: false
    rows_per_tile: 64
    serves { nhead: 16 qlen_min: 1 }
    serves { nhead: 32 qlen_min: 1 }
  }
  kernel {
    name: "with_lse"
    q_type: "fp8"
    kv_type: "fp8"
    ps: true
    q_seq_len: 4
    lse: true
    rows_per_tile: 64
    serves { nhead: 16 qlen_min: 1 }
  }
  kernel {
    name: "not_ps"
    q_type: "fp8"
    kv_type: "fp8"
    ps: false
    lse: true
    rows_per_tile: 64
    serves { nhead: 64 qlen_min: 1 }
  }
)pb";

TEST(RegistryTest, LseRequestHandling) {
  const proto::KernelRegistry r = Parse(kLseRegistry);
  ASSERT_TRUE(ValidateRegistry(r).ok());
  // Without LSE the first row in file order wins; with LSE only lse rows match.
  absl::StatusOr<ResolvedVariant> v =
      ResolveVariant(r, Query(Arch::kGfx950, DType::kFp8, 16, 2, false, /*lse=*/false));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->name, "no_lse");
  v = ResolveVariant(r, Query(Arch::kGfx950, DType::kFp8, 16, 2, false, /*lse=*/true));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->name, "with_lse");
  // H=32 is only served by a row without LSE.
  v = ResolveVariant(r, Query(Arch::kGfx950, DType::kFp8, 32, 1, false, /*lse=*/false));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->name, "no_lse");
  v = ResolveVariant(r, Query(Arch::kGfx950, DType::kFp8, 32, 1, false, /*lse=*/true));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(v.status().message());
  EXPECT_TRUE(Contains(msg, "lse=true")) << msg;
  EXPECT_TRUE(Contains(msg, "no_lse serves the shape but cannot write LSE")) << msg;
  EXPECT_TRUE(Contains(msg, "supported nearby: (16,1)")) << msg;
  // ps = false rows never match.
  v = ResolveVariant(r, Query(Arch::kGfx950, DType::kFp8, 64, 1));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
}

TEST(RegistryTest, EmbeddedLseRequestsResolveLikePlainOnes) {
  for (Arch arch : {Arch::kGfx942, Arch::kGfx950, Arch::kSm90}) {
    for (int h : {16, 32, 64, 128}) {
      for (int q = 1; q <= 8; ++q) {
        absl::StatusOr<ResolvedVariant> plain =
            ResolveVariant(Query(arch, DType::kBf16, h, q, false, false));
        absl::StatusOr<ResolvedVariant> lse =
            ResolveVariant(Query(arch, DType::kBf16, h, q, false, true));
        ASSERT_TRUE(plain.ok()) << plain.status();
        ASSERT_TRUE(lse.ok()) << lse.status();
        EXPECT_EQ(plain->name, lse->name);
      }
    }
  }
}

TEST(RegistryTest, Gfx950ServesEveryNativeShape) {
  for (DType dtype : {DType::kBf16, DType::kFp8}) {
    for (int h : {16, 32, 64, 128}) {
      for (int q = 1; q <= 16; ++q) {
        SCOPED_TRACE(std::to_string(h) + "," + std::to_string(q));
        absl::StatusOr<ResolvedVariant> v = ResolveVariant(Query(Arch::kGfx950, dtype, h, q));
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->head_fold, 1);
        const bool fp8_cp_gap =
            dtype == DType::kFp8 && ((h == 16 && q <= 2) || (h == 32 && q == 1));
        EXPECT_EQ(ResolveVariant(Query(Arch::kGfx950, dtype, h, q, /*cp=*/true)).ok(), !fp8_cp_gap);
      }
    }
  }
}

// ValidateRegistry: one planted defect per case, on top of a valid two-row registry.
constexpr char kValidRegistry[] = R"pb(
  arch: "sm90"
  kernel {
    name: "a"
    q_type: "bf16"
    kv_type: "bf16"
    ps: true
    rows_per_tile: 64
    serves { nhead: 16 qlen_min: 1 }
    serves { nhead: 128 qlen_min: 1 head_fold: 2 }
  }
  kernel {
    name: "b"
    q_type: "fp8"
    kv_type: "e4m3fnuz"
    ps: true
    rows_per_tile: 128
    serves { nhead: 64 qlen_min: 2 qlen_max: 4 head_fold: 0 }
  }
)pb";

struct Defect {
  std::string what;
  std::function<void(proto::KernelRegistry&)> plant;
  std::vector<std::string> needles;  // the message names the row and field
};

TEST(RegistryTest, ValidateAcceptsBaseRegistry) {
  EXPECT_TRUE(ValidateRegistry(Parse(kValidRegistry)).ok());
}

// Adds a routed cost entry to kernel 0 ("a", 64 rows a tile).
proto::RoutedTileCost* AddRouted(proto::KernelRegistry& r, const std::string& kernel, int rows,
                                 int kv_granularity) {
  proto::RoutedTileCost* c = r.mutable_kernel(0)->mutable_cost()->add_routed();
  c->set_kernel(kernel);
  c->set_rows(rows);
  c->set_kv_granularity(kv_granularity);
  c->set_ns_per_block(100);
  c->set_ns_per_item(1000);
  return c;
}

TEST(RegistryTest, ValidateRejectsPlantedDefects) {
  const std::vector<Defect> defects = {
      {"rows_per_tile 96",
       [](auto& r) { r.mutable_kernel(1)->set_rows_per_tile(96); },
       {"kernel[1]", "\"b\"", "rows_per_tile", "96"}},
      {"rows_per_tile 0",
       [](auto& r) { r.mutable_kernel(0)->set_rows_per_tile(0); },
       {"kernel[0]", "\"a\"", "rows_per_tile"}},
      {"nhead 24",
       [](auto& r) { r.mutable_kernel(0)->mutable_serves(0)->set_nhead(24); },
       {"kernel[0]", "\"a\"", "serves[0].nhead", "24"}},
      {"nhead 256",
       [](auto& r) { r.mutable_kernel(1)->mutable_serves(0)->set_nhead(256); },
       {"\"b\"", "serves[0].nhead"}},
      {"head_fold negative",
       [](auto& r) { r.mutable_kernel(0)->mutable_serves(1)->set_head_fold(-2); },
       {"\"a\"", "serves[1].head_fold", "negative"}},
      {"head_fold not dividing",
       [](auto& r) { r.mutable_kernel(1)->mutable_serves(0)->set_head_fold(3); },
       {"\"b\"", "serves[0].head_fold", "does not divide"}},
      {"heads exceed rows",
       [](auto& r) { r.mutable_kernel(0)->mutable_serves(1)->set_head_fold(1); },
       {"\"a\"", "serves[1].head_fold", "rows_per_tile"}},
      {"qlen_min 0",
       [](auto& r) { r.mutable_kernel(0)->mutable_serves(0)->set_qlen_min(0); },
       {"\"a\"", "serves[0].qlen_min"}},
      {"qlen_min negative",
       [](auto& r) { r.mutable_kernel(1)->mutable_serves(0)->set_qlen_min(-1); },
       {"\"b\"", "serves[0].qlen_min"}},
      {"qlen_max below min",
       [](auto& r) { r.mutable_kernel(1)->mutable_serves(0)->set_qlen_max(1); },
       {"\"b\"", "serves[0].qlen_max", "qlen_min"}},
      {"duplicate name",
       [](auto& r) { r.mutable_kernel(1)->set_name("a"); },
       {"kernel[1]", "\"a\"", "name", "unique"}},
      {"empty name",
       [](auto& r) { r.mutable_kernel(1)->set_name(""); },
       {"kernel[1]", "name", "empty"}},
      {"bad q_type",
       [](auto& r) { r.mutable_kernel(0)->set_q_type("int8"); },
       {"\"a\"", "q_type", "int8"}},
      {"bad kv_type",
       [](auto& r) { r.mutable_kernel(1)->set_kv_type("fp4"); },
       {"\"b\"", "kv_type", "fp4"}},
      {"no serves",
       [](auto& r) { r.mutable_kernel(1)->clear_serves(); },
       {"\"b\"", "serves", "empty"}},
      {"bad arch", [](auto& r) { r.set_arch("sm80"); }, {"arch", "sm80"}},
      {"routed kernel empty",
       [](auto& r) { AddRouted(r, "", 16, 16); },
       {"\"a\"", "cost.routed[0].kernel", "empty"}},
      {"routed rows beyond the tile",
       [](auto& r) { AddRouted(r, "bf16", 65, 16); },
       {"\"a\"", "cost.routed[0].rows = 65"}},
      {"routed granularity 24",
       [](auto& r) { AddRouted(r, "bf16", 64, 24); },
       {"\"a\"", "cost.routed[0].kv_granularity = 24"}},
      {"routed repeated",
       [](auto& r) {
         AddRouted(r, "f16pv", 64, 16);
         AddRouted(r, "f16pv", 64, 16);
       },
       {"\"a\"", "cost.routed[1]", "repeats kernel 'f16pv'"}},
      {"routed cost negative",
       [](auto& r) { AddRouted(r, "f16pv", 64, 16)->set_ns_per_item(-1); },
       {"\"a\"", "cost.routed[0]", "ns_per_item = -1"}},
      {"reduce launch negative",
       [](auto& r) { r.mutable_reduce()->set_ns_per_launch(-1); },
       {"reduce", "ns_per_launch = -1"}},
      {"reduce per row NaN",
       [](auto& r) { r.mutable_reduce()->set_ns_per_partial_row(std::nan("")); },
       {"reduce", "ns_per_partial_row = nan"}},
  };
  for (const Defect& d : defects) {
    SCOPED_TRACE(d.what);
    proto::KernelRegistry r = Parse(kValidRegistry);
    d.plant(r);
    absl::Status s = ValidateRegistry(r);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    for (const std::string& n : d.needles) {
      EXPECT_TRUE(Contains(std::string(s.message()), n)) << "missing '" << n << "' in: " << s;
    }
  }
}

TEST(RegistryTest, NamesUniqueAcrossEmbeddedRegistries) {
  std::vector<std::string> names;
  for (Arch arch : {Arch::kGfx942, Arch::kGfx950, Arch::kSm90}) {
    absl::StatusOr<proto::KernelRegistry> r = LoadRegistry(arch);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const proto::KernelRow& row : r->kernel()) {
      for (const std::string& n : names) EXPECT_NE(n, row.name());
      names.push_back(row.name());
    }
  }
}

}  // namespace
}  // namespace mlaps
