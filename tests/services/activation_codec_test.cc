// Hidden states on the wire: BF16 exactly when lossless, F32 otherwise, and
// every malformed message an error.
#include "services/worker/activation_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

// fp32 activations (the cpu backend's), each value a bf16 or not.
std::vector<float> RandomValues(int64_t n, uint64_t seed, bool bf16_values) {
  Rng rng(seed);
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>((rng.UniformDouble() * 2 - 1) * 8);
    v.push_back(bf16_values ? RoundToBf16(f) : f);
  }
  return v;
}

Activations Random(int64_t rows, int64_t cols, uint64_t seed, bool bf16_values) {
  return Activations::FromFloats(RandomValues(rows * cols, seed, bf16_values), rows, cols);
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

TEST(ActivationCodecTest, Bf16ValuesTravelAsBf16InHalfTheBytesAndComeBackBitExact) {
  std::vector<float> values = RandomValues(7 * 96, 1, /*bf16_values=*/true);
  values[3] = -0.0f;
  values[5] = std::numeric_limits<float>::infinity();
  values[6] = std::numeric_limits<float>::quiet_NaN();
  values[9] = Bf16ToFloat(0x0001);  // the smallest bf16 subnormal
  const Activations in = Activations::FromFloats(values, 7, 96);
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(in, &wire), values.size() * 2);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_BF16);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_EQ(out.rows, 7);
  EXPECT_EQ(out.cols, 96);
  EXPECT_EQ(out.dtype, DType::kBF16);  // kept as the wire's: the receiving backend converts
  EXPECT_TRUE(BitEqual(values, out.ToFloats()));
}

TEST(ActivationCodecTest, OneValueBeyondBf16KeepsTheWholeMessageF32) {
  std::vector<float> values = RandomValues(5 * 64, 2, /*bf16_values=*/true);
  values[200] = std::nextafter(values[200], 100.0f);  // one fp32 ulp off a bf16
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(Activations::FromFloats(values, 5, 64), &wire), values.size() * 4);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_F32);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_EQ(out.dtype, DType::kF32);
  EXPECT_TRUE(BitEqual(values, out.ToFloats()));
  // The cpu backend's fp32 activations, and a NaN with payload bits.
  std::vector<float> fp32 = RandomValues(3 * 50, 3, /*bf16_values=*/false);
  uint32_t nan_bits = 0x7fc00001u;
  std::memcpy(&fp32[0], &nan_bits, 4);
  EncodeActivation(Activations::FromFloats(fp32, 3, 50), &wire);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_F32);
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_TRUE(BitEqual(fp32, out.ToFloats()));
}

// The cuda backend's bf16 activations go out as their own bytes, untouched.
TEST(ActivationCodecTest, Bf16ActivationsTravelAsTheirBytes) {
  Activations in;
  in.dtype = DType::kBF16;
  in.rows = 3;
  in.cols = 8;
  Rng rng(9);
  for (int i = 0; i < 3 * 8 * 2; ++i) in.bytes.push_back(static_cast<uint8_t>(rng.NextU64()));
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(in, &wire), in.bytes.size());
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_BF16);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_EQ(out.dtype, DType::kBF16);
  EXPECT_EQ(out.bytes, in.bytes);
}

TEST(ActivationCodecTest, EmptyActivationsRoundTrip) {
  Activations in;
  in.rows = 0;
  in.cols = 6144;
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(in, &wire), 0u);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_EQ(out.rows, 0);
  EXPECT_TRUE(out.bytes.empty());
}

TEST(ActivationCodecTest, MalformedMessagesAreErrorsNamingTheProblem) {
  v1::Activation wire;
  EncodeActivation(Random(2, 8, 4, true), &wire);
  Activations out;
  auto expect_error = [&](v1::Activation bad, const std::string& needle) {
    const absl::Status s = DecodeActivation(bad, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
  };
  v1::Activation bad = wire;
  bad.set_dtype(v1::ACTIVATION_DTYPE_UNSPECIFIED);
  expect_error(bad, "hidden.dtype");
  bad = wire;
  bad.mutable_data()->pop_back();
  expect_error(bad, "bytes, not 2 x 8");
  bad = wire;
  bad.set_dtype(v1::ACTIVATION_DTYPE_F32);  // the bytes of BF16 values
  expect_error(bad, "F32 values");
  bad = wire;
  bad.set_rows(-1);
  expect_error(bad, "hidden has");
  bad = wire;
  bad.set_rows(int64_t{1} << 40);  // rows * cols * 2 would overflow past the bound check
  bad.set_cols(int64_t{1} << 40);
  expect_error(bad, "hidden has");
}

}  // namespace
}  // namespace spar
