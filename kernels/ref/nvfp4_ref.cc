#include "kernels/ref/nvfp4_ref.h"

#include <algorithm>
#include <cmath>

#include "base/numeric.h"

namespace spar::ref {
namespace {

constexpr float kE2m1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float E2m1ToFloat(uint8_t nibble) {
  const float m = kE2m1Magnitude[nibble & 7];
  return (nibble & 8) ? -m : m;
}

uint8_t FloatToE2m1(float v) {
  const float a = std::fabs(v);
  // Midpoints between neighbours; a tie goes to the code with an even
  // mantissa bit (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2,
  // 3.5 -> 4, 5 -> 4), as round-to-nearest-even does.
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return static_cast<uint8_t>(code | (std::signbit(v) && code != 0 ? 8 : 0));
}

void DequantizeNvfp4(const Nvfp4Weights& w, int64_t row_begin, int64_t row_end, float* out) {
  const int64_t blocks = w.cols / kNvfp4Block;
  for (int64_t n = row_begin; n < row_end; ++n) {
    float* dst = out + (n - row_begin) * w.cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const float scale = E4m3ToFloat(w.scales[n * blocks + b]);
      for (int64_t k = b * kNvfp4Block; k < (b + 1) * kNvfp4Block; ++k) {
        dst[k] = (E2m1ToFloat(w.codes[n * w.cols + k]) * scale) * w.global_scale;
      }
    }
  }
}

Nvfp4Weights UnpackNvfp4(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t rows, int64_t cols) {
  Nvfp4Weights w;
  w.rows = rows;
  w.cols = cols;
  w.global_scale = global_scale;
  w.codes.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols / 2; ++i) {
    w.codes[2 * i] = packed[i] & 0xF;
    w.codes[2 * i + 1] = packed[i] >> 4;
  }
  w.scales.assign(scales, scales + rows * (cols / kNvfp4Block));
  return w;
}

std::vector<uint8_t> PackNvfp4(const Nvfp4Weights& w) {
  std::vector<uint8_t> out(static_cast<size_t>(w.rows * w.cols / 2));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(w.codes[2 * i] | (w.codes[2 * i + 1] << 4));
  return out;
}

Nvfp4Weights QuantizeNvfp4(const float* src, int64_t rows, int64_t cols) {
  Nvfp4Weights w;
  w.rows = rows;
  w.cols = cols;
  w.codes.resize(static_cast<size_t>(rows * cols));
  const int64_t blocks = cols / kNvfp4Block;
  w.scales.resize(static_cast<size_t>(rows * blocks));
  float amax = 0.0f;
  for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(src[i]));
  w.global_scale = std::max(amax, 1e-12f) / (kE4m3Max * 6.0f);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* v = src + n * cols + b * kNvfp4Block;
      float bmax = 0.0f;
      for (int i = 0; i < kNvfp4Block; ++i) bmax = std::max(bmax, std::fabs(v[i]));
      uint8_t s = FloatToE4m3(bmax / 6.0f / w.global_scale);
      if (E4m3ToFloat(s) == 0.0f) s = 0x01;  // smallest subnormal: an all-zero block stays zero
      w.scales[n * blocks + b] = s;
      const float step = E4m3ToFloat(s) * w.global_scale;
      for (int i = 0; i < kNvfp4Block; ++i) w.codes[n * cols + b * kNvfp4Block + i] = FloatToE2m1(v[i] / step);
    }
  }
  return w;
}

}  // namespace spar::ref
