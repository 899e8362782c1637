#include "kernels/ref/gemm_ref.h"

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/fp8_block_ref.h"

namespace spar::ref {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.Symmetric();
  return v;
}

TEST(GemmRefTest, MatchesDoublePrecisionBruteForce) {
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 17, 9}, {5, 64, 300}, {16, 33, 129}}) {
    auto x = Random(m * (k + 3), 1), w = Random(n * k, 2);
    std::vector<float> y(m * (n + 1), NAN);
    Gemm(x.data(), k + 3, m, k, w.data(), n, y.data(), n + 1);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double ref = 0;
        for (int c = 0; c < k; ++c) ref += static_cast<double>(x[i * (k + 3) + c]) * w[j * k + c];
        EXPECT_NEAR(y[i * (n + 1) + j], ref, 1e-5 * std::sqrt(k)) << m << "x" << n << "x" << k;
      }
    }
  }
}

TEST(GemmRefTest, Fp8GemmEqualsDequantizeThenGemm) {
  const int m = 4, n = 200, k = 300;  // partial 128-blocks in both dims
  auto w = Random(n * k, 3);
  Fp8BlockWeight q = QuantizeFp8Blocks(w.data(), n, k, /*ue8m0=*/false);
  std::vector<float> deq(n * k);
  DequantizeFp8Blocks(q.values.data(), q.scales.data(), n, k, 128, deq.data());
  auto x = Random(m * k, 4);
  std::vector<float> a(m * n), b(m * n);
  Fp8Gemm(x.data(), k, m, k, q.values.data(), q.scales.data(), n, a.data(), n);
  Gemm(x.data(), k, m, k, deq.data(), n, b.data(), n);
  EXPECT_EQ(a, b);
  EXPECT_EQ(q.scale_rows(), 2);
  EXPECT_EQ(q.scale_cols(), 3);
}

TEST(Fp8BlockRefTest, ScalesAreBlockAmaxOver448) {
  std::vector<float> w(130 * 5, 0.01f);
  w[129 * 5 + 4] = -3.5f;  // the second row block holds the max
  Fp8BlockWeight q = QuantizeFp8Blocks(w.data(), 130, 5, false);
  EXPECT_FLOAT_EQ(q.scales[0], 0.01f / 448.0f);
  EXPECT_FLOAT_EQ(q.scales[1], 3.5f / 448.0f);
  Fp8BlockWeight p = QuantizeFp8Blocks(w.data(), 130, 5, /*ue8m0=*/true);
  EXPECT_EQ(p.scales[1], 0.0078125f);  // 2^-7 >= 3.5/448 = 0.0078125 exactly
}

}  // namespace
}  // namespace spar::ref
