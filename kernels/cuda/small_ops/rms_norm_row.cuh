// RMSNorm of one row by one CTA, as a device function: RmsNormKernel runs
// it for every row, and a kernel that fuses another small job into the same
// launch (the indexer key write beside the q_a norm, key_write.cu) runs it
// for its first blocks. Both use NormThreads(dim) threads, so a row's sums
// have the same order, and its bits are the same, in either launch.
#ifndef SPAR_KERNELS_CUDA_SMALL_OPS_RMS_NORM_ROW_CUH_
#define SPAR_KERNELS_CUDA_SMALL_OPS_RMS_NORM_ROW_CUH_

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/reduce.cuh"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar::cuda {

// Norm rows live in registers: each thread holds up to kNormChunksPerThread
// chunks of 8 values.
constexpr int kNormChunksPerThread = 4;
constexpr int kMaxNormDim = 1024 * kNormChunksPerThread * 8;

// The CTA size of a norm over `dim` values (whole warps, 32..1024).
inline int NormThreads(int dim) {
  const int chunks = dim / 8;
  const int t = (chunks + kNormChunksPerThread - 1) / kNormChunksPerThread;
  return std::min(1024, std::max(32, (t + 31) / 32 * 32));
}

__device__ __forceinline__ void Bf16x8ToFloat(const uint4& raw, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __low2float(h[i]);
    v[2 * i + 1] = __high2float(h[i]);
  }
}

__device__ __forceinline__ uint4 FloatToBf16x8(const float (&v)[8]) {
  uint4 raw;
  uint32_t* w = reinterpret_cast<uint32_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return raw;
}

// Sum over the CTA; every thread gets the result. `sh` holds 33 floats and
// may be reused right after the call returns.
__device__ __forceinline__ float BlockSum(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < nwarps ? sh[lane] : 0.0f;
    s = WarpSum(s);
    if (lane == 0) sh[32] = s;
  }
  __syncthreads();
  const float total = sh[32];
  __syncthreads();
  return total;
}

// Row r of an RMSNorm (RmsNormParams), by the whole CTA; sh: 33 floats of
// shared memory. Every thread of the CTA must call it (block barriers).
// Every global load (row, residual, weights) is issued before the first
// use, so the row waits for memory once: with the residual's store inside
// the chunk loop the compiler could not move the next chunk's loads above
// it (they might alias), and a decode row of 6144 waited four L2 round
// trips in a row, twice a layer on the step's critical path.
template <bool kResidual>
__device__ __forceinline__ void RmsNormRow(const RmsNormParams& p, int64_t r, float* sh) {
  const int chunks = p.dim / 8;
  uint4 x_raw[kNormChunksPerThread], res_raw[kNormChunksPerThread], w_raw[kNormChunksPerThread];
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
    x_raw[i] = *reinterpret_cast<const uint4*>(p.x + r * p.x_stride + c * 8);
    if constexpr (kResidual) res_raw[i] = *reinterpret_cast<const uint4*>(p.residual + r * p.residual_stride + c * 8);
    w_raw[i] = *reinterpret_cast<const uint4*>(p.weight + c * 8);
  }
  float v[kNormChunksPerThread][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
    Bf16x8ToFloat(x_raw[i], v[i]);
    if constexpr (kResidual) {
      float rv[8];
      Bf16x8ToFloat(res_raw[i], rv);
#pragma unroll
      for (int k = 0; k < 8; ++k) rv[k] += v[i][k];
      const uint4 packed = FloatToBf16x8(rv);
      *reinterpret_cast<uint4*>(p.residual + r * p.residual_stride + c * 8) = packed;
      Bf16x8ToFloat(packed, v[i]);  // normalise what was stored
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) ss = fmaf(v[i][k], v[i][k], ss);
  }
  ss = BlockSum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(p.dim) + p.eps);
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
    float w[8];
    Bf16x8ToFloat(w_raw[i], w);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[i][k] = __fmul_rn(w[k], __fmul_rn(v[i][k], inv));
    *reinterpret_cast<uint4*>(p.out + r * p.out_stride + c * 8) = FloatToBf16x8(v[i]);
  }
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_SMALL_OPS_RMS_NORM_ROW_CUH_
