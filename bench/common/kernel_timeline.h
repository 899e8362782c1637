// The GPU's own timeline of a stretch of work: CUPTI activity records of
// kernels, copies and memsets with their start and end on the GPU clock.
// ncu times each kernel of a CUDA graph alone and runs the graph's branches
// one after another; this keeps the replay as it ran, so the time between
// kernels (launch latency on dependent edges, a branch waiting for another)
// shows up as what it is: the GPU running nothing.
#ifndef SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_
#define SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spar::bench {

struct TimelineEvent {
  std::string name;  // demangled kernel name, or "memcpy HtoD" / "memset"
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  // the API call that launched it: one cudaGraphLaunch for all of a replay's nodes
};

// Records every kernel, copy and memset between Start() and Stop(). One
// recording at a time in a process (CUPTI's activity buffers are global).
class KernelTimeline {
 public:
  static absl::Status Start();
  // Flushes and disables the recording; the events in start order.
  static absl::StatusOr<std::vector<TimelineEvent>> Stop();
};

// The events of the last launch that ran more than one (the last graph
// replay), as a table: start (from the replay's first start), duration,
// stream and the time before each event when the GPU ran nothing at all;
// then the replay's span, the busy time (the union of the events) and the
// idle time, and the largest idle gaps with the events around them.
void PrintLastReplay(const std::vector<TimelineEvent>& events, const std::string& title, FILE* out);

}  // namespace spar::bench

#endif  // SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_
