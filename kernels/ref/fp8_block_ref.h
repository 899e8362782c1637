// Block-FP8 weights as the GLM-5-FP8 / DeepSeek-V3.2 checkpoints store them:
// e4m3 values plus one fp32 multiplier ("weight_scale_inv") per 128x128
// block; W[i][j] = e4m3(W8[i][j]) * scale[i/128][j/128].
#ifndef SPAR_KERNELS_REF_FP8_BLOCK_REF_H_
#define SPAR_KERNELS_REF_FP8_BLOCK_REF_H_

#include <cstdint>
#include <vector>

namespace spar {

struct Fp8BlockWeight {
  int64_t rows = 0, cols = 0;
  int block = 128;
  std::vector<uint8_t> values;  // [rows, cols] e4m3
  std::vector<float> scales;    // [ceil(rows/128), ceil(cols/128)]

  int64_t scale_rows() const { return (rows + block - 1) / block; }
  int64_t scale_cols() const { return (cols + block - 1) / block; }
};

// Quantizes a row-major [rows, cols] matrix per block with scale =
// max(amax, 1e-4) / 448, rounded up to a power of two when `ue8m0`.
Fp8BlockWeight QuantizeFp8Blocks(const float* w, int64_t rows, int64_t cols, bool ue8m0, int block = 128);

// Dequantizes into out[rows * cols] (fp32).
void DequantizeFp8Blocks(const uint8_t* values, const float* scales, int64_t rows, int64_t cols, int block,
                         float* out);

}  // namespace spar

#endif  // SPAR_KERNELS_REF_FP8_BLOCK_REF_H_
