#include "engine/decode_graph_key.h"

#include "gtest/gtest.h"

namespace spar {
namespace {

// A decode plan: sequence i at context contexts[i] (its new token at that
// position), blocks numbered from 0, logits for every sequence. With
// `tokens` > 1: a verify step, the token and tokens - 1 drafts after it.
StepPlan Decode(const std::vector<int32_t>& contexts, int tokens = 1) {
  StepPlan plan;
  int32_t next_block = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    SequenceStep s;
    s.seq_id = static_cast<int64_t>(i);
    s.start_pos = contexts[i];
    s.tokens.assign(tokens, 1);
    s.num_logits = tokens;
    for (int32_t b = 0; b * kCacheBlockTokens < contexts[i] + tokens; ++b) s.block_table.push_back(next_block++);
    plan.seqs.push_back(s);
  }
  EXPECT_TRUE(plan.Finalize(10, 1 << 20, 1 << 20).ok());
  return plan;
}

TEST(DecodeGraphKeyTest, ShapeWithTableWidthRoundedToPowerOfTwo) {
  // Contexts 100 and 300 need 2 and 5 blocks: width 5 -> 8.
  auto key = DecodeGraphKeyFor(Decode({100, 300}), /*has_input=*/false, /*indexer_topk=*/2048, 256);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->tokens, 2);
  EXPECT_EQ(key->logit_rows, 2);
  EXPECT_EQ(key->table_stride, 8);
  EXPECT_EQ(key->max_context(), 8 * 64);
  EXPECT_TRUE(key->select_all);
  EXPECT_FALSE(key->has_input);
}

TEST(DecodeGraphKeyTest, PlansOfOneBucketShareAKey) {
  // 5..8 blocks all map to width 8; 9 blocks do not.
  const auto a = DecodeGraphKeyFor(Decode({300, 5}), true, 2048, 256);
  const auto b = DecodeGraphKeyFor(Decode({511, 64}), true, 2048, 256);
  const auto c = DecodeGraphKeyFor(Decode({512, 64}), true, 2048, 256);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_EQ(c->table_stride, 16);
}

TEST(DecodeGraphKeyTest, SelectAllFlipsAboveTheIndexerTopK) {
  // Position p sees p + 1 keys: 2047 -> 2048 keys (all selected), 2048 -> 2049.
  EXPECT_TRUE(DecodeGraphKeyFor(Decode({2047}), false, 2048, 256)->select_all);
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({2048}), false, 2048, 256)->select_all);
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({5}), false, /*no indexer*/ 0, 256)->select_all);
}

TEST(DecodeGraphKeyTest, LogitRowsAndStageInputAreShape) {
  StepPlan plan = Decode({10, 20});
  plan.seqs[1].num_logits = 0;
  ASSERT_TRUE(plan.Finalize(10, 1 << 20, 1 << 20).ok());
  const auto some = DecodeGraphKeyFor(plan, false, 2048, 256);
  const auto all = DecodeGraphKeyFor(Decode({10, 20}), false, 2048, 256);
  ASSERT_TRUE(some && all);
  EXPECT_EQ(some->logit_rows, 1);
  EXPECT_NE(*some, *all);
  EXPECT_NE(*DecodeGraphKeyFor(Decode({10}), true, 2048, 256), *DecodeGraphKeyFor(Decode({10}), false, 2048, 256));
}

TEST(DecodeGraphKeyTest, PrefillMixedEmptyAndOversizedStepsAreNotReplayed) {
  StepPlan prefill;
  prefill.seqs.push_back({.seq_id = 1, .start_pos = 0, .tokens = {1, 2, 3}, .block_table = {0}, .num_logits = 1});
  ASSERT_TRUE(prefill.Finalize(10, 100, 4).ok());
  EXPECT_FALSE(DecodeGraphKeyFor(prefill, false, 2048, 256).has_value());

  StepPlan mixed = Decode({10});
  mixed.seqs.push_back({.seq_id = 9, .start_pos = 0, .tokens = {1, 2}, .block_table = {7}, .num_logits = 1});
  ASSERT_TRUE(mixed.Finalize(10, 1 << 20, 1 << 20).ok());
  EXPECT_FALSE(DecodeGraphKeyFor(mixed, false, 2048, 256).has_value());

  EXPECT_FALSE(DecodeGraphKeyFor(StepPlan(), false, 2048, 256).has_value());
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({1, 2, 3}), false, 2048, /*max_tokens=*/2).has_value());
}

TEST(DecodeGraphKeyTest, VerifyStepsAreReplayedWhenAllowedAndUniform) {
  const GraphShapeLimits verify{256, 5, 32};  // 1 + 4 drafts, GLM-5's 32 indexer heads
  for (int n = 2; n <= 5; ++n) {
    auto key = DecodeGraphKeyFor(Decode({100, 300}, n), false, 2048, verify, /*variant=*/1);
    ASSERT_TRUE(key.has_value()) << n;
    EXPECT_EQ(key->tokens, 2 * n);
    EXPECT_EQ(key->tokens_per_seq, n);
    EXPECT_EQ(key->logit_rows, 2 * n);
    EXPECT_EQ(key->variant, 1);
    // The same shape is a decode step only where verify steps are allowed.
    EXPECT_FALSE(DecodeGraphKeyFor(Decode({100, 300}, n), false, 2048, 256).has_value());
  }
  // Token counts per sequence set the key; so does the variant.
  EXPECT_NE(*DecodeGraphKeyFor(Decode({100}, 2), false, 2048, verify),
            *DecodeGraphKeyFor(Decode({100}, 3), false, 2048, verify));
  EXPECT_NE(*DecodeGraphKeyFor(Decode({100}, 2), false, 2048, verify, 1),
            *DecodeGraphKeyFor(Decode({100}, 2), false, 2048, verify, 2));
  // More than allowed, or past the paged indexer's 256 query rows
  // (DeepSeek-V3.2's 64 heads: 4 rows per sequence at most).
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({100}, 6), false, 2048, verify).has_value());
  EXPECT_TRUE(DecodeGraphKeyFor(Decode({100}, 4), false, 2048, GraphShapeLimits{256, 5, 64}).has_value());
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({100}, 5), false, 2048, GraphShapeLimits{256, 5, 64}).has_value());
  // Rows, not sequences, count against max_tokens.
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({1, 2, 3}, 3), false, 2048, GraphShapeLimits{8, 5, 32}).has_value());
  // A sequence whose drafts were cut (budget, max_tokens): not uniform.
  StepPlan mixed = Decode({100, 300}, 3);
  mixed.seqs[1].tokens.resize(2);
  mixed.seqs[1].num_logits = 2;
  ASSERT_TRUE(mixed.Finalize(10, 1 << 20, 1 << 20).ok());
  EXPECT_FALSE(DecodeGraphKeyFor(mixed, false, 2048, verify).has_value());
  // The select-all bucket looks at the last row's context: 2046 + 3 rows -> 2049 keys.
  EXPECT_TRUE(DecodeGraphKeyFor(Decode({2045}, 3), false, 2048, verify)->select_all);
  EXPECT_FALSE(DecodeGraphKeyFor(Decode({2046}, 3), false, 2048, verify)->select_all);
}

}  // namespace
}  // namespace spar
