// RoPE arithmetic shared by the RoPE op and the fused cache write, written
// to give the reference's (kernels/ref/rope_ref.cc) floats: the angle is a
// float product, cos/sin are taken in double and rounded once (as the host
// does), and the rotation is done with explicitly rounded multiplies and
// adds so nvcc cannot contract them into FMAs the host never uses.
#ifndef SPAR_KERNELS_CUDA_COMMON_ROPE_DEVICE_CUH_
#define SPAR_KERNELS_CUDA_COMMON_ROPE_DEVICE_CUH_

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

__device__ __forceinline__ void RopeCosSin(int32_t position, float inv_freq, float attention_factor, float& c,
                                           float& s) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  c = __fmul_rn(static_cast<float>(cd), attention_factor);
  s = __fmul_rn(static_cast<float>(sd), attention_factor);
}

__device__ __forceinline__ void RopeRotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_ROPE_DEVICE_CUH_
