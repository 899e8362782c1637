// The GPU's own timeline of a stretch of work: CUPTI activity records of
// kernels, copies and memsets with their start and end on the GPU clock.
// ncu times each kernel of a CUDA graph alone and runs the graph's branches
// one after another; this keeps the replay as it ran, so the time between
// kernels (launch latency on dependent edges, a branch waiting for another)
// shows up as what it is: the GPU running nothing.
#ifndef SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_
#define SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/common/replay_timeline.h"

namespace spar::bench {

// Records every kernel, copy and memset between Start() and Stop(). One
// recording at a time in a process (CUPTI's activity buffers are global).
class KernelTimeline {
 public:
  static absl::Status Start();
  // Flushes and disables the recording; the events in start order.
  static absl::StatusOr<std::vector<TimelineEvent>> Stop();
};

}  // namespace spar::bench

#endif  // SPAR_BENCH_COMMON_KERNEL_TIMELINE_H_
