// Moved to sim/decode_case.h; these names keep tests written against the old location.
#ifndef MLAPS_TESTS_SIM_DECODE_CASE_H_
#define MLAPS_TESTS_SIM_DECODE_CASE_H_

#include "sim/decode_case.h"

namespace mlaps::sim::testing {
using ::mlaps::sim::DecodeCase;
using ::mlaps::sim::MakeDecodeCase;
using ::mlaps::sim::ToDouble;
}  // namespace mlaps::sim::testing

#endif  // MLAPS_TESTS_SIM_DECODE_CASE_H_
