// e4m3 -> bf16 without FP8 hardware: sm80 has no e4m3 convert instruction
// (cvt.*.e4m3x2 needs sm89), so W8A16 kernels widen in registers.
//
// Trick: an e4m3 byte s.eeee.mmm moved into bf16 bit positions as
// s.0000eeee.mmm0000 is a bf16 whose exponent is 120 too small (bias 127 vs
// 7); one bf16 multiply by 2^120 fixes normals and subnormals alike, exactly
// (e4m3 values are all representable in bf16). Callers that multiply by a
// block scale anyway can fold the 2^120 into that scale instead.
// The two NaN codes (0x7f, 0xff) decode to +-480: checkpoints never hold them.
#ifndef SPAR_KERNELS_CUDA_COMMON_FP8_SM80_CUH_
#define SPAR_KERNELS_CUDA_COMMON_FP8_SM80_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

// 2^120 as a bf16 bit pattern (exponent field 247).
inline constexpr uint16_t kBf16Pow2_120 = 0x7b80;
inline constexpr float kPow2_120 = 1.329227995784916e36f;  // 2^120

// Four e4m3 bytes (little-endian in `v`) -> two bf16x2 registers holding
// value * 2^-120: lo = bytes {0, 1}, hi = bytes {2, 3}.
// One byte permute per register puts each byte in the low half of its 16-bit
// lane and replicates the byte's sign over the high half (prmt's sign mode):
// lane = SSSSSSSS.seeeemmm. Shifted left by 4, the magnitude sits at bf16
// bits 4..10 and a copy of the sign at bits 12..15; the mask keeps bit 15
// and bits 4..10 (and drops what the shift carried from the low lane into
// the high one). Three instructions per register.
__device__ __forceinline__ uint32_t PermuteWithSign(uint32_t v, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(v), "r"(0u), "r"(selector));
  return d;
}

__device__ __forceinline__ void E4m3x4ToScaledBf16x4(uint32_t v, uint32_t& lo, uint32_t& hi) {
  // Selector nibbles: byte index, | 8 = that byte's sign replicated.
  lo = (PermuteWithSign(v, 0x9180u) << 4) & 0x87f087f0u;
  hi = (PermuteWithSign(v, 0xb3a2u) << 4) & 0x87f087f0u;
}

// Exact values: multiplies the scaled form by 2^120 in bf16.
__device__ __forceinline__ void E4m3x4ToBf16x4(uint32_t v, uint32_t& lo, uint32_t& hi) {
  E4m3x4ToScaledBf16x4(v, lo, hi);
  const __nv_bfloat162 k = __halves2bfloat162(__ushort_as_bfloat16(kBf16Pow2_120), __ushort_as_bfloat16(kBf16Pow2_120));
  __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162*>(&lo);
  __nv_bfloat162 b = *reinterpret_cast<__nv_bfloat162*>(&hi);
  a = __hmul2(a, k);
  b = __hmul2(b, k);
  lo = *reinterpret_cast<uint32_t*>(&a);
  hi = *reinterpret_cast<uint32_t*>(&b);
}

__device__ __forceinline__ float E4m3ToFloat(uint8_t v) {
  const uint32_t bits = (static_cast<uint32_t>(v & 0x80) << 24) | (static_cast<uint32_t>(v & 0x7f) << 20);
  return __uint_as_float(bits) * kPow2_120;
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_FP8_SM80_CUH_
