// The 4-bit references against brute-force unpacking: words built bit by
// bit from the documented layouts (docs/weight_formats.md) must unpack to
// the codes that were put in, pack/unpack must round-trip, and dequantized
// values must follow the formula of each format.
#include <cmath>
#include <cstring>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"

namespace spar::ref {
namespace {

template <typename T>
const uint8_t* Raw(const std::vector<T>& v) {
  return reinterpret_cast<const uint8_t*>(v.data());
}

Int4Weights RandomInt4(int64_t rows, int64_t cols, int64_t group, uint64_t seed, int max_zero = 15) {
  Rng rng(seed);
  Int4Weights w;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  for (int64_t i = 0; i < rows * cols; ++i) w.codes.push_back(static_cast<uint8_t>(rng.Below(16)));
  for (int64_t i = 0; i < rows * w.groups(); ++i) {
    w.zeros.push_back(static_cast<uint8_t>(1 + rng.Below(max_zero)));
    w.scales.push_back(HalfToFloat(FloatToHalf(0.001f + rng.Uniform() * 0.01f)));
  }
  return w;
}

void ExpectSame(const Int4Weights& a, const Int4Weights& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.scales, b.scales);
}

// The word whose nibble i (bits 4i..4i+3) is i: unpacking it shows which
// position each nibble lands in.
constexpr int32_t kNibbleIsIndex = 0x76543210;

TEST(Int4RefTest, AwqInterleavesColumnsInEachWord) {
  // One input row (K = 1 is enough for the packing), N = 8, one group.
  const std::vector<int32_t> qweight = {kNibbleIsIndex}, qzeros = {kNibbleIsIndex};
  const std::vector<float> scales(8, 1.0f);
  const Int4Weights w = UnpackAwq(Raw(qweight), Raw(qzeros), scales.data(), 8, 1, 1);
  // Nibble i holds column {0, 2, 4, 6, 1, 3, 5, 7}[i].
  const std::vector<uint8_t> want = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int n = 0; n < 8; ++n) {
    EXPECT_EQ(w.codes[n], want[n]) << "column " << n;
    EXPECT_EQ(w.zeros[n], want[n]) << "zero of column " << n;
  }
}

TEST(Int4RefTest, GptqPacksRowsOfKAndZerosAlongN) {
  // K = 8, N = 8: qweight [1, 8] (column n's word packs its 8 K rows),
  // qzeros [1, 1] packs the 8 columns' zeros.
  std::vector<int32_t> qweight(8);
  for (int n = 0; n < 8; ++n) qweight[n] = kNibbleIsIndex + n;  // nibble 0 of column n is n
  const std::vector<int32_t> qzeros = {kNibbleIsIndex};
  const std::vector<float> scales(8, 2.0f);
  const Int4Weights v1 = UnpackGptq(Raw(qweight), Raw(qzeros), scales.data(), 8, 8, 8, /*zero_plus_one=*/true);
  const Int4Weights v2 = UnpackGptq(Raw(qweight), Raw(qzeros), scales.data(), 8, 8, 8, /*zero_plus_one=*/false);
  for (int n = 0; n < 8; ++n) {
    EXPECT_EQ(v1.codes[n * 8 + 0], n);
    for (int k = 1; k < 8; ++k) EXPECT_EQ(v1.codes[n * 8 + k], k) << "row " << k << " column " << n;
    EXPECT_EQ(v1.zeros[n], n + 1) << "v1 stores z - 1";
    EXPECT_EQ(v2.zeros[n], n);
  }
  // A v1 zero nibble of 15 is z = 16 (what GPTQ v1 kernels compute).
  const std::vector<int32_t> all_f = {-1};
  EXPECT_EQ(UnpackGptq(Raw(qweight), Raw(all_f), scales.data(), 8, 8, 8, true).zeros[0], 16);
}

