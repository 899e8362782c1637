// The second stream of Backend::RunConcurrently: two independent pieces of
// a small step (the indexer's selection beside the query projections, the
// shared expert beside the routed ones, the bf16 parts of a fused 4-bit
// projection beside its 4-bit GEMM) overlap on the GPU, so the
// latency-bound kernels of one (a one-CTA top-k, the routing) hide under the
// memory-bound GEMMs of the other instead of adding their launch ramps and
// their time to the step. The fork and the join are event waits, so a CUDA
// graph capture records them as edges and the replay overlaps too.
//
// The side branch gets its own split-K GEMM workspace: the split-K tile
// counters and partials of two GEMMs in flight at once must not be shared.
#ifndef SPAR_ENGINE_CUDA_BRANCH_STREAMS_H_
#define SPAR_ENGINE_CUDA_BRANCH_STREAMS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"

namespace spar {

// Steps of at most this many tokens overlap their branches. Decode, MTP
// verify steps and small prefill chunks are latency-bound; a large prefill
// chunk fills the GPU with one GEMM, and two at once would only contend.
inline constexpr int64_t kBranchOverlapMaxTokens = 256;

// Pure policy: whether a step's branches run on two streams.
inline bool OverlapBranches(bool enabled, bool profiling, int64_t step_tokens) {
  // The op profiler times ops one after another on the main stream.
  return enabled && !profiling && step_tokens > 0 && step_tokens <= kBranchOverlapMaxTokens;
}

class BranchStreams {
 public:
  BranchStreams() = default;
  BranchStreams(const BranchStreams&) = delete;
  BranchStreams& operator=(const BranchStreams&) = delete;
  ~BranchStreams();

  // The side stream, its events and a zeroed GEMM workspace of
  // gemm_workspace_bytes (ordered before `main`'s later work). urgent: the
  // side stream at the device's highest priority (the default stream
  // priority, which `main` has, is the lowest).
  absl::Status Init(size_t gemm_workspace_bytes, cudaStream_t main, bool urgent = false);

  cudaStream_t side() const { return side_; }
  // Whether the side stream outranks the main one: callers put their
  // latency-bound branch there.
  bool side_urgent() const { return urgent_; }
  void* gemm_workspace() const { return workspace_.as<void>(); }
  size_t gemm_workspace_bytes() const { return workspace_.bytes(); }

  // side waits for everything enqueued on main so far.
  absl::Status Fork(cudaStream_t main);
  // main waits for everything enqueued on side so far.
  absl::Status Join(cudaStream_t main);

 private:
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  DeviceBuffer workspace_;
  bool urgent_ = false;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_BRANCH_STREAMS_H_
