#include "metadata/types.h"

#include "absl/strings/str_cat.h"

namespace mlaps {

absl::string_view ArchName(Arch arch) {
  switch (arch) {
    case Arch::kGfx942:
      return "gfx942";
    case Arch::kGfx950:
      return "gfx950";
    case Arch::kSm90:
      return "sm90";
  }
  return "unknown";
}

absl::string_view DTypeName(DType dtype) { return dtype == DType::kBf16 ? "bf16" : "fp8"; }

absl::StatusOr<Arch> ParseArch(absl::string_view name) {
  if (name == "gfx942") return Arch::kGfx942;
  if (name == "gfx950") return Arch::kGfx950;
  if (name == "sm90" || name == "sm_90" || name == "sm90a") return Arch::kSm90;
  return absl::InvalidArgumentError(
      absl::StrCat("arch '", name, "' is not one of gfx942, gfx950, sm90"));
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "bf16") return DType::kBf16;
  if (name == "fp8" || name == "e4m3fn" || name == "e4m3fnuz") return DType::kFp8;
  return absl::InvalidArgumentError(absl::StrCat("dtype '", name, "' is not one of bf16, fp8"));
}

Fp8Format Fp8FormatOf(Arch arch) {
  return arch == Arch::kGfx942 ? Fp8Format::kE4m3fnuz : Fp8Format::kE4m3fn;
}

int DefaultNumCu(Arch arch) {
  switch (arch) {
    case Arch::kGfx942:
      return 304;
    case Arch::kGfx950:
      return 256;
    case Arch::kSm90:
      return 132;
  }
  return 0;
}

int DTypeBytes(DType dtype) { return dtype == DType::kBf16 ? 2 : 1; }

}  // namespace mlaps
