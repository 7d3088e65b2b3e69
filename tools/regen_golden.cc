// Rewrites golden/*.txt and golden/readable/*.textproto from the current planner.
// Run with `bazel run //tools:regen_golden`, then read the diff before committing.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "golden/golden_cases.h"

int main() {
  const char* root = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (root == nullptr) {
    std::fprintf(stderr, "regen_golden: run me with `bazel run //tools:regen_golden`\n");
    return 2;
  }
  const std::filesystem::path dir = std::filesystem::path(root) / "golden";
  std::filesystem::create_directories(dir / "readable");
  int files = 0;
  for (const std::string& family : mlaps::golden::FamilyNames()) {
    const std::string text = mlaps::golden::RenderFamily(family);
    std::ofstream(dir / (family + ".txt")) << text;
    std::printf("regen_golden: %s.txt (%zu bytes)\n", family.c_str(), text.size());
    ++files;
  }
  for (const mlaps::golden::GoldenCase& c : mlaps::golden::ReadableCases()) {
    std::ofstream(dir / "readable" / (c.name + ".textproto")) << mlaps::golden::RenderReadable(c);
    ++files;
  }
  std::printf("regen_golden: wrote %d files under %s; review with `git diff golden/`\n", files,
              dir.c_str());
  return 0;
}
