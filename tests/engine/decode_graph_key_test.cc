#include "engine/decode_graph_key.h"

#include "gtest/gtest.h"

namespace spar {
namespace {

// A decode plan: sequence i at context contexts[i] (its new token at that
// position), blocks numbered from 0, logits for every sequence.
StepPlan Decode(const std::vector<int32_t>& contexts) {
  StepPlan plan;
  int32_t next_block = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    SequenceStep s;
    s.seq_id = static_cast<int64_t>(i);
    s.start_pos = contexts[i];
    s.tokens = {1};
    for (int32_t b = 0; b * kCacheBlockTokens <= contexts[i]; ++b) s.block_table.push_back(next_block++);
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

}  // namespace
}  // namespace spar
