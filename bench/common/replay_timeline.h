// What engine_bench --timeline makes of a recorded timeline (pure
// arithmetic, no CUDA): the last graph replay's events, the time before each
// when the GPU ran nothing, the span and the busy time. kernel_timeline.h
// records the events.
#ifndef SPAR_BENCH_COMMON_REPLAY_TIMELINE_H_
#define SPAR_BENCH_COMMON_REPLAY_TIMELINE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace spar::bench {

struct TimelineEvent {
  std::string name;  // demangled kernel name, or "memcpy HtoD" / "memset"
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  // the API call that launched it: one cudaGraphLaunch for all of a replay's nodes
};

// The last launch that ran more than one event (the last graph replay):
// its events in start order, each with the time before it when the GPU ran
// nothing at all; the span (first start to last end), the busy time (the
// union of the events) and the idle time (span - busy).
struct ReplayTimeline {
  std::vector<TimelineEvent> events;
  std::vector<uint64_t> idle_before_ns;  // per event
  uint64_t span_ns = 0, busy_ns = 0, idle_ns = 0;
};
// Empty events when no launch ran more than one.
ReplayTimeline LastReplay(const std::vector<TimelineEvent>& events);

// LastReplay as a table (start from the replay's first start, duration,
// stream, idle before), its span, busy and idle time, and the largest idle
// gaps with the events around them.
void PrintLastReplay(const std::vector<TimelineEvent>& events, const std::string& title, FILE* out);

}  // namespace spar::bench

#endif  // SPAR_BENCH_COMMON_REPLAY_TIMELINE_H_
