// engine_bench --timeline's arithmetic (bench/common/replay_timeline.h) on
// hand-made events: which launch is the last replay, the idle time before
// each event, and busy time as the union of overlapping events. Host only.
#include "bench/common/replay_timeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace spar::bench {
namespace {

TimelineEvent Ev(const char* name, uint64_t start, uint64_t end, uint32_t correlation) {
  return TimelineEvent{name, start, end, 7, correlation};
}

TEST(KernelTimeline, LastReplayIsTheLastLaunchOfSeveralEvents) {
  // Launch 3 (two events) is an earlier replay, 9 the last one; 12 is a
  // single eager kernel after it and 8 a lone copy.
  const std::vector<TimelineEvent> events = {
      Ev("old a", 0, 10, 3), Ev("old b", 10, 20, 3), Ev("copy", 900, 950, 8), Ev("D", 9500, 12000, 9),
      Ev("A", 1000, 3000, 9), Ev("B", 4000, 6000, 9), Ev("C", 4500, 9000, 9), Ev("eager", 20000, 20500, 12)};
  const ReplayTimeline r = LastReplay(events);
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0].name, "A");  // in start order, whatever order they came in
  EXPECT_EQ(r.events[3].name, "D");
  // Idle: 1000 ns before B (A ended at 3000), none before C (B runs), 500
  // before D (C ended at 9000, after B).
  EXPECT_EQ(r.idle_before_ns, (std::vector<uint64_t>{0, 1000, 0, 500}));
  EXPECT_EQ(r.span_ns, 11000u);
  // A 2000 + B..C's union 5000 + D 2500.
  EXPECT_EQ(r.busy_ns, 9500u);
  EXPECT_EQ(r.idle_ns, 1500u);
}

TEST(KernelTimeline, AnEventInsideAnotherAddsNoBusyTime) {
  const std::vector<TimelineEvent> events = {Ev("long", 0, 10000, 1), Ev("inside", 2000, 3000, 1),
                                             Ev("after", 12000, 13000, 1)};
  const ReplayTimeline r = LastReplay(events);
  EXPECT_EQ(r.busy_ns, 11000u);
  EXPECT_EQ(r.idle_before_ns, (std::vector<uint64_t>{0, 0, 2000}));
  EXPECT_EQ(r.span_ns, 13000u);
}

TEST(KernelTimeline, NoReplayWhenEveryLaunchRanOneEvent) {
  const std::vector<TimelineEvent> events = {Ev("a", 0, 10, 1), Ev("b", 20, 30, 2)};
  EXPECT_TRUE(LastReplay(events).events.empty());
  // The printout says so instead of a table.
  char buf[512] = {};
  FILE* out = fmemopen(buf, sizeof(buf) - 1, "w");
  ASSERT_NE(out, nullptr);
  PrintLastReplay(events, "shape", out);
  std::fclose(out);
  EXPECT_NE(std::string(buf).find("no launch with more than one event"), std::string::npos) << buf;
}

}  // namespace
}  // namespace spar::bench
