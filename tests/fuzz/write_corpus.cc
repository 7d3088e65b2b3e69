// Writes each fuzz target's golden seeds into DIR/<target>/seed_N, the starting corpus for
// libFuzzer: bazel run //tests/fuzz:write_corpus -- /tmp/mlaps_corpus
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/fuzz/fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_corpus DIR\n");
    return 2;
  }
  for (const mlaps::fuzz::FuzzTarget& t : mlaps::fuzz::AllTargets()) {
    const std::filesystem::path dir = std::filesystem::path(argv[1]) / t.name;
    std::filesystem::create_directories(dir);
    int n = 0;
    for (const std::string& s : t.seeds()) {
      std::ofstream(dir / ("seed_" + std::to_string(n++)), std::ios::binary) << s;
    }
    std::printf("%s: %d seeds in %s\n", t.name, n, dir.c_str());
  }
  return 0;
}
