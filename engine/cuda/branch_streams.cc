#include "engine/cuda/branch_streams.h"

#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

BranchStreams::~BranchStreams() {
  if (side_) cudaStreamSynchronize(side_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (side_) cudaStreamDestroy(side_);
}

absl::Status BranchStreams::Init(size_t gemm_workspace_bytes, cudaStream_t main, bool urgent) {
  if (urgent) {
    int least = 0, greatest = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, greatest));
    urgent_ = greatest != least;
  } else {
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  }
  // Ordering only: no timing, so the waits stay cheap.
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  SPAR_RETURN_IF_ERROR(workspace_.Allocate(gemm_workspace_bytes));
  // The split-K counters start at zero (each launch leaves them so).
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(workspace_.as<void>(), 0, gemm_workspace_bytes, main));
  return absl::OkStatus();
}

absl::Status BranchStreams::Fork(cudaStream_t main) {
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_, main));
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side_, fork_, 0));
  return absl::OkStatus();
}

absl::Status BranchStreams::Join(cudaStream_t main) {
  SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(join_, side_));
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(main, join_, 0));
  return absl::OkStatus();
}

}  // namespace spar
