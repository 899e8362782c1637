#include "base/numeric.h"

#include <array>
#include <cmath>

namespace spar {
namespace {

std::array<float, 256> BuildE4m3Table() {
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) {
    const int sign = v >> 7;
    const int exp = (v >> 3) & 0xf;
    const int mant = v & 0x7;
    float mag;
    if (exp == 0xf && mant == 0x7) {
      mag = std::nanf("");
    } else if (exp == 0) {
      mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: m/8 * 2^-6
    } else {
      mag = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
    }
    table[v] = sign ? -mag : mag;
  }
  return table;
}

const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> table = BuildE4m3Table();
  return table;
}

}  // namespace

float E4m3ToFloat(uint8_t v) { return E4m3Table()[v]; }

uint8_t FloatToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kE4m3Max) return sign | 0x7e;
  int exp2;
  std::frexp(a, &exp2);  // a = m * 2^exp2, m in [0.5, 1): unbiased exponent e = exp2 - 1
  int e = exp2 - 1;
  if (a == 0.0f) return sign;
  if (e < -6) {
    // Subnormal range: quantum 2^-9. nearbyint rounds half to even.
    const float q = std::nearbyint(std::ldexp(a, 9));
    const int qi = static_cast<int>(q);
    if (qi >= 8) return sign | 0x08;  // rounds up into the smallest normal
    return sign | static_cast<uint8_t>(qi);
  }
  // Normal: 3 mantissa bits, quantum 2^(e-3); q in [8, 16].
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - e)));
  if (q == 16) {
    q = 8;
    ++e;
  }
  const int exp_field = e + 7;
  const int mant = q - 8;
  if (exp_field > 15 || (exp_field == 15 && mant == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((exp_field << 3) | mant);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 0x1f) {
    mag = mant ? std::nanf("") : INFINITY;
  } else {
    mag = std::ldexp(1.0f + static_cast<float>(mant) / 1024.0f, exp - 15);
  }
  return BitsToFloat(FloatBits(mag) | sign);
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: quantum 2^-24.
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 24)));
    return sign | static_cast<uint16_t>(q);  // q == 1024 yields the smallest normal
  }
  int exp2;
  std::frexp(a, &exp2);
  int e = exp2 - 1;
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 10 - e)));  // in [1024, 2048]
  if (q == 2048) {
    q = 1024;
    ++e;
  }
  return sign | static_cast<uint16_t>(((e + 15) << 10) | (q - 1024));
}

}  // namespace spar
