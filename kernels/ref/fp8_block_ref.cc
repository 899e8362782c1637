#include "kernels/ref/fp8_block_ref.h"

#include <algorithm>
#include <cmath>

#include "base/numeric.h"

namespace spar {

Fp8BlockWeight QuantizeFp8Blocks(const float* w, int64_t rows, int64_t cols, bool ue8m0, int block) {
  Fp8BlockWeight q;
  q.rows = rows;
  q.cols = cols;
  q.block = block;
  q.values.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
  for (int64_t br = 0; br < q.scale_rows(); ++br) {
    for (int64_t bc = 0; bc < q.scale_cols(); ++bc) {
      const int64_t r0 = br * block, r1 = std::min(rows, r0 + block);
      const int64_t c0 = bc * block, c1 = std::min(cols, c0 + block);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      float scale = std::max(amax, 1e-4f) / kE4m3Max;
      if (ue8m0) {
        // Smallest power of two >= scale (exact: frexp/ldexp only).
        int e;
        const float m = std::frexp(scale, &e);  // scale = m * 2^e, m in [0.5, 1)
        scale = (m == 0.5f) ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
      }
      q.scales[br * q.scale_cols() + bc] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) q.values[r * cols + c] = FloatToE4m3(w[r * cols + c] / scale);
      }
    }
  }
  return q;
}

void DequantizeFp8Blocks(const uint8_t* values, const float* scales, int64_t rows, int64_t cols, int block,
                         float* out) {
  const int64_t scale_cols = (cols + block - 1) / block;
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scales + (r / block) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = E4m3ToFloat(values[r * cols + c]) * srow[c / block];
  }
}

}  // namespace spar
