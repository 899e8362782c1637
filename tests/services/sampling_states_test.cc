#include "services/worker/sampling_states.h"

#include "gtest/gtest.h"

namespace spar {
namespace {

SequenceSampling Params(int prompt_len, uint64_t seed = 1) {
  SequenceSampling s;
  s.prompt_len = prompt_len;
  s.params.seed = seed;
  s.top_logprobs = 2;
  return s;
}

TEST(SamplingStatesTest, HistoryAndStepFollowThePlans) {
  SamplingStates st;
  st.Create(7, Params(3));
  ASSERT_TRUE(st.Observe(7, 0, {5, 5}).ok());       // prefill chunk 1
  EXPECT_EQ(st.Request(7).status().code(), absl::StatusCode::kFailedPrecondition);  // inside the prompt
  ASSERT_TRUE(st.Observe(7, 2, {6}).ok());          // end of prompt
  auto r = st.Request(7);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->step, 0u);
  EXPECT_EQ(r->top_logprobs, 2);
  EXPECT_EQ(r->history->prompt_counts.at(5), 2);
  EXPECT_TRUE(r->history->output_counts.empty());
  ASSERT_TRUE(st.Observe(7, 3, {9}).ok());          // first output fed back
  r = st.Request(7);
  EXPECT_EQ(r->step, 1u);
  EXPECT_EQ(r->history->output_counts.at(9), 1);
}

TEST(SamplingStatesTest, GapsAndUnknownSequencesAreErrors) {
  SamplingStates st;
  EXPECT_EQ(st.Observe(1, 0, {1}).code(), absl::StatusCode::kFailedPrecondition);
  st.Create(1, Params(2));
  EXPECT_EQ(st.Observe(1, 1, {1}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(st.Observe(1, 0, {1, 2}).ok());
  EXPECT_EQ(st.Observe(1, 1, {3}).code(), absl::StatusCode::kFailedPrecondition);  // overlap
}

TEST(SamplingStatesTest, RecreateAfterPreemptionRebuildsTheSameHistory) {
  SamplingStates a, b;
  a.Create(1, Params(2, 9));
  ASSERT_TRUE(a.Observe(1, 0, {4, 4}).ok());
  ASSERT_TRUE(a.Observe(1, 2, {8}).ok());
  ASSERT_TRUE(a.Observe(1, 3, {8}).ok());
  // b saw a preemption: a first attempt, then a recompute of everything.
  b.Create(1, Params(2, 9));
  ASSERT_TRUE(b.Observe(1, 0, {4, 4}).ok());
  ASSERT_TRUE(b.Observe(1, 2, {8}).ok());
  b.Create(1, Params(2, 9));
  ASSERT_TRUE(b.Observe(1, 0, {4, 4, 8, 8}).ok());
  auto ra = a.Request(1), rb = b.Request(1);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->step, rb->step);
  EXPECT_EQ(ra->history->prompt_counts, rb->history->prompt_counts);
  EXPECT_EQ(ra->history->output_counts, rb->history->output_counts);
  b.Release(1);
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace spar
