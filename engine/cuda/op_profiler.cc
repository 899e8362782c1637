#include "engine/cuda/op_profiler.h"

#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar {

absl::Status OpProfiler::Mark(absl::string_view label, bool capturing) {
  if (!recording(capturing)) return absl::OkStatus();
  if (marks_.empty()) SPAR_RETURN_IF_ERROR(LaunchSpinWait(2'000'000, stream_));
  SPAR_ASSIGN_OR_RETURN(cudaEvent_t e, events_->Take());
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, stream_));
  marks_.emplace_back(std::string(label), e);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OpTime>> OpProfiler::Take() {
  std::vector<OpTime> out;
  if (marks_.empty()) return out;
  SPAR_ASSIGN_OR_RETURN(cudaEvent_t end, events_->Take());
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream_));
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
  for (size_t i = 0; i < marks_.size(); ++i) {
    const cudaEvent_t next = i + 1 < marks_.size() ? marks_[i + 1].second : end;
    float ms = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, marks_[i].second, next));
    out.push_back(OpTime{marks_[i].first, ms * 1e-3});
    events_->Give(marks_[i].second);
  }
  events_->Give(end);
  marks_.clear();
  return out;
}

}  // namespace spar
