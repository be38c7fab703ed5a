#include <gtest/gtest.h>

#include "adapters/spec.h"

namespace graft {
namespace {

AdapterSelection parse(std::string_view spec) {
  auto r = parse_adapter_spec(spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : AdapterSelection{};
}

TEST(AdapterSpec, NoneAndEmptyMeanTheBaseModel) {
  EXPECT_TRUE(parse("").none());
  EXPECT_TRUE(parse("none").none());
  EXPECT_TRUE(parse("  none ").none());
  EXPECT_EQ(parse("none").to_string(), "none");
}

TEST(AdapterSpec, SingleStackedAndScaled) {
  EXPECT_EQ(parse("poet").stack, (std::vector<AdapterChoice>{{"poet", 1.0f}}));
  EXPECT_EQ(parse("a+b").stack, (std::vector<AdapterChoice>{{"a", 1.0f}, {"b", 1.0f}}));
  EXPECT_EQ(parse("a@0.5+b").stack, (std::vector<AdapterChoice>{{"a", 0.5f}, {"b", 1.0f}}));
  EXPECT_EQ(parse(" a @ 2 + b@-0.25 ").stack, (std::vector<AdapterChoice>{{"a", 2.0f}, {"b", -0.25f}}));
  EXPECT_EQ(parse("x.v2@1e-1").stack, (std::vector<AdapterChoice>{{"x.v2", 0.1f}}));
  EXPECT_EQ(parse("a@0.5+b").to_string(), "a@0.5+b");
  EXPECT_EQ(parse("a@1+b").to_string(), "a+b");
  EXPECT_EQ(parse("a+b+c+d").stack.size(), 4u);
}

TEST(AdapterSpec, BadSpecsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"a+", "empty adapter name"},   {"+a", "empty adapter name"},
      {"a++b", "empty adapter name"}, {"a+none", "'none' cannot be stacked"},
      {"a@", "is not a scale"},       {"a@x", "'x' is not a scale"},
      {"a@1.5x", "is not a scale"},   {"a@nan", "is not a scale"},
      {"a@inf", "is not a scale"},    {"a@1e9", "is not a scale"},
      {"a+a", "'a' is given twice"},  {"a+b+c+d+e", "at most 4"},
      {"../x", "invalid adapter id"}, {"a/b", "invalid adapter id"},
      {"@0.5", "invalid adapter id"},
  };
  for (const auto& [spec, expect] : cases) {
    auto r = parse_adapter_spec(spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.error().code, "invalid_argument");
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << spec << " -> " << r.error().message;
    EXPECT_NE(r.error().message.find(std::string("'") + spec + "'"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace graft
