// Every fuzz target on its golden seeds and on 3000 fixed-seed mutations of them (byte
// flips, truncations, random tails): the invariants hold in the ordinary test suite, and the
// sanitizer configs run the same inputs under ASan / UBSan.
#include <random>

#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_targets.h"

namespace mlaps::fuzz {
namespace {

std::string Mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 4) {
      case 0:
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 2:
        for (int i = rng() % 16; i > 0; --i) s.push_back(static_cast<char>(rng()));
        break;
      default:
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
    }
  }
  return s;
}

class Replay : public ::testing::TestWithParam<int> {};

TEST_P(Replay, SeedsAndMutations) {
  const FuzzTarget target = AllTargets()[GetParam()];
  const std::vector<std::string> seeds = target.seeds();
  ASSERT_FALSE(seeds.empty()) << target.name;
  for (const std::string& s : seeds) {
    target.run(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::mt19937 rng(GetParam() * 977 + 1);
  for (int i = 0; i < 3000; ++i) {
    const std::string m = Mutate(seeds[rng() % seeds.size()], rng);
    target.run(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  }
  std::printf("%s: %zu seeds + 3000 mutations\n", target.name, seeds.size());
}

INSTANTIATE_TEST_SUITE_P(Targets, Replay, ::testing::Range(0, 5));

}  // namespace
}  // namespace mlaps::fuzz
