// The cuda backend's tensor-parallel collectives: one NCCL communicator per
// group of ranks (one process and GPU each), its formation with a deadline,
// the all-reduce with optional event timing, and the abort / rejoin paths
// used when a rank is lost.
//
// Why a deadline on formation: ncclCommInitRank waits for every rank of the
// group, forever; a peer that died while loading would leave the others
// hanging with no error. The init runs on a thread of its own and the caller
// gets DeadlineExceeded when the group has not formed in time (the thread is
// left to finish or fail on its own and then frees what it made).
//
// Why abort runs on a thread: ncclCommAbort raises the abort flag at once
// (releasing kernels waiting on the lost rank) but, from NCCL 2.26 on,
// returns only once every CUDA graph that captured one of the communicator's
// collectives is destroyed; the backend's decode graphs die later, usually
// on another thread.
#ifndef SPAR_ENGINE_CUDA_NCCL_GROUP_H_
#define SPAR_ENGINE_CUDA_NCCL_GROUP_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/cuda/event_pool.h"
#include "engine/tensor_parallel.h"

namespace spar {

class CommAbort;

class NcclGroup {
 public:
  // Forms the group from the unique id rank 0 made (NewNcclUniqueId) on
  // `device`, waiting at most `init_timeout` for the other ranks.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Join(TpRank tp, int device, const std::string& unique_id,
                                                         absl::Duration init_timeout, cudaStream_t stream,
                                                         EventPool* events);
  // Frees the communicator (or waits up to 30 s for its abort to finish):
  // destroy every graph that captured its collectives first.
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // Sums n bf16 or fp32 values at `data` over the ranks, in place, on the
  // stream. `timed`: record events around it for the stats (not inside a
  // graph capture, where they would become graph nodes).
  absl::Status AllReduceSum(void* data, size_t n, bool f32, bool timed);

  // Fails the collectives in flight and every later one; any thread.
  void Abort();
  bool aborted() const { return aborted_.load(); }
  // A new communicator of the same rank and size from a new unique id,
  // after Abort and once no graph holds the old communicator's collectives.
  absl::Status Rejoin(const std::string& unique_id);

  // Totals of the timed all-reduces so far (waits for the ones in flight).
  CollectiveStats Stats();
  // Durations (s) of the timed all-reduces finished since the last call.
  std::vector<double> TakeDurations();

 private:
  NcclGroup(TpRank tp, int device, absl::Duration init_timeout, cudaStream_t stream, EventPool* events)
      : tp_(tp), device_(device), init_timeout_(init_timeout), stream_(stream), events_(events) {}
  absl::Status Init(const std::string& unique_id);

  struct TimedSpan {
    cudaEvent_t start = nullptr, end = nullptr;
  };

  const TpRank tp_;
  const int device_;
  const absl::Duration init_timeout_;
  cudaStream_t stream_;
  EventPool* events_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<CommAbort> comm_abort_;  // set by Abort
  CollectiveStats stats_;
  std::vector<TimedSpan> pending_spans_;
  std::vector<double> recent_;
  static constexpr size_t kMaxRecent = 8192;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_NCCL_GROUP_H_
