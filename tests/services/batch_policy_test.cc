// BatchPolicy, PreemptionPolicy, BlockLedger and AdmissionQueue on their
// own: who runs, who is preempted, what blocks move.
#include "services/scheduler/batch_policy.h"

#include "gtest/gtest.h"
#include "services/scheduler/admission_queue.h"
#include "services/scheduler/block_ledger.h"
#include "services/scheduler/preemption_policy.h"

namespace spar {
namespace {

// A waiting sequence with `n` tokens (kept alive by `store`).
SeqView Waiting(int64_t id, int n, std::vector<std::vector<int32_t>>* store) {
  store->emplace_back(n, 7);
  return {id, 0, n, false, store->back()};
}

TEST(BlockLedgerTest, GrowFreeAndConsistency) {
  BlockLedger ledger(4);
  EXPECT_EQ(BlockLedger::BlocksFor(0), 0);
  EXPECT_EQ(BlockLedger::BlocksFor(64), 1);
  EXPECT_EQ(BlockLedger::BlocksFor(65), 2);
  ASSERT_TRUE(ledger.Grow(1, 65).ok());
  EXPECT_EQ(ledger.Table(1).size(), 2u);
  ASSERT_TRUE(ledger.Grow(1, 100).ok());  // still 2 blocks
  EXPECT_EQ(ledger.num_used(), 2);
  ASSERT_TRUE(ledger.Grow(2, 64).ok());
  EXPECT_EQ(ledger.Shortfall(3, 128), 2);
  EXPECT_FALSE(ledger.CanGrow(3, 128));
  EXPECT_EQ(ledger.Grow(3, 128).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger.Table(3).size(), 0u);  // unchanged on failure
  EXPECT_EQ(ledger.num_sequences(), 2u);
  EXPECT_TRUE(ledger.CheckConsistency().ok());
  ASSERT_TRUE(ledger.Free(1).ok());
  ASSERT_TRUE(ledger.Free(1).ok());  // nothing held: fine
  ASSERT_TRUE(ledger.Grow(3, 128).ok());
  ASSERT_TRUE(ledger.Free(2).ok());
  ASSERT_TRUE(ledger.Free(3).ok());
  EXPECT_EQ(ledger.num_used(), 0);
  EXPECT_TRUE(ledger.CheckConsistency().ok());
}

TEST(AdmissionQueueTest, BoundedAllOrNothingAndPreemptedFirst) {
  AdmissionQueue q(3);
  ASSERT_TRUE(q.Admit({1, 2}).ok());
  EXPECT_EQ(q.Admit({3, 4}).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(q.size(), 2u);
  ASSERT_TRUE(q.Admit({3}).ok());
  q.Requeue(9);  // preempted: over the bound, at the front
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.items().front(), 9);
  EXPECT_TRUE(q.Remove(2));
  EXPECT_FALSE(q.Remove(2));
  EXPECT_EQ(std::vector<int64_t>(q.items().begin(), q.items().end()), (std::vector<int64_t>{9, 1, 3}));
}

TEST(PreemptionPolicyTest, YoungestEligibleVictim) {
  std::vector<PreemptionCandidate> running = {{1, 2, false}, {2, 1, false}, {3, 1, true}, {4, 0, false}};
  // 4 holds nothing, 3 is in flight: 2 is the youngest eligible.
  EXPECT_EQ(PreemptionPolicy::PickVictim(running, {}), 2);
  EXPECT_EQ(PreemptionPolicy::PickVictim(running, {2}), 1);
  EXPECT_EQ(PreemptionPolicy::PickVictim(running, {1, 2}), std::nullopt);
  EXPECT_EQ(PreemptionPolicy::Reclaimable(running, {}), 3);
}

TEST(BatchPolicyTest, DecodesAndPrefillChunksUnderTheBudget) {
  BlockLedger ledger(16);
  BatchPolicy policy({.max_batch_tokens = 10, .max_seqs = 8, .max_running = 8});
  ASSERT_TRUE(ledger.Grow(1, 30).ok());
  ASSERT_TRUE(ledger.Grow(2, 5).ok());
  // 1: decoding (30 computed of 31); 2: prefill continuing (5 of 20);
  // 3: waiting with a 7-token prompt.
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(1);
  BatchDecision d = policy.Plan({{1, 30, 31, false}, {2, 5, 20, false}}, {Waiting(3, 7, &tokens)}, &ledger);
  ASSERT_EQ(d.steps.size(), 2u);
  EXPECT_EQ(d.steps[0].seq, 1);
  EXPECT_EQ(d.steps[0].count, 1);
  EXPECT_TRUE(d.steps[0].wants_logit);
  EXPECT_EQ(d.steps[1].seq, 2);
  EXPECT_EQ(d.steps[1].start, 5);
  EXPECT_EQ(d.steps[1].count, 9);  // the rest of the budget
  EXPECT_FALSE(d.steps[1].wants_logit);
  EXPECT_TRUE(d.admitted.empty());  // no budget left for 3
}

TEST(BatchPolicyTest, InFlightSequencesAreSkippedAndNeverPreempted) {
  BlockLedger ledger(3);
  BatchPolicy policy({.max_batch_tokens = 512, .max_seqs = 8, .max_running = 8});
  ASSERT_TRUE(ledger.Grow(1, 64).ok());
  ASSERT_TRUE(ledger.Grow(2, 64).ok());
  ASSERT_TRUE(ledger.Grow(3, 64).ok());
  // 1 needs a second block (position 64); 3 is younger but in flight; 2 is
  // the youngest eligible victim.
  BatchDecision d = policy.Plan({{1, 64, 65, false}, {2, 63, 64, false}, {3, 63, 64, true}}, {}, &ledger);
  EXPECT_EQ(d.preempted, std::vector<int64_t>{2});
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0].seq, 1);
  EXPECT_EQ(ledger.Table(1).size(), 2u);
  EXPECT_EQ(ledger.Table(2).size(), 0u);
  EXPECT_EQ(ledger.Table(3).size(), 1u);
  EXPECT_TRUE(ledger.CheckConsistency().ok());
}

