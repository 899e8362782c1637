// float -> e4m3 on sm80 (no cvt.e4m3 instruction there): round to nearest
// even, saturating to +-448, NaN -> 0x7f -- the same function, bit for bit,
// as spar::FloatToE4m3 in base/numeric.cc, so GPU-written FP8 caches equal
// the reference codec's bytes. A candidate for kernels/cuda/common once a
// second family needs it.
#ifndef SPAR_KERNELS_CUDA_ATTENTION_FP8_QUANT_CUH_
#define SPAR_KERNELS_CUDA_ATTENTION_FP8_QUANT_CUH_

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

__device__ __forceinline__ uint8_t FloatToE4m3Rn(float f) {
  if (isnan(f)) return 0x7f;
  const uint32_t sign = signbit(f) ? 0x80u : 0u;
  const float a = fabsf(f);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7eu);
  if (a == 0.0f) return static_cast<uint8_t>(sign);
  int exp2;
  frexpf(a, &exp2);
  int e = exp2 - 1;
  if (e < -6) {  // subnormal: quantum 2^-9
    const int qi = static_cast<int>(rintf(ldexpf(a, 9)));
    return static_cast<uint8_t>(sign | (qi >= 8 ? 0x08u : static_cast<uint32_t>(qi)));
  }
  int q = static_cast<int>(rintf(ldexpf(a, 3 - e)));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++e;
  }
  const int exp_field = e + 7, mant = q - 8;
  if (exp_field > 15 || (exp_field == 15 && mant == 7)) return static_cast<uint8_t>(sign | 0x7eu);
  return static_cast<uint8_t>(sign | static_cast<uint32_t>((exp_field << 3) | mant));
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_ATTENTION_FP8_QUANT_CUH_
