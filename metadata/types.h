// Architectures and data types mlaps knows, with their text names.
#ifndef MLAPS_METADATA_TYPES_H_
#define MLAPS_METADATA_TYPES_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mlaps {

enum class Arch { kGfx942, kGfx950, kSm90 };

// kFp8 is e4m3fn on gfx950 and sm90, e4m3fnuz on gfx942 (see Fp8Format).
enum class DType { kBf16, kFp8 };

enum class Fp8Format { kE4m3fn, kE4m3fnuz };

absl::string_view ArchName(Arch arch);     // "gfx942" | "gfx950" | "sm90"
absl::string_view DTypeName(DType dtype);  // "bf16" | "fp8"
absl::StatusOr<Arch> ParseArch(absl::string_view name);
absl::StatusOr<DType> ParseDType(absl::string_view name);

// The fp8 encoding an architecture's kernels use.
Fp8Format Fp8FormatOf(Arch arch);

// Compute units (CUs / SMs) of the reference part of each architecture: MI300X 304,
// MI355X 256, H200 132.
int DefaultNumCu(Arch arch);

// Bytes of one element.
int DTypeBytes(DType dtype);

// MLA dimensions (DeepSeek): 512 latent + 64 rope for Q/K, V = the first 512 of KV.
inline constexpr int kHeadDimQk = 576;
inline constexpr int kHeadDimV = 512;

}  // namespace mlaps

#endif  // MLAPS_METADATA_TYPES_H_
