// One RoPE pair of LaunchRopeApply (small_ops.h), as a device function: the
// RoPE op's kernel and the latent cache write's launch (which ropes the
// queries' rope lanes beside the cache rows, mla_cache.h) both run it, so
// their bits agree.
#ifndef SPAR_KERNELS_CUDA_SMALL_OPS_ROPE_APPLY_CUH_
#define SPAR_KERNELS_CUDA_SMALL_OPS_ROPE_APPLY_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/load_early.cuh"
#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar::cuda {

// Pair idx < p.rows * rotary_dim / 2: row idx / (rotary_dim / 2).
__device__ __forceinline__ void RopeApplyPair(const RopeApplyParams& p, int64_t idx) {
  const int half = p.rotary_dim / 2;
  const int64_t r = idx / half;
  const int i = static_cast<int>(idx - r * half);
  const int a = p.interleaved ? 2 * i : i;
  const int b = p.interleaved ? 2 * i + 1 : i + half;
  const int64_t pos_index = r / p.rows_per_position;
  const int64_t in_row = p.in_position_stride == 0
                             ? r * p.in_stride
                             : pos_index * p.in_position_stride + (r - pos_index * p.rows_per_position) * p.in_stride;
  const __nv_bfloat16* src = p.in + in_row + p.in_offset;
  // The four loads at once (LoadEarly: left to the compiler, the position
  // and frequency waited for the pair's conversion, a second round trip).
  const int32_t position = LoadEarly(p.positions + pos_index);
  const float freq = LoadEarly(p.inv_freq + i);
  const uint16_t raw0 = LoadEarly(reinterpret_cast<const uint16_t*>(src + a));
  const uint16_t raw1 = LoadEarly(reinterpret_cast<const uint16_t*>(src + b));
  const float x0 = __bfloat162float(__ushort_as_bfloat16(raw0)), x1 = __bfloat162float(__ushort_as_bfloat16(raw1));
  float c, s, y0, y1;
  RopeCosSin(position, freq, p.attention_factor, c, s);
  RopeRotate(x0, x1, c, s, y0, y1);
  __nv_bfloat16* dst = p.out + r * p.out_stride + p.out_offset;
  dst[a] = __float2bfloat16_rn(y0);
  dst[b] = __float2bfloat16_rn(y1);
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_SMALL_OPS_ROPE_APPLY_CUH_
