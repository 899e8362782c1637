// Launching a kernel that needs more than 48 KB of dynamic shared memory:
// the kernel's limit is raised once per device (cudaFuncSetAttribute costs
// microseconds of host time, as much as a decode GEMM runs), then it is
// launched. One flag word per kernel instance (kKernel is the template
// argument), so every instance configures itself on first use. With
// SPAR_SMEM_PER_SM_KB set, the launch asks for more shared memory, so no more
// of its blocks share an SM than on a GPU of that size (smem_residency.h).
#ifndef SPAR_KERNELS_CUDA_COMMON_LAUNCH_SMEM_CUH_
#define SPAR_KERNELS_CUDA_COMMON_LAUNCH_SMEM_CUH_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/smem_residency.h"

namespace spar::cuda {

template <auto kKernel, class Params>
cudaError_t LaunchWithSmem(dim3 grid, int threads, int smem_bytes, cudaStream_t stream, const Params& p) {
  static std::atomic<uint64_t> configured{0};  // bit d: done on device d
  const int64_t launch_bytes = LaunchSmemBytes(smem_bytes);
  if (launch_bytes < 0) return cudaErrorInvalidValue;  // no block fits the emulated SM
  smem_bytes = static_cast<int>(launch_bytes);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit == 0 || (configured.load(std::memory_order_acquire) & bit) == 0) {
    err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (err != cudaSuccess) return err;
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  kKernel<<<grid, threads, smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_LAUNCH_SMEM_CUH_
