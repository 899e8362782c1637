// Per-op GPU time of eager steps (Backend::set_op_profile / TakeOpProfile):
// while on, each op marks its start on the stream with an event, and Take
// returns every op since the last call with the time to the next mark (ops
// run one after another on the one stream). Nothing is recorded while a
// graph is being captured (events would become graph nodes).
#ifndef SPAR_ENGINE_CUDA_OP_PROFILER_H_
#define SPAR_ENGINE_CUDA_OP_PROFILER_H_

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/cuda/event_pool.h"

namespace spar {

class OpProfiler {
 public:
  OpProfiler(cudaStream_t stream, EventPool* events) : stream_(stream), events_(events) {}

  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Marks are only taken while enabled and not capturing: callers that build
  // a label string check this first so the hot path allocates nothing.
  bool recording(bool capturing) const { return enabled_ && !capturing; }

  // The start of an op (and the end of the previous one). The first mark
  // since the last Take sits behind a 2 ms GPU wait, so the host enqueues the
  // step while the GPU is busy and host gaps do not count.
  absl::Status Mark(absl::string_view label, bool capturing);

  // The ops marked since the last call, each timed to the next mark (the
  // last to now); waits for the stream.
  absl::StatusOr<std::vector<OpTime>> Take();

 private:
  cudaStream_t stream_;
  EventPool* events_;
  bool enabled_ = false;
  std::vector<std::pair<std::string, cudaEvent_t>> marks_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_OP_PROFILER_H_
