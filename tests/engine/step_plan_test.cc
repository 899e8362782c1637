#include "engine/step_plan.h"

#include "engine/block_allocator.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

TEST(StepPlanTest, DerivesPositionsSlotsAndLogitRows) {
  StepPlan plan;
  plan.seqs.push_back({.seq_id = 7, .start_pos = 62, .tokens = {1, 2, 3}, .block_table = {5, 2}, .num_logits = 1});
  plan.seqs.push_back({.seq_id = 8, .start_pos = 0, .tokens = {4, 5}, .block_table = {9}, .num_logits = 2});
  ASSERT_TRUE(plan.Finalize(10, 1000, 16).ok());
  EXPECT_EQ(plan.positions, (std::vector<int32_t>{62, 63, 64, 0, 1}));
  EXPECT_EQ(plan.slots, (std::vector<int32_t>{5 * 64 + 62, 5 * 64 + 63, 2 * 64, 9 * 64, 9 * 64 + 1}));
  EXPECT_EQ(plan.token_seq, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(plan.logit_rows, (std::vector<int32_t>{2, 3, 4}));
}

TEST(StepPlanTest, RejectsBadPlans) {
  auto one = [](SequenceStep s) {
    StepPlan p;
    p.seqs.push_back(std::move(s));
    return p.Finalize(10, 100, 4);
  };
  EXPECT_FALSE(StepPlan().Finalize(10, 100, 4).ok());
  EXPECT_FALSE(one({.tokens = {}, .block_table = {0}}).ok());
  EXPECT_FALSE(one({.tokens = {10}, .block_table = {0}}).ok());          // outside vocab
  EXPECT_FALSE(one({.tokens = {-1}, .block_table = {0}}).ok());
  EXPECT_FALSE(one({.start_pos = 64, .tokens = {1}, .block_table = {0}}).ok());  // table too short
  EXPECT_FALSE(one({.tokens = {1}, .block_table = {4}}).ok());           // block out of range
  EXPECT_FALSE(one({.start_pos = 100, .tokens = {1}, .block_table = {0, 1}}).ok());  // past max positions
  EXPECT_FALSE(one({.tokens = {1}, .block_table = {0}, .num_logits = 2}).ok());
  auto st = one({.tokens = {11}, .block_table = {0}});
  EXPECT_NE(std::string(st.message()).find("vocabulary"), std::string::npos);
}

// Positions and slots are int32 down to the kernels: what would wrap is
// refused (unchecked bounds too), what is merely large passes.
TEST(StepPlanTest, RefusesWhatWouldOverflowInt32) {
  constexpr int32_t kMaxBlock = INT32_MAX / 64;
  StepPlan far;
  far.seqs.push_back({.start_pos = 131071, .tokens = {1}, .block_table = std::vector<int32_t>(2048, 7)});
  ASSERT_TRUE(far.Finalize(0, 131072, 8).ok());
  EXPECT_EQ(far.slots[0], 7 * 64 + 63);
  StepPlan big_block;
  big_block.seqs.push_back({.tokens = {1}, .block_table = {kMaxBlock}});
  ASSERT_TRUE(big_block.Finalize(0, 0, 0).ok());
  EXPECT_EQ(big_block.slots[0], kMaxBlock * 64);
  StepPlan wraps;
  wraps.seqs.push_back({.tokens = {1}, .block_table = {kMaxBlock + 1}});
  EXPECT_FALSE(wraps.Finalize(0, 0, 0).ok());
  StepPlan past;
  past.seqs.push_back({.start_pos = INT32_MAX, .tokens = {1}, .block_table = {0}});
  EXPECT_FALSE(past.Finalize(0, 0, 0).ok());
  StepPlan huge_cache;
  huge_cache.seqs.push_back({.tokens = {1}, .block_table = {0}});
  EXPECT_FALSE(huge_cache.Finalize(0, 0, int64_t{kMaxBlock} + 2).ok());
}

TEST(BlockAllocatorTest, GrowReleaseAndExhaustion) {
  BlockAllocator a(4);
  std::vector<int32_t> t1, t2;
  ASSERT_TRUE(a.Grow(&t1, 65).ok());
  EXPECT_EQ(t1.size(), 2u);
  ASSERT_TRUE(a.Grow(&t1, 128).ok());
  EXPECT_EQ(t1.size(), 2u);
  EXPECT_EQ(a.Grow(&t2, 200).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(t2.empty());
  EXPECT_EQ(a.num_free(), 2);
  ASSERT_TRUE(a.Release(&t1).ok());
  EXPECT_EQ(a.num_free(), 4);
  std::vector<int32_t> bogus = {1};
  EXPECT_FALSE(a.Release(&bogus).ok());  // double free
}

}  // namespace
}  // namespace spar