TEST(Int4RefTest, PackQuantizedIsLittleEndianAlongKWithPadding) {
  // N = 8, K = 12: two words per row, the second half-used.
  std::vector<int32_t> packed(16, 0);
  packed[0] = kNibbleIsIndex;  // row 0, columns 0..7 = 0..7
  packed[1] = 0x0000fedc;      // row 0, columns 8..11 = c, d, e, f
  const std::vector<int32_t> zp = {kNibbleIsIndex};  // rows 0..7 have zero nibble 0..7 (one group)
  const std::vector<float> scales(8, 0.5f);
  const Int4Weights w = UnpackPackQuantized(Raw(packed), Raw(zp), scales.data(), 8, 12, 12);
  for (int k = 0; k < 12; ++k) EXPECT_EQ(w.codes[k], k < 8 ? k : 0xc + (k - 8)) << "column " << k;
  for (int n = 0; n < 8; ++n) EXPECT_EQ(w.zeros[n], n);
  // Symmetric: no zero point tensor, every zero is the +8 offset.
  const Int4Weights s = UnpackPackQuantized(Raw(packed), nullptr, scales.data(), 8, 12, 12);
  for (int n = 0; n < 8; ++n) EXPECT_EQ(s.zeros[n], 8);
  std::vector<float> row(12);
  DequantizeInt4(s, 0, 1, row.data());
  // Stored 0 is the signed code -8; stored 15 is +7.
  EXPECT_EQ(row[0], -8 * 0.5f);
  EXPECT_EQ(row[11], 7 * 0.5f);
}

TEST(Int4RefTest, PackUnpackRoundTrips) {
  for (int64_t group : {32, 64, 128}) {
    const Int4Weights w = RandomInt4(48, 256, group, 7 + group);
    const AwqPacked awq = PackAwq(w);
    ExpectSame(UnpackAwq(Raw(awq.qweight), Raw(awq.qzeros), awq.scales.data(), 48, 256, group), w);
    for (bool v1 : {true, false}) {
      GptqPacked g;
      ASSERT_TRUE(PackGptq(w, v1, &g));
      ExpectSame(UnpackGptq(Raw(g.qweight), Raw(g.qzeros), g.scales.data(), 48, 256, group, v1), w);
    }
    Int4Weights ct = w;
    const PackQuantizedPacked p = PackPackQuantized(ct, /*symmetric=*/false);
    ExpectSame(UnpackPackQuantized(Raw(p.weight_packed), Raw(p.zero_point), p.scales.data(), 48, 256, group), ct);
  }
  // GPTQ v1 cannot store a zero of 0.
  Int4Weights zero = RandomInt4(8, 8, 8, 3);
  zero.zeros[0] = 0;
  GptqPacked g;
  EXPECT_FALSE(PackGptq(zero, true, &g));
  EXPECT_TRUE(PackGptq(zero, false, &g));
}

TEST(Int4RefTest, DequantizeFollowsTheFormulaAndSlicesRows) {
  const Int4Weights w = RandomInt4(16, 128, 32, 11);
  std::vector<float> all(16 * 128), part(5 * 128);
  DequantizeInt4(w, 0, 16, all.data());
  DequantizeInt4(w, 7, 12, part.data());
  for (int n = 0; n < 16; ++n) {
    for (int k = 0; k < 128; ++k) {
      const float want = (static_cast<float>(w.codes[n * 128 + k]) - w.zeros[n * 4 + k / 32]) * w.scales[n * 4 + k / 32];
      ASSERT_EQ(all[n * 128 + k], want);
      if (n >= 7 && n < 12) ASSERT_EQ(part[(n - 7) * 128 + k], want);
    }
  }
}

