// CUDA events recycled across steps: the all-reduce timings and the op
// profile mark the stream with events, and creating two per op per step
// would cost driver calls on the hot path.
#ifndef SPAR_ENGINE_CUDA_EVENT_POOL_H_
#define SPAR_ENGINE_CUDA_EVENT_POOL_H_

#include <cuda_runtime.h>

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    for (cudaEvent_t e : all_) cudaEventDestroy(e);
  }

  absl::StatusOr<cudaEvent_t> Take() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e;
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    all_.push_back(e);
    return e;
  }
  // Back to the pool once nothing will read it again.
  void Give(cudaEvent_t e) { free_.push_back(e); }

 private:
  std::vector<cudaEvent_t> free_, all_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_EVENT_POOL_H_
