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

Activations Random(int64_t rows, int64_t cols, uint64_t seed, bool bf16_values) {
  Rng rng(seed);
  Activations a;
  a.rows = rows;
  a.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float f = static_cast<float>((rng.UniformDouble() * 2 - 1) * 8);
    a.data.push_back(bf16_values ? RoundToBf16(f) : f);
  }
  return a;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

TEST(ActivationCodecTest, Bf16ValuesTravelAsBf16InHalfTheBytesAndComeBackBitExact) {
  Activations in = Random(7, 96, 1, /*bf16_values=*/true);
  in.data[3] = -0.0f;
  in.data[5] = std::numeric_limits<float>::infinity();
  in.data[6] = std::numeric_limits<float>::quiet_NaN();
  in.data[9] = Bf16ToFloat(0x0001);  // the smallest bf16 subnormal
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(in, &wire), in.data.size() * 2);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_BF16);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_EQ(out.rows, 7);
  EXPECT_EQ(out.cols, 96);
  EXPECT_TRUE(BitEqual(in.data, out.data));
}

TEST(ActivationCodecTest, OneValueBeyondBf16KeepsTheWholeMessageF32) {
  Activations in = Random(5, 64, 2, /*bf16_values=*/true);
  in.data[200] = std::nextafter(in.data[200], 100.0f);  // one fp32 ulp off a bf16
  v1::Activation wire;
  EXPECT_EQ(EncodeActivation(in, &wire), in.data.size() * 4);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_F32);
  Activations out;
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_TRUE(BitEqual(in.data, out.data));
  // The cpu backend's fp32 activations, and a NaN with payload bits.
  Activations fp32 = Random(3, 50, 3, /*bf16_values=*/false);
  uint32_t nan_bits = 0x7fc00001u;
  std::memcpy(&fp32.data[0], &nan_bits, 4);
  EncodeActivation(fp32, &wire);
  EXPECT_EQ(wire.dtype(), v1::ACTIVATION_DTYPE_F32);
  ASSERT_TRUE(DecodeActivation(wire, &out).ok());
  EXPECT_TRUE(BitEqual(fp32.data, out.data));
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
  EXPECT_TRUE(out.data.empty());
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
