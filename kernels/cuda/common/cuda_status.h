// CUDA errors as absl::Status: library code returns them, never aborts, so a
// server can turn a GPU failure into an error reply and a health signal.
#ifndef SPAR_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
#define SPAR_KERNELS_CUDA_COMMON_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace spar {

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace spar

// Returns a non-OK status from the enclosing function if a CUDA call fails.
#define SPAR_CUDA_RETURN_IF_ERROR(expr)                                     \
  do {                                                                      \
    cudaError_t spar_cuda_err_ = (expr);                                    \
    if (spar_cuda_err_ != cudaSuccess) return ::spar::CudaStatus(spar_cuda_err_, #expr); \
  } while (0)

// After a <<<...>>> launch: reports launch-configuration errors by name.
#define SPAR_CUDA_RETURN_IF_LAUNCH_FAILED(kernel_name) \
  SPAR_CUDA_RETURN_IF_ERROR_NAMED(cudaGetLastError(), kernel_name)
#define SPAR_CUDA_RETURN_IF_ERROR_NAMED(expr, name)                              \
  do {                                                                           \
    cudaError_t spar_cuda_err_ = (expr);                                         \
    if (spar_cuda_err_ != cudaSuccess) return ::spar::CudaStatus(spar_cuda_err_, name); \
  } while (0)

#endif  // SPAR_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
