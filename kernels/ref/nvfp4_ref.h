// NVFP4 weights as ModelOpt stores them (docs/weight_formats.md): e2m1
// values packed two per byte (the even column in the low nibble), one e4m3
// scale per 16 consecutive columns and one fp32 global scale per tensor:
//
//   W[n][k] = e2m1(code[n][k]) * e4m3(scale[n][k / 16]) * global_scale
//
// e2m1 is sign, 2 exponent bits (bias 1), 1 mantissa bit: magnitudes
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}. The product of an e2m1 value and an e4m3
// scale has at most 5 significant bits, so it is exact in bf16 and fp32;
// the global scale is applied last.
#ifndef SPAR_KERNELS_REF_NVFP4_REF_H_
#define SPAR_KERNELS_REF_NVFP4_REF_H_

#include <cstdint>
#include <vector>

namespace spar::ref {

inline constexpr int kNvfp4Block = 16;

struct Nvfp4Weights {
  int64_t rows = 0, cols = 0;   // N, K (K a multiple of 16)
  std::vector<uint8_t> codes;   // [rows, cols] e2m1 nibbles (s.ee.m)
  std::vector<uint8_t> scales;  // [rows, cols / 16] e4m3
  float global_scale = 1.0f;    // weight_scale_2
};

float E2m1ToFloat(uint8_t nibble);
// Nearest e2m1 code (ties to even mantissa), saturating at +-6.
uint8_t FloatToE2m1(float v);

// Rows [row_begin, row_end) as fp32 into out [(row_end - row_begin), cols].
void DequantizeNvfp4(const Nvfp4Weights& w, int64_t row_begin, int64_t row_end, float* out);

// From the checkpoint tensors: weight uint8 [rows, cols / 2], weight_scale
// e4m3 [rows, cols / 16], weight_scale_2.
Nvfp4Weights UnpackNvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t rows, int64_t cols);
std::vector<uint8_t> PackNvfp4(const Nvfp4Weights& w);

// ModelOpt's recipe: global = amax / (448 * 6), block scale = e4m3(block
// amax / 6 / global), codes = nearest e2m1 of w / (scale * global).
Nvfp4Weights QuantizeNvfp4(const float* w, int64_t rows, int64_t cols);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_NVFP4_REF_H_
