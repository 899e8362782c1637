#include "kernels/ref/int4_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/numeric.h"

namespace spar::ref {
namespace {

uint32_t Word(const uint8_t* p, int64_t index) {
  uint32_t w;
  std::memcpy(&w, p + 4 * index, 4);  // little-endian, as safetensors stores it
  return w;
}

uint8_t Nibble(uint32_t word, int i) { return static_cast<uint8_t>((word >> (4 * i)) & 0xF); }

int32_t ToI32(uint32_t u) {
  int32_t s;
  std::memcpy(&s, &u, 4);
  return s;
}

Int4Weights Empty(int64_t rows, int64_t cols, int64_t group) {
  Int4Weights w;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  w.codes.resize(static_cast<size_t>(rows * cols));
  w.zeros.resize(static_cast<size_t>(rows * w.groups()));
  w.scales.resize(static_cast<size_t>(rows * w.groups()));
  return w;
}

float RoundScale(float s, bool bf16) { return bf16 ? RoundToBf16(s) : HalfToFloat(FloatToHalf(s)); }

}  // namespace

void DequantizeInt4(const Int4Weights& w, int64_t row_begin, int64_t row_end, float* out) {
  const int64_t groups = w.groups();
  for (int64_t n = row_begin; n < row_end; ++n) {
    const uint8_t* code = w.codes.data() + n * w.cols;
    float* dst = out + (n - row_begin) * w.cols;
    for (int64_t g = 0; g < groups; ++g) {
      const float zero = w.zeros[n * groups + g];
      const float scale = w.scales[n * groups + g];
      for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) dst[k] = (static_cast<float>(code[k]) - zero) * scale;
    }
  }
}

Int4Weights QuantizeInt4(const float* src, int64_t rows, int64_t cols, int64_t group, bool symmetric, bool scale_bf16) {
  Int4Weights w = Empty(rows, cols, group);
  const int64_t groups = w.groups();
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = src + n * cols + g * group;
      float lo = v[0], hi = v[0];
      for (int64_t i = 1; i < group; ++i) {
        lo = std::min(lo, v[i]);
        hi = std::max(hi, v[i]);
      }
      float scale;
      int zero;
      if (symmetric) {
        scale = RoundScale(std::max(std::max(std::fabs(lo), std::fabs(hi)), 1e-6f) / 7.5f, scale_bf16);
        zero = 8;
      } else {
        scale = RoundScale(std::max(hi - lo, 1e-6f) / 15.0f, scale_bf16);
        zero = static_cast<int>(std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f));
      }
      w.scales[n * groups + g] = scale;
      w.zeros[n * groups + g] = static_cast<uint8_t>(zero);
      for (int64_t i = 0; i < group; ++i) {
        const float q = std::nearbyint(v[i] / scale) + static_cast<float>(zero);
        w.codes[n * cols + g * group + i] = static_cast<uint8_t>(std::clamp(q, 0.0f, 15.0f));
      }
    }
  }
  return w;
}

// ---- AWQ ----

Int4Weights UnpackAwq(const uint8_t* qweight, const uint8_t* qzeros, const float* scales, int64_t rows, int64_t cols,
                      int64_t group) {
  Int4Weights w = Empty(rows, cols, group);
  const int64_t words = rows / 8, groups = w.groups();
  for (int64_t k = 0; k < cols; ++k) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = Word(qweight, k * words + c);
      for (int i = 0; i < 8; ++i) w.codes[(8 * c + kAwqOrder[i]) * cols + k] = Nibble(word, i);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = Word(qzeros, g * words + c);
      for (int i = 0; i < 8; ++i) w.zeros[(8 * c + kAwqOrder[i]) * groups + g] = Nibble(word, i);
    }
    for (int64_t n = 0; n < rows; ++n) w.scales[n * groups + g] = scales[g * rows + n];
  }
  return w;
}

