// libFuzzer entry for one target, chosen at compile time by MLAPS_FUZZ_TARGET (a function
// name in fuzz_targets.h). Built under --config=fuzz (see tests/fuzz/BUILD.bazel).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mlaps::fuzz::MLAPS_FUZZ_TARGET(data, size);
}
