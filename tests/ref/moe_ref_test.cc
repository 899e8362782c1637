#include "kernels/ref/moe_ref.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::ref {
namespace {

TEST(MoeRefTest, GroupLimitedRoutingMatchesBruteForce) {
  MoeRoutingParams p{.num_experts = 16, .top_k = 4, .n_group = 4, .topk_group = 2, .renormalize = true,
                     .routed_scaling = 2.5f};
  Rng rng(31);
  const int tokens = 50;
  std::vector<float> logits(tokens * 16), bias(16);
  for (auto& v : logits) v = rng.Symmetric() * 3;
  for (auto& v : bias) v = rng.Symmetric() * 0.1f;
  std::vector<int32_t> ids(tokens * 4);
  std::vector<float> wts(tokens * 4);
  MoeRoute(logits.data(), bias.data(), tokens, p, ids.data(), wts.data());
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> s(16), c(16);
    for (int e = 0; e < 16; ++e) {
      s[e] = 1 / (1 + std::exp(-static_cast<double>(logits[t * 16 + e])));
      c[e] = s[e] + bias[e];
    }
    // Brute force over all group pairs: the pair with the best top-2 sums.
    std::vector<double> g(4);
    for (int gi = 0; gi < 4; ++gi) {
      std::vector<double> v(c.begin() + gi * 4, c.begin() + gi * 4 + 4);
      std::sort(v.rbegin(), v.rend());
      g[gi] = v[0] + v[1];
    }
    std::vector<int> gorder = {0, 1, 2, 3};
    std::sort(gorder.begin(), gorder.end(), [&](int a, int b) { return g[a] > g[b]; });
    std::vector<int> cand;
    for (int e = 0; e < 16; ++e) {
      if (e / 4 == gorder[0] || e / 4 == gorder[1]) cand.push_back(e);
    }
    std::sort(cand.begin(), cand.end(), [&](int a, int b) { return c[a] > c[b]; });
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += s[cand[i]];
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(ids[t * 4 + i], cand[i]);
      EXPECT_NEAR(wts[t * 4 + i], s[cand[i]] / sum * 2.5, 1e-5);
    }
  }
}

TEST(MoeRefTest, BiasSteersSelectionButNotWeights) {
  MoeRoutingParams p{.num_experts = 4, .top_k = 1, .n_group = 1, .topk_group = 1, .renormalize = false,
                     .routed_scaling = 1.0f};
  std::vector<float> logits = {2.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> bias = {0.0f, 0.0f, 5.0f, 0.0f};
  int32_t id;
  float w;
  MoeRoute(logits.data(), bias.data(), 1, p, &id, &w);
  EXPECT_EQ(id, 2);
  EXPECT_NEAR(w, 0.5f, 1e-6);  // sigmoid(0), unbiased
}

TEST(MoeRefTest, SiluMul) {
  std::vector<float> g = {0.0f, 1.0f, -2.0f}, u = {5.0f, 2.0f, 3.0f}, out(3);
  SiluMul(g.data(), u.data(), 3, 1, 3, out.data(), 3);
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(out[2], -2.0 / (1 + std::exp(2.0)) * 3, 1e-6);
}

}  // namespace
}  // namespace spar::ref
