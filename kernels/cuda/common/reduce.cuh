// Warp- and block-level reductions.
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

// Exclusive prefix sum over a CTA of kT threads in thread order; *total gets
// the sum. scratch: 33 elements of shared memory. Ends with a barrier, so
// scratch may be reused right away. T: an integer type.
template <int kT, class T>
__device__ __forceinline__ T BlockExclusiveScan(T v, T* scratch, T* total) {
  static_assert(kT % 32 == 0 && kT <= 1024, "whole warps");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const T w = lane < kT / 32 ? scratch[lane] : T{0};
    T wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T n = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += n;
    }
    scratch[lane] = wi - w;
    if (lane == 31) scratch[32] = wi;
  }
  __syncthreads();
  const T r = scratch[warp] + incl - v;
  *total = scratch[32];
  __syncthreads();
  return r;
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_REDUCE_CUH_