AwqPacked PackAwq(const Int4Weights& w) {
  AwqPacked p;
  const int64_t words = w.rows / 8, groups = w.groups();
  p.qweight.resize(static_cast<size_t>(w.cols * words));
  p.qzeros.resize(static_cast<size_t>(groups * words));
  p.scales.resize(static_cast<size_t>(groups * w.rows));
  for (int64_t k = 0; k < w.cols; ++k) {
    for (int64_t c = 0; c < words; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t{w.codes[(8 * c + kAwqOrder[i]) * w.cols + k]} << (4 * i);
      p.qweight[k * words + c] = ToI32(word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t{w.zeros[(8 * c + kAwqOrder[i]) * groups + g] & 0xFu} << (4 * i);
      p.qzeros[g * words + c] = ToI32(word);
    }
    for (int64_t n = 0; n < w.rows; ++n) p.scales[g * w.rows + n] = w.scales[n * groups + g];
  }
  return p;
}

// ---- GPTQ ----

Int4Weights UnpackGptq(const uint8_t* qweight, const uint8_t* qzeros, const float* scales, int64_t rows, int64_t cols,
                       int64_t group, bool zero_plus_one) {
  Int4Weights w = Empty(rows, cols, group);
  const int64_t groups = w.groups(), zwords = rows / 8;
  for (int64_t r = 0; r < cols / 8; ++r) {
    for (int64_t n = 0; n < rows; ++n) {
      const uint32_t word = Word(qweight, r * rows + n);
      for (int i = 0; i < 8; ++i) w.codes[n * cols + 8 * r + i] = Nibble(word, i);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < zwords; ++c) {
      const uint32_t word = Word(qzeros, g * zwords + c);
      for (int i = 0; i < 8; ++i) {
        w.zeros[(8 * c + i) * groups + g] = static_cast<uint8_t>(Nibble(word, i) + (zero_plus_one ? 1 : 0));
      }
    }
    for (int64_t n = 0; n < rows; ++n) w.scales[n * groups + g] = scales[g * rows + n];
  }
  return w;
}

bool PackGptq(const Int4Weights& w, bool zero_plus_one, GptqPacked* p) {
  const int64_t groups = w.groups(), zwords = w.rows / 8;
  p->qweight.assign(static_cast<size_t>(w.cols / 8 * w.rows), 0);
  p->qzeros.assign(static_cast<size_t>(groups * zwords), 0);
  p->scales.resize(static_cast<size_t>(groups * w.rows));
  for (int64_t r = 0; r < w.cols / 8; ++r) {
    for (int64_t n = 0; n < w.rows; ++n) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t{w.codes[n * w.cols + 8 * r + i]} << (4 * i);
      p->qweight[r * w.rows + n] = ToI32(word);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < zwords; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) {
        const int z = w.zeros[(8 * c + i) * groups + g] - (zero_plus_one ? 1 : 0);
        if (z < 0 || z > 15) return false;
        word |= static_cast<uint32_t>(z) << (4 * i);
      }
      p->qzeros[g * zwords + c] = ToI32(word);
    }
    for (int64_t n = 0; n < w.rows; ++n) p->scales[g * w.rows + n] = w.scales[n * groups + g];
  }
  return true;
}

// ---- compressed-tensors pack-quantized ----

Int4Weights UnpackPackQuantized(const uint8_t* weight_packed, const uint8_t* zero_point, const float* scales,
                                int64_t rows, int64_t cols, int64_t group) {
  Int4Weights w = Empty(rows, cols, group);
  const int64_t words = (cols + 7) / 8, groups = w.groups();
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < cols; ++k) w.codes[n * cols + k] = Nibble(Word(weight_packed, n * words + k / 8), k % 8);
    for (int64_t g = 0; g < groups; ++g) w.scales[n * groups + g] = scales[n * groups + g];
  }
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      // Codes and zero points are both stored as signed value + 8, so the
      // difference is the same in either domain.
      w.zeros[n * groups + g] = zero_point == nullptr ? 8 : Nibble(Word(zero_point, (n / 8) * groups + g), n % 8);
    }
  }
  return w;
}

PackQuantizedPacked PackPackQuantized(const Int4Weights& w, bool symmetric) {
  PackQuantizedPacked p;
  const int64_t words = (w.cols + 7) / 8, groups = w.groups();
  p.weight_packed.assign(static_cast<size_t>(w.rows * words), 0);
  p.scales.resize(static_cast<size_t>(w.rows * groups));
  for (int64_t n = 0; n < w.rows; ++n) {
    for (int64_t c = 0; c < words; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8 && 8 * c + i < w.cols; ++i) word |= uint32_t{w.codes[n * w.cols + 8 * c + i]} << (4 * i);
      p.weight_packed[n * words + c] = ToI32(word);
    }
    for (int64_t g = 0; g < groups; ++g) p.scales[n * groups + g] = w.scales[n * groups + g];
  }
  if (!symmetric) {
    p.zero_point.assign(static_cast<size_t>((w.rows + 7) / 8 * groups), 0);
    for (int64_t r = 0; r < (w.rows + 7) / 8; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        uint32_t word = 0;
        for (int i = 0; i < 8 && 8 * r + i < w.rows; ++i) word |= uint32_t{w.zeros[(8 * r + i) * groups + g] & 0xFu} << (4 * i);
        p.zero_point[r * groups + g] = ToI32(word);
      }
    }
  }
  return p;
}

}  // namespace spar::ref
