#include "services/scheduler/stop_strings.h"

#include "gtest/gtest.h"

namespace spar {
namespace {

std::string Feed(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) out += m.Add(d);
  if (!m.matched()) out += m.Flush();
  return out;
}

TEST(StopStringMatcherTest, NoStopsPassesThrough) {
  StopStringMatcher m({}, false);
  EXPECT_EQ(m.Add("abc"), "abc");
  EXPECT_FALSE(m.active());
}

TEST(StopStringMatcherTest, HoldsBackAPossibleStopAcrossDeltas) {
  StopStringMatcher m({"END"}, false);
  EXPECT_EQ(m.Add("hello E"), "hello ");  // "E" might start "END"
  EXPECT_EQ(m.Add("N"), "");
  EXPECT_EQ(m.Add("D and more"), "");
  EXPECT_EQ(*m.matched(), "END");
  EXPECT_EQ(m.Add("ignored"), "");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"E", "N", "x", "!"}), "ENx!");
  EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, IncludeStopAndEarliestMatch) {
  // "abc" starts at 2, "b" at 3: the earliest match wins.
  StopStringMatcher keep({"b", "abc"}, true);
  EXPECT_EQ(Feed(keep, {"xxabcd"}), "xxabc");
  EXPECT_EQ(*keep.matched(), "abc");
  StopStringMatcher m({"cd", "abc"}, false);
  EXPECT_EQ(Feed(m, {"xxabcd"}), "xx");
  EXPECT_EQ(*m.matched(), "abc");
}

TEST(StopStringMatcherTest, UnmatchedTailFlushes) {
  StopStringMatcher m({"\n\n"}, false);
  EXPECT_EQ(m.Add("line\n"), "line");
  EXPECT_EQ(m.Flush(), "\n");
}

TEST(StopStringMatcherTest, MultiByteStops) {
  StopStringMatcher m({"。"}, false);
  EXPECT_EQ(Feed(m, {"你好", "。再见"}), "你好");
}

}  // namespace
}  // namespace spar
