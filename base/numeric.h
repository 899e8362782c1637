// Host-side conversions between float and the narrow formats spar stores:
// bf16, fp16 and OCP e4m3. All conversions round to nearest even and are
// bit-exact on every IEEE-754 machine, so generated checkpoints hash the same
// everywhere.
#ifndef SPAR_BASE_NUMERIC_H_
#define SPAR_BASE_NUMERIC_H_

#include <cstdint>
#include <cstring>

namespace spar {

constexpr float kE4m3Max = 448.0f;

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Rounds through bf16 and back: what a bf16 store then load yields.
inline float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// e4m3 decode via a 256-entry table (exact).
float E4m3ToFloat(uint8_t v);
// Round to nearest even, saturating to +-448 (values never exceed 448 when
// quantized with scale = amax / 448). NaN maps to 0x7F.
uint8_t FloatToE4m3(float f);

}  // namespace spar

#endif  // SPAR_BASE_NUMERIC_H_
