#include "base/numeric.h"

#include <cmath>

#include "base/dtype.h"
#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

TEST(NumericTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 ties up to the even neighbour 1 + 2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
}

TEST(NumericTest, E4m3DecodesEveryCodeAndRoundTrips) {
  int nan_codes = 0;
  for (int v = 0; v < 256; ++v) {
    const float f = E4m3ToFloat(static_cast<uint8_t>(v));
    if (std::isnan(f)) {
      ++nan_codes;
      continue;
    }
    const uint8_t back = FloatToE4m3(f);
    if (f == 0.0f) {
      EXPECT_EQ(back & 0x7f, 0) << v;
    } else {
      EXPECT_EQ(back, v) << "code " << v << " value " << f;
    }
  }
  EXPECT_EQ(nan_codes, 2);  // 0x7f and 0xff
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));
}

TEST(NumericTest, E4m3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1000.0f)), 448.0f);
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(-1000.0f)), -448.0f);
  // Between 1.0 (mantissa 0) and 1.125 (mantissa 1): exact midpoint ties to 1.0.
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.0625f)), 1.0f);
  // Midpoint between 1.125 and 1.25 ties to 1.25 (even mantissa 2).
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.1875f)), 1.25f);
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.07f)), 1.125f);
  // Below half the smallest subnormal rounds to zero; at half it ties to 0.
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(std::ldexp(1.0f, -10))), 0.0f);
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(std::ldexp(1.5f, -10))), std::ldexp(1.0f, -9));
}

TEST(NumericTest, E4m3IsNearestRepresentableOnRandomInputs) {
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float x = rng.Symmetric() * 500.0f * std::ldexp(1.0f, -static_cast<int>(rng.Below(14)));
    const float q = E4m3ToFloat(FloatToE4m3(x));
    float best = 0.0f, best_err = INFINITY;
    for (int v = 0; v < 256; ++v) {
      const float c = E4m3ToFloat(static_cast<uint8_t>(v));
      if (std::isnan(c)) continue;
      const float err = std::fabs(c - std::fmin(std::fmax(x, -448.0f), 448.0f));
      if (err < best_err) best_err = err, best = c;
    }
    EXPECT_EQ(std::fabs(q - std::fmin(std::fmax(x, -448.0f), 448.0f)), best_err) << x << " -> " << q << " best " << best;
  }
}

TEST(NumericTest, HalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << h;
  }
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f / 3.0f)), 0.333251953125f);
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(*ParseDType("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(DTypeName(DType::kF16), "F16");
  EXPECT_FALSE(ParseDType("F8_E5M2").ok());
}

TEST(RngTest, IsDeterministicAndUniform) {
  Rng a(42), b(42);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = a.Uniform();
    ASSERT_EQ(x, b.Uniform());
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
  // Pinned: the generator must not change, or every checkpoint hash moves.
  EXPECT_EQ(Rng(1).NextU64(), 0x910a2dec89025cc1ull);
}

}  // namespace
}  // namespace spar