TEST(BatchPolicyTest, AYoungerSequenceNeverPreemptsAnOlderOne) {
  BlockLedger ledger(2);
  BatchPolicy policy({.max_batch_tokens = 512, .max_seqs = 8, .max_running = 8});
  ASSERT_TRUE(ledger.Grow(1, 64).ok());
  ASSERT_TRUE(ledger.Grow(2, 64).ok());
  // 1 is in flight; 2 needs a block: it waits rather than evict 1.
  BatchDecision d = policy.Plan({{1, 63, 64, true}, {2, 64, 65, false}}, {}, &ledger);
  EXPECT_TRUE(d.steps.empty());
  EXPECT_TRUE(d.preempted.empty());
  EXPECT_EQ(ledger.num_used(), 2);
}

TEST(BatchPolicyTest, NoAdmissionInARoundThatPreempted) {
  BlockLedger ledger(5);
  BatchPolicy policy({.max_batch_tokens = 512, .max_seqs = 8, .max_running = 8});
  ASSERT_TRUE(ledger.Grow(1, 64).ok());
  ASSERT_TRUE(ledger.Grow(2, 64).ok());
  ASSERT_TRUE(ledger.Grow(3, 151).ok());  // 3 blocks; the cache is full
  // 1 needs a block: 3, the youngest, is preempted and frees 3 blocks.
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(1);
  BatchDecision d = policy.Plan({{1, 64, 65, false}, {2, 63, 64, false}, {3, 150, 151, false}},
                                {Waiting(4, 3, &tokens)}, &ledger);
  EXPECT_EQ(d.preempted, std::vector<int64_t>{3});
  ASSERT_EQ(d.steps.size(), 2u);
  EXPECT_EQ(d.steps[0].seq, 1);
  EXPECT_EQ(d.steps[1].seq, 2);
  // 4 would fit now, but a round that preempted admits no one (no thrash).
  EXPECT_EQ(ledger.num_free(), 2);
  EXPECT_TRUE(d.admitted.empty());
}

TEST(BatchPolicyTest, WaitingHeadThatDoesNotFitBlocksTheQueue) {
  BlockLedger ledger(2);
  BatchPolicy policy({.max_batch_tokens = 512, .max_seqs = 8, .max_running = 8});
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(2);
  BatchDecision d = policy.Plan({}, {Waiting(1, 200, &tokens), Waiting(2, 3, &tokens)}, &ledger);
  EXPECT_TRUE(d.steps.empty());  // 1 needs 4 blocks; 2 waits behind it (FCFS)
  EXPECT_EQ(ledger.num_used(), 0);
}

TEST(BatchPolicyTest, SequenceCapAndMaxRunning) {
  BlockLedger ledger(16);
  BatchPolicy policy({.max_batch_tokens = 512, .max_seqs = 8, .max_running = 3});
  std::vector<SeqView> waiting;
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(5);
  for (int i = 1; i <= 5; ++i) waiting.push_back(Waiting(i, 4, &tokens));
  BatchDecision d = policy.Plan({}, waiting, &ledger, /*seq_cap=*/2);
  EXPECT_EQ(d.admitted, (std::vector<int64_t>{1, 2}));
  d = policy.Plan({{1, 4, 5, true}, {2, 4, 5, true}}, {waiting.begin() + 2, waiting.end()}, &ledger);
  EXPECT_EQ(d.admitted, (std::vector<int64_t>{3}));  // max_running 3
}

}  // namespace
}  // namespace spar
