#include "tests/fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>

namespace mlaps::fuzz {

void Fail(const std::string& what) {
  std::fprintf(stderr, "mlaps fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

std::vector<FuzzTarget> AllTargets() {
  return {{"planner", FuzzPlanner, PlannerSeeds},
          {"text_readers", FuzzTextReaders, TextReaderSeeds},
          {"cp_shard", FuzzCpShard, CpShardSeeds},
          {"merge", FuzzMerge, MergeSeeds},
          {"sparse_gather", FuzzSparseGather, SparseGatherSeeds}};
}

}  // namespace mlaps::fuzz
