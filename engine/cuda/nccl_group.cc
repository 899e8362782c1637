#include "engine/cuda/nccl_group.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

// ncclCommAbort on a detached thread sharing this state, so that a waiter
// that gives up (WaitFor) never blocks on a join.
class CommAbort {
 public:
  static std::shared_ptr<CommAbort> Start(ncclComm_t comm) {
    auto self = std::make_shared<CommAbort>();
    std::thread([self, comm] {
      ncclCommAbort(comm);
      absl::MutexLock lock(&self->mu_);
      self->done_ = true;
    }).detach();
    return self;
  }
  // True once the abort has finished.
  bool WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }

 private:
  absl::Mutex mu_;
  bool done_ = false;
};

namespace {

// ncclCommInitRank on a detached thread: the caller may stop waiting, and a
// communicator that forms after that is aborted by the thread itself.
struct PendingInit {
  absl::Mutex mu;
  bool done = false, abandoned = false;
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclSuccess;
  cudaError_t device_error = cudaSuccess;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Join(TpRank tp, int device, const std::string& unique_id,
                                                           absl::Duration init_timeout, cudaStream_t stream,
                                                           EventPool* events) {
  SPAR_RETURN_IF_ERROR(ValidateTpRank(tp));
  std::unique_ptr<NcclGroup> g(new NcclGroup(tp, device, init_timeout, stream, events));
  SPAR_RETURN_IF_ERROR(g->Init(unique_id));
  return g;
}

absl::Status NcclGroup::Init(const std::string& unique_id) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL unique id has ", unique_id.size(), " bytes, expected ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  auto st = std::make_shared<PendingInit>();
  const int nranks = tp_.size, rank = tp_.rank, device = device_;
  std::thread([st, id, nranks, rank, device] {
    // NCCL forms the communicator on the calling thread's current device.
    ncclComm_t comm = nullptr;
    const cudaError_t dev = cudaSetDevice(device);
    const ncclResult_t r = dev == cudaSuccess ? ncclCommInitRank(&comm, nranks, id, rank) : ncclSystemError;
    absl::MutexLock lock(&st->mu);
    if (st->abandoned) {
      if (r == ncclSuccess) ncclCommAbort(comm);
    } else {
      st->comm = r == ncclSuccess ? comm : nullptr;
      st->result = r;
      st->device_error = dev;
    }
    st->done = true;
  }).detach();
  absl::MutexLock lock(&st->mu);
  if (!st->mu.AwaitWithTimeout(absl::Condition(&st->done), init_timeout_)) {
    st->abandoned = true;
    return absl::DeadlineExceededError(absl::StrCat("rank ", rank, " of ", nranks,
                                                    ": the NCCL group did not form within ",
                                                    absl::FormatDuration(init_timeout_), " (a peer is missing)"));
  }
  if (st->device_error != cudaSuccess) return CudaStatus(st->device_error, "cudaSetDevice (NCCL init thread)");
  if (st->result != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, " of ", nranks,
                                               " could not join the NCCL group: ", ncclGetErrorString(st->result)));
  }
  comm_ = st->comm;
  return absl::OkStatus();
}

NcclGroup::~NcclGroup() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_ != nullptr && !aborted_.load()) ncclCommDestroy(comm_);
  // An aborted communicator is freed by its abort thread, which can finish
  // only once the graphs holding its collectives are gone.
  if (comm_abort_ != nullptr && !comm_abort_->WaitFor(absl::Seconds(30))) {
    std::fprintf(stderr, "cuda backend: the aborted NCCL communicator was not freed within 30 s; left behind\n");
  }
  for (const TimedSpan& s : pending_spans_) {
    events_->Give(s.start);
    events_->Give(s.end);
  }
}

void NcclGroup::Abort() {
  if (aborted_.exchange(true)) return;
  if (comm_ != nullptr) comm_abort_ = CommAbort::Start(comm_);
}

absl::Status NcclGroup::Rejoin(const std::string& unique_id) {
  Abort();  // a no-op if it was
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (comm_abort_ != nullptr && !comm_abort_->WaitFor(absl::Seconds(30))) {
    return absl::DeadlineExceededError("rejoin: the old NCCL communicator's abort did not finish within 30 s");
  }
  comm_abort_.reset();
  comm_ = nullptr;
  Stats();  // resolve the old group's pending timing events
  recent_.clear();
  SPAR_RETURN_IF_ERROR(Init(unique_id));
  aborted_.store(false);
  return absl::OkStatus();
}

absl::Status NcclGroup::AllReduceSum(void* data, size_t n, bool f32, bool timed) {
  TimedSpan span;
  if (timed) {
    // Bound the pending list: resolve it when it grows (a long prefill).
    if (pending_spans_.size() >= 4096) Stats();
    SPAR_ASSIGN_OR_RETURN(span.start, events_->Take());
    SPAR_ASSIGN_OR_RETURN(span.end, events_->Take());
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(span.start, stream_));
  }
  const ncclResult_t r = ncclAllReduce(data, data, n, f32 ? ncclFloat32 : ncclBfloat16, ncclSum, comm_, stream_);
  if (r != ncclSuccess) return absl::InternalError(absl::StrCat("ncclAllReduce: ", ncclGetErrorString(r)));
  if (timed) {
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(span.end, stream_));
    pending_spans_.push_back(span);
    stats_.calls += 1;
    stats_.bytes += static_cast<int64_t>(n * (f32 ? 4 : 2));
  }
  return absl::OkStatus();
}

CollectiveStats NcclGroup::Stats() {
  for (const TimedSpan& s : pending_spans_) {
    float ms = 0;
    if (cudaEventSynchronize(s.end) == cudaSuccess && cudaEventElapsedTime(&ms, s.start, s.end) == cudaSuccess) {
      stats_.seconds += ms * 1e-3;
      if (recent_.size() < kMaxRecent) recent_.push_back(ms * 1e-3);
    }
    events_->Give(s.start);
    events_->Give(s.end);
  }
  pending_spans_.clear();
  return stats_;
}

std::vector<double> NcclGroup::TakeDurations() {
  Stats();
  std::vector<double> out;
  out.swap(recent_);
  return out;
}

}  // namespace spar
