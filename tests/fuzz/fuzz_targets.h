// The fuzz targets of mlaps: each takes arbitrary bytes, drives one entry point, and aborts
// (a "crash" for libFuzzer) when an invariant breaks: a plan the planner accepted that fails
// the checker, a shard map that loses tokens, a merge that invents NaN, ... Memory errors
// are the sanitizers' to find (--config=fuzz builds with ASan + UBSan).
//
// Each target also has seeds (from the goldens) that decode to meaningful inputs.
#ifndef MLAPS_TESTS_FUZZ_FUZZ_TARGETS_H_
#define MLAPS_TESTS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlaps::fuzz {

using FuzzFn = int (*)(const uint8_t* data, size_t size);

struct FuzzTarget {
  const char* name;
  FuzzFn run;
  std::vector<std::string> (*seeds)();
};

// batch validator + planner (both policies, caller buffers too small or right) + checker.
int FuzzPlanner(const uint8_t* data, size_t size);
std::vector<std::string> PlannerSeeds();
// Text-format readers: batch, plan and registry protos, then validation / checking.
int FuzzTextReaders(const uint8_t* data, size_t size);
std::vector<std::string> TextReaderSeeds();
// CP shard maps and views.
int FuzzCpShard(const uint8_t* data, size_t size);
std::vector<std::string> CpShardSeeds();
// The CP merge.
int FuzzMerge(const uint8_t* data, size_t size);
std::vector<std::string> MergeSeeds();

// The sparse KV gather's CPU model against the spec's rules.
int FuzzSparseGather(const uint8_t* data, size_t size);
std::vector<std::string> SparseGatherSeeds();

// Every target, for the replay test and the corpus writer.
std::vector<FuzzTarget> AllTargets();

// Aborts with a message: libFuzzer reports it as a crash with the input.
[[noreturn]] void Fail(const std::string& what);

}  // namespace mlaps::fuzz

#endif  // MLAPS_TESTS_FUZZ_FUZZ_TARGETS_H_