TEST(Int4RefTest, QuantizeIsCloseAndStoresHalfScales) {
  Rng rng(5);
  std::vector<float> x(32 * 128);
  for (auto& v : x) v = rng.Symmetric() * 0.1f;
  for (bool sym : {true, false}) {
    const Int4Weights q = QuantizeInt4(x.data(), 32, 128, 64, sym);
    std::vector<float> back(x.size());
    DequantizeInt4(q, 0, 32, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float step = q.scales[(i / 128) * 2 + (i % 128) / 64];
      // Half a step, plus what the fp16 rounding of the scale moves the
      // grid's ends by.
      ASSERT_LE(std::fabs(back[i] - x[i]), 0.51f * step) << i;
    }
    for (float s : q.scales) EXPECT_EQ(HalfToFloat(FloatToHalf(s)), s);
    if (sym) {
      for (uint8_t z : q.zeros) EXPECT_EQ(z, 8);
    }
  }
}

TEST(Nvfp4RefTest, E2m1TableAndRounding) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c)), want[c]) << c;
    if (c != 8) EXPECT_EQ(FloatToE2m1(want[c]), c) << c;
  }
  // Brute force: the nearest representable value, ties to the even mantissa.
  for (int i = -700; i <= 700; ++i) {
    const float v = i * 0.01f;
    const float got = E2m1ToFloat(FloatToE2m1(v));
    float best = 1e9f;
    for (int c = 0; c < 16; ++c) best = std::min(best, std::fabs(E2m1ToFloat(static_cast<uint8_t>(c)) - v));
    ASSERT_LE(std::fabs(got - v), best + 1e-6f) << v;
  }
  EXPECT_EQ(E2m1ToFloat(FloatToE2m1(0.25f)), 0.0f);
  EXPECT_EQ(E2m1ToFloat(FloatToE2m1(0.75f)), 1.0f);
  EXPECT_EQ(E2m1ToFloat(FloatToE2m1(2.5f)), 2.0f);
  EXPECT_EQ(E2m1ToFloat(FloatToE2m1(5.0f)), 4.0f);
  EXPECT_EQ(E2m1ToFloat(FloatToE2m1(100.0f)), 6.0f);
}

TEST(Nvfp4RefTest, EvenColumnInTheLowNibbleAndTheThreeScales) {
  // One row of 32 values: bytes 0x21 -> columns 0, 1 = codes 1, 2.
  std::vector<uint8_t> packed(16, 0);
  packed[0] = 0x21;
  packed[15] = 0xF7;  // columns 30, 31 = +6, -6
  const std::vector<uint8_t> scales = {0x38 /* 1.0 */, 0x40 /* 2.0 */};
  const Nvfp4Weights w = UnpackNvfp4(packed.data(), scales.data(), 0.25f, 1, 32);
  EXPECT_EQ(w.codes[0], 1);
  EXPECT_EQ(w.codes[1], 2);
  std::vector<float> out(32);
  DequantizeNvfp4(w, 0, 1, out.data());
  EXPECT_EQ(out[0], 0.5f * 1.0f * 0.25f);
  EXPECT_EQ(out[1], 1.0f * 1.0f * 0.25f);
  EXPECT_EQ(out[30], 6.0f * 2.0f * 0.25f);
  EXPECT_EQ(out[31], -6.0f * 2.0f * 0.25f);
  EXPECT_EQ(PackNvfp4(w), packed);
}

TEST(Nvfp4RefTest, QuantizeIsWithinHalfAStep) {
  Rng rng(9);
  std::vector<float> x(8 * 64);
  for (auto& v : x) v = rng.Symmetric() * 0.05f;
  const Nvfp4Weights q = QuantizeNvfp4(x.data(), 8, 64);
  std::vector<float> back(x.size());
  DequantizeNvfp4(q, 0, 8, back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float step = E4m3ToFloat(q.scales[i / 16]) * q.global_scale;  // e2m1's widest gap is 2 steps (4 -> 6)
    ASSERT_LE(std::fabs(back[i] - x[i]), 1.0f * step + 1e-6f) << i;
  }
}

}  // namespace
}  // namespace spar::ref
