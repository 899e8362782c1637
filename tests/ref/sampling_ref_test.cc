#include "kernels/ref/sampling_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace spar::ref {
namespace {

TEST(SamplingRefTest, GreedyIsArgmaxWithLowIdTies) {
  std::vector<float> l = {1, 5, 5, 2};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(SampleToken(l.data(), 4, p, {}, 0), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(SampleToken(l.data(), 4, p, {}, 0), 1);
}

TEST(SamplingRefTest, SeededDrawsAreDeterministicAndFollowTheDistribution) {
  std::vector<float> l = {std::log(0.1f), std::log(0.2f), std::log(0.7f)};
  SamplingParams p;
  p.seed = 1234;
  std::vector<int> counts(3);
  for (uint64_t step = 0; step < 20000; ++step) {
    const int32_t a = SampleToken(l.data(), 3, p, {}, step);
    ASSERT_EQ(a, SampleToken(l.data(), 3, p, {}, step));
    counts[a]++;
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.1, 0.01);
  EXPECT_NEAR(counts[1] / 20000.0, 0.2, 0.01);
  EXPECT_NEAR(counts[2] / 20000.0, 0.7, 0.01);
}

TEST(SamplingRefTest, TopPTopKMinPFilter) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.top_p = 0.7f;  // keeps {0, 1}
  for (uint64_t s = 0; s < 500; ++s) {
    p.seed = s;
    EXPECT_LT(SampleToken(l.data(), 4, p, {}, 0), 2);
  }
  p = SamplingParams();
  p.top_k = 3;
  for (uint64_t s = 0; s < 500; ++s) {
    p.seed = s;
    EXPECT_LT(SampleToken(l.data(), 4, p, {}, 0), 3);
  }
  p = SamplingParams();
  p.min_p = 0.5f;  // keeps p >= 0.25: {0, 1}
  for (uint64_t s = 0; s < 500; ++s) {
    p.seed = s;
    EXPECT_LT(SampleToken(l.data(), 4, p, {}, 0), 2);
  }
}

TEST(SamplingRefTest, Penalties) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  TokenHistory h;
  h.prompt_counts[0] = 1;
  h.output_counts[1] = 3;
  ApplyPenalties(l.data(), 4, p, h);
  EXPECT_FLOAT_EQ(l[0], 1.0f);                 // 2 / 2
  EXPECT_FLOAT_EQ(l[1], -4.0f - 1.5f - 0.25f);  // -2 * 2, then 3 * 0.5 and 0.25
  EXPECT_FLOAT_EQ(l[2], 1.0f);
}

TEST(SamplingRefTest, Logprobs) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(TokenLogprob(l.data(), 2, 1), std::log(0.75), 1e-6);
  auto top = TopLogprobs(l.data(), 2, 5);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_NEAR(top[1].second, std::log(0.25), 1e-6);
}

// Token masks (constrained decoding): masked ids are -inf before
// everything, so greedy and seeded draws stay inside the mask and keep the
// allowed ids' relative odds; a mask allowing nothing is ignored.
TEST(SamplingRefTest, TokenMaskRestrictsTheChoice) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const uint32_t only_2_and_3 = 0b1100;
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(SampleToken(l.data(), 4, p, {}, 0, &only_2_and_3), 2);
  p.temperature = 1.0f;
  p.seed = 99;
  std::vector<int> counts(4);
  for (uint64_t step = 0; step < 20000; ++step) counts[SampleToken(l.data(), 4, p, {}, step, &only_2_and_3)]++;
  EXPECT_EQ(counts[0] + counts[1], 0);
  EXPECT_NEAR(counts[2] / 20000.0, 0.75, 0.01);  // 0.15 / (0.15 + 0.05)
  // Penalties come after the mask: a heavily penalised allowed id still wins
  // over masked ones.
  TokenHistory h;
  h.output_counts[3] = 5;
  p.temperature = 0;
  p.frequency_penalty = 2.0f;
  const uint32_t only_3 = 0b1000;
  EXPECT_EQ(SampleToken(l.data(), 4, p, h, 0, &only_3), 3);
  const uint32_t none = 0;
  p.frequency_penalty = 0;
  EXPECT_FALSE(MaskAllowsAFiniteLogit(l.data(), 4, &none));
  EXPECT_EQ(SampleToken(l.data(), 4, p, {}, 0, &none), 0);  // ignored
  const uint32_t past_vocab = 0xF0;                           // bits 4..7: no id of a 4-token vocabulary
  EXPECT_FALSE(MaskAllowsAFiniteLogit(l.data(), 4, &past_vocab));
  // A mask allowing only ids whose logits are -inf is ignored too: the row
  // keeps a choice (and finite logprobs).
  std::vector<float> dead = l;
  dead[2] = dead[3] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(MaskAllowsAFiniteLogit(l.data(), 4, &only_2_and_3));
  EXPECT_FALSE(MaskAllowsAFiniteLogit(dead.data(), 4, &only_2_and_3));
  EXPECT_EQ(SampleToken(dead.data(), 4, p, {}, 0, &only_2_and_3), 0);  // the unmasked argmax
  std::vector<float> m = l;
  ApplyTokenMask(m.data(), 4, &only_2_and_3);
  EXPECT_TRUE(std::isinf(m[0]) && m[0] < 0 && std::isinf(m[1]));
  EXPECT_NEAR(TokenLogprob(m.data(), 4, 2), std::log(0.75), 1e-6);
}

}  // namespace
}  // namespace spar::ref
