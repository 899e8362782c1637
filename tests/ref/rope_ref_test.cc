#include "kernels/ref/rope_ref.h"

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::ref {
namespace {

TEST(RopeRefTest, InterleavedIsHalfSplitUnderPermutation) {
  RopeParams p;
  p.theta = 1e6;
  Rng rng(5);
  std::vector<float> x(64), perm(64);
  for (auto& v : x) v = rng.Symmetric();
  // [even dims ‖ odd dims] turns interleaved pairs into half-split pairs.
  for (int i = 0; i < 32; ++i) {
    perm[i] = x[2 * i];
    perm[32 + i] = x[2 * i + 1];
  }
  const int32_t pos = 77;
  ApplyRope(x.data(), 64, 1, 1, &pos, 0, RopePairs::kInterleaved, p);
  ApplyRope(perm.data(), 64, 1, 1, &pos, 0, RopePairs::kHalfSplit, p);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(x[2 * i], perm[i]);
    EXPECT_EQ(x[2 * i + 1], perm[32 + i]);
  }
}

TEST(RopeRefTest, RotationPreservesNormAndPositionZeroIsIdentity) {
  RopeParams p;
  Rng rng(6);
  std::vector<float> x(2 * 100);
  for (auto& v : x) v = rng.Symmetric();
  auto orig = x;
  const int32_t pos[2] = {0, 12345};
  ApplyRope(x.data(), 100, 2, 1, pos, 20, RopePairs::kHalfSplit, p);
  for (int i = 0; i < 100; ++i) EXPECT_FLOAT_EQ(x[i], orig[i]);
  double n0 = 0, n1 = 0;
  for (int i = 120; i < 184; ++i) n0 += orig[i] * orig[i], n1 += x[i] * x[i];
  EXPECT_NEAR(n0, n1, 1e-4);
  for (int i = 100; i < 120; ++i) EXPECT_EQ(x[i], orig[i]);  // before the rotary span
}

TEST(RopeRefTest, RelativePositionProperty) {
  // q·k after rotation depends only on the position difference.
  RopeParams p;
  p.theta = 1e4;
  Rng rng(8);
  std::vector<float> q(64), k(64);
  for (auto& v : q) v = rng.Symmetric();
  for (auto& v : k) v = rng.Symmetric();
  auto dot_at = [&](int32_t pq, int32_t pk) {
    auto a = q, b = k;
    ApplyRope(a.data(), 64, 1, 1, &pq, 0, RopePairs::kInterleaved, p);
    ApplyRope(b.data(), 64, 1, 1, &pk, 0, RopePairs::kInterleaved, p);
    double d = 0;
    for (int i = 0; i < 64; ++i) d += a[i] * b[i];
    return d;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-4);
}

TEST(RopeRefTest, YarnFrequenciesForDeepseekV32) {
  RopeParams p;
  p.theta = 1e4;
  p.yarn = true;
  p.yarn_factor = 40;
  p.yarn_original_max_positions = 4096;
  const auto inv = RopeInvFreq(p);
  RopeParams plain = p;
  plain.yarn = false;
  const auto base = RopeInvFreq(plain);
  // Correction range (10, 23): below 10 extrapolated (unchanged), above 23
  // interpolated (divided by the factor), blended between.
  for (int i = 0; i <= 10; ++i) EXPECT_FLOAT_EQ(inv[i], base[i]) << i;
  for (int i = 23; i < 32; ++i) EXPECT_NEAR(inv[i], base[i] / 40.0f, base[i] * 1e-7) << i;
  EXPECT_LT(inv[16], base[16]);
  EXPECT_GT(inv[16], base[16] / 40.0f);
}

}  // namespace
}  // namespace spar::ref
