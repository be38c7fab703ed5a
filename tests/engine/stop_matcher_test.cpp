#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace graft {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : pieces) {
    auto o = m.push(p);
    out += o.text;
    if (o.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out + m.flush();
}

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello").text, "hello");
}

TEST(StopMatcher, CutsBeforeAStopStringSplitAcrossPieces) {
  StopMatcher m({"END"});
  bool stopped;
  EXPECT_EQ(feed(m, {"abc E", "N", "Dxyz"}, &stopped), "abc ");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, HoldsBackOnlyWhatMayStartAStop) {
  StopMatcher m({"</s>"});
  auto o = m.push("a <");
  EXPECT_EQ(o.text, "a ");
  o = m.push("b");
  EXPECT_EQ(o.text, "<b");  // "<b" cannot start "</s>": released
  EXPECT_FALSE(o.stopped);
}

TEST(StopMatcher, ReleasesHeldTextWhenGenerationEndsOtherwise) {
  StopMatcher m({"STOP"});
  bool stopped;
  EXPECT_EQ(feed(m, {"go ST"}, &stopped), "go ST");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  auto o = m.push("abcd");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "a");
  EXPECT_EQ(o.stop, "b");  // which one stopped it
}

TEST(StopMatcher, NeverSplitsAUtf8Character) {
  StopMatcher m({"\xC3\xA9x"});  // "éx"
  auto o = m.push("caf\xC3\xA9");
  EXPECT_EQ(o.text, "caf");  // "é" may start the stop string
  o = m.push("!");
  EXPECT_EQ(o.text, "\xC3\xA9!");
}

}  // namespace
}  // namespace graft
