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

// Exclusive prefix sums of kN fields at once over a CTA of kT threads in
// thread order: v[f] becomes the sum of field f over the threads before
// this one, total[f] the sum over all. Each warp scans its lanes, writes its
// totals, and after one barrier every warp scans the warp totals itself
// (rather than warp 0 scanning them for all behind a second barrier: on a
// chain of dependent block steps a barrier and a warp's serial scan are
// what the scan costs). All fields share the barriers (a scan a field would
// take two each). scratch: at least 32 * kN elements of shared memory.
// Ends with a barrier, so scratch may be reused right away. T: an integer
// type.
template <int kT, int kN, class T>
__device__ __forceinline__ void BlockExclusiveScanFields(T (&v)[kN], T* scratch, T (&total)[kN]) {
  static_assert(kT % 32 == 0 && kT <= 1024, "whole warps");
  constexpr int kWarps = kT / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T incl[kN];
#pragma unroll
  for (int f = 0; f < kN; ++f) incl[f] = v[f];
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
    for (int f = 0; f < kN; ++f) {
      const T n = __shfl_up_sync(0xffffffffu, incl[f], o);
      if (lane >= o) incl[f] += n;
    }
  }
  if (lane == 31) {
#pragma unroll
    for (int f = 0; f < kN; ++f) scratch[f * 32 + warp] = incl[f];
  }
  __syncthreads();
  T w[kN], wi[kN];
#pragma unroll
  for (int f = 0; f < kN; ++f) wi[f] = w[f] = lane < kWarps ? scratch[f * 32 + lane] : T{0};
#pragma unroll
  for (int o = 1; o < kWarps; o <<= 1) {  // lanes past the last warp only ever add zeros
#pragma unroll
    for (int f = 0; f < kN; ++f) {
      const T n = __shfl_up_sync(0xffffffffu, wi[f], o);
      if (lane >= o) wi[f] += n;
    }
  }
#pragma unroll
  for (int f = 0; f < kN; ++f) {
    const T before = __shfl_sync(0xffffffffu, wi[f] - w[f], warp);
    total[f] = __shfl_sync(0xffffffffu, wi[f], kWarps - 1);
    v[f] = before + incl[f] - v[f];
  }
  __syncthreads();
}

// One field: returns this thread's exclusive prefix sum, *total the sum.
// scratch: at least 32 elements of shared memory.
template <int kT, class T>
__device__ __forceinline__ T BlockExclusiveScan(T v, T* scratch, T* total) {
  T fields[1] = {v}, totals[1];
  BlockExclusiveScanFields<kT, 1>(fields, scratch, totals);
  *total = totals[0];
  return fields[0];
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_REDUCE_CUH_
