// Warp-level reductions.
#ifndef SPAR_KERNELS_CUDA_COMMON_REDUCE_CUH_
#define SPAR_KERNELS_CUDA_COMMON_REDUCE_CUH_

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_REDUCE_CUH_
