// 4-bit integer weights with per-group scales and zero points, in one
// canonical form, and the three checkpoint layouts that store them (AWQ
// GEMM, GPTQ, compressed-tensors pack-quantized; docs/weight_formats.md):
//
//   W[n][k] = (code[n][k] - zero[n][g]) * scale[n][g],  g = k / group
//
// for a linear layer W [N = out features, K = in features]. Codes are
// 0..15; zeros are 0..16 (GPTQ v1 stores z - 1, so its z reaches 16).
// Dequantization is exact in fp32 ((code - zero) is a small integer and the
// scales come from fp16 / bf16). The unpackers take the packed 32-bit words
// as little-endian bytes (mapped checkpoint data need not be aligned) and the
// scales already widened to fp32.
#ifndef SPAR_KERNELS_REF_INT4_REF_H_
#define SPAR_KERNELS_REF_INT4_REF_H_

#include <cstdint>
#include <vector>

namespace spar::ref {

struct Int4Weights {
  int64_t rows = 0, cols = 0;  // N, K
  int64_t group = 0;           // K values per group; divides cols
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<uint8_t> zeros;  // [rows, groups]
  std::vector<float> scales;   // [rows, groups]
  int64_t groups() const { return group > 0 ? cols / group : 0; }
};

// Rows [row_begin, row_end) of W as fp32 into out [(row_end - row_begin), cols].
void DequantizeInt4(const Int4Weights& w, int64_t row_begin, int64_t row_end, float* out);

// Round-to-nearest quantization per group (make-tiny and tests).
// Asymmetric: scale = (max - min) / 15, zero = round(-min / scale) in 0..15;
// symmetric: scale = max|w| / 7, zero = 8. Scales are rounded to fp16
// (`scale_bf16`: to bf16) before the codes are computed, as the tools store
// them in those types.
Int4Weights QuantizeInt4(const float* w, int64_t rows, int64_t cols, int64_t group, bool symmetric,
                         bool scale_bf16 = false);

// ---- AWQ GEMM: qweight int32 [K, N/8], qzeros int32 [K/G, N/8], scales [K/G, N].
// Word c of a row packs columns 8c..8c+7, column 8c + kAwqOrder[i] in bits 4i..4i+3.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
Int4Weights UnpackAwq(const uint8_t* qweight, const uint8_t* qzeros, const float* scales, int64_t rows,
                      int64_t cols, int64_t group);
struct AwqPacked {
  std::vector<int32_t> qweight, qzeros;
  std::vector<float> scales;  // [K/G, N]
};
AwqPacked PackAwq(const Int4Weights& w);

// ---- GPTQ: qweight int32 [K/8, N] (word r of column n packs rows 8r..8r+7 of
// K, row 8r + i in bits 4i..), qzeros int32 [K/G, N/8] (word c packs columns
// 8c + i in bits 4i..), scales [K/G, N]. v1 (`zero_plus_one`) stores z - 1.
Int4Weights UnpackGptq(const uint8_t* qweight, const uint8_t* qzeros, const float* scales, int64_t rows,
                       int64_t cols, int64_t group, bool zero_plus_one);
struct GptqPacked {
  std::vector<int32_t> qweight, qzeros;
  std::vector<float> scales;  // [K/G, N]
};
// Fails (returns false) when v1 cannot store a zero of 0 (z - 1 = -1).
bool PackGptq(const Int4Weights& w, bool zero_plus_one, GptqPacked* out);

// ---- compressed-tensors pack-quantized: weight_packed int32 [N, ceil(K/8)]
// (word c packs columns 8c + i in bits 4i.., the stored value is the signed
// code + 8, padding zero), weight_zero_point int32 [ceil(N/8), K/G] packed
// along N the same way (absent: symmetric, zero 8), weight_scale [N, K/G].
Int4Weights UnpackPackQuantized(const uint8_t* weight_packed, const uint8_t* zero_point, const float* scales,
                                int64_t rows, int64_t cols, int64_t group);
struct PackQuantizedPacked {
  std::vector<int32_t> weight_packed, zero_point;  // zero_point empty when symmetric
  std::vector<float> scales;                       // [N, K/G]
};
PackQuantizedPacked PackPackQuantized(const Int4Weights& w, bool symmetric);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_INT4_REF_H_
