// Exercises each system library through its Bazel label, so a broken WORKSPACE recipe fails
// here rather than deep inside the planner's build.
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/toolchain/toolchain_probe.pb.h"

namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("x=", x, " is odd"));
  return x / 2;
}

TEST(Toolchain, AbslStatusOr) {
  EXPECT_EQ(*Half(8), 4);
  EXPECT_EQ(Half(3).status().message(), "x=3 is odd");
}

TEST(Toolchain, ProtobufTextFormatRoundTrip) {
  mlaps::probe::Probe p;
  p.set_name("mla");
  p.add_values(16);
  p.add_values(128);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(p, &text));
  mlaps::probe::Probe q;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &q));
  EXPECT_EQ(q.name(), "mla");
  ASSERT_EQ(q.values_size(), 2);
  EXPECT_EQ(q.values(1), 128);
}

}  // namespace
