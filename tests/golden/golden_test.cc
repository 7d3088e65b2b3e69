// The planner against its goldens. A difference fails with the first differing case in words
// and the command that regenerates the goldens (after a deliberate planner change).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "golden/golden_cases.h"
#include "gtest/gtest.h"

namespace mlaps::golden {
namespace {

std::string ReadRunfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  std::ifstream in(std::string(srcdir ? srcdir : ".") + "/mlaps/" + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first differing line of two texts, in words.
std::string FirstDifference(const std::string& want, const std::string& got) {
  std::vector<std::string> a = absl::StrSplit(want, '\n'), b = absl::StrSplit(got, '\n');
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "<end of file>";
    const std::string y = i < b.size() ? b[i] : "<end of file>";
    if (x != y) {
      return "line " + std::to_string(i + 1) + ":\n  golden:  " + x + "\n  planner: " + y;
    }
  }
  return "";
}

constexpr char kHowToRegen[] =
    "\nIf the planner changed on purpose: bazel run //tools:regen_golden, then review "
    "`git diff golden/`.";

TEST(Golden, Families) {
  for (const std::string& family : FamilyNames()) {
    const std::string want = ReadRunfile("golden/" + family + ".txt");
    ASSERT_FALSE(want.empty()) << "golden/" << family << ".txt is missing" << kHowToRegen;
    const std::string got = RenderFamily(family);
    EXPECT_EQ(FirstDifference(want, got), "")
        << "golden/" << family << ".txt differs at " << FirstDifference(want, got) << kHowToRegen;
  }
}

TEST(Golden, ReadablePlans) {
  for (const GoldenCase& c : ReadableCases()) {
    const std::string path = "golden/readable/" + c.name + ".textproto";
    const std::string want = ReadRunfile(path);
    ASSERT_FALSE(want.empty()) << path << " is missing" << kHowToRegen;
    const std::string got = RenderReadable(c);
    EXPECT_EQ(FirstDifference(want, got), "")
        << path << " differs at " << FirstDifference(want, got) << kHowToRegen;
  }
}

// Every golden plan has no planner error except the documented unsupported shapes.
TEST(Golden, NoUnexpectedErrors) {
  for (const std::string& family : FamilyNames()) {
    for (absl::string_view line : absl::StrSplit(RenderFamily(family), '\n')) {
      EXPECT_EQ(line.find(" error "), absl::string_view::npos) << family << ": " << line;
    }
  }
}

}  // namespace
}  // namespace mlaps::golden
