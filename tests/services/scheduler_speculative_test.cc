// The scheduler core under speculative decoding, step by step with the fake
// pipeline (fake_stages.h, which accepts some drafts and rejects others):
// outputs equal those without speculation under chunked prefill, budgets,
// micro-batches in flight and preemption; plans carry 1 + d tokens with
// d never past max_tokens, the drafting's lookahead is in the block table
// and trimmed back afterwards; stop tokens mid-draft end the sequence
// there; a result that does not match its plan is an error; counters.
#include <algorithm>
#include <deque>
#include <map>

#include "gtest/gtest.h"
#include "services/scheduler/scheduler_core.h"
#include "tests/services/core_driver.h"
#include "tests/services/fake_stages.h"

namespace spar {
namespace {

using testing::kVocab;
using testing::RunResult;
using testing::Seq;

CoreOptions Options(int64_t blocks, int k, int64_t budget = 512, int in_flight = 1, bool prefix_caching = true) {
  CoreOptions o = testing::Options(blocks, budget, in_flight);
  o.limits.num_speculative_tokens = k;
  o.enable_prefix_caching = prefix_caching;
  return o;
}

// testing::Drive (which checks the ledger and every plan's writes) with the
// plans' speculation invariants checked and no sequence failing.
RunResult Drive(SchedulerCore& core, testing::FakeStages& fake, int k) {
  RunResult out = testing::Drive(core, fake, [&](const MicroBatchPlan& plan) {
    for (const PlannedSequence& p : plan.seqs) {
      EXPECT_EQ(p.speculation.has_value(), k > 0);
      if (!p.speculation) continue;
      const int d = p.speculation->num_draft_tokens;
      EXPECT_LE(d, k);
      EXPECT_LE(p.speculation->num_drafts_wanted, k);
      EXPECT_EQ(p.step.num_logits, p.step.num_logits == 0 ? 0 : d + 1);
      EXPECT_EQ(p.speculation->next_token.has_value(), p.step.num_logits == 0);
    }
  });
  for (const auto& [id, f] : out.finishes) {
    if (!f.status.ok()) ADD_FAILURE() << "seq " << id << ": " << f.status;
  }
  return out;
}

std::vector<SequenceRequest> Workload() {
  std::vector<SequenceRequest> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(Seq(5 + 23 * i, 1 + 7 * i, 50 + i, i));  // max_tokens 1 .. 36
  return rs;
}

RunResult RunWorkload(const CoreOptions& o, int k, uint64_t* accepted = nullptr) {
  SchedulerCore core(o);
  testing::FakeStages fake(o.num_blocks, kVocab);
  for (const SequenceRequest& r : Workload()) EXPECT_TRUE(core.Submit({r}).ok());
  RunResult res = Drive(core, fake, k);
  EXPECT_EQ(core.ledger().num_used(), 0);
  EXPECT_EQ(fake.num_states(), 0u);
  if (accepted != nullptr) *accepted = core.Stats().spec.accepted_tokens;
  return res;
}

TEST(SchedulerSpeculativeTest, OutputsEqualThoseWithoutSpeculation) {
  const RunResult want = RunWorkload(Options(64, 0), 0);
  for (int k = 1; k <= kMaxSpeculativeTokens; ++k) {
    for (const CoreOptions& o : {Options(64, k), Options(64, k, /*budget=*/20), Options(64, k, 512, /*in_flight=*/3),
                                 Options(/*blocks=*/4, k)}) {  // 4 blocks: preemption
      uint64_t accepted = 0;
      const RunResult got = RunWorkload(o, k, &accepted);
      EXPECT_EQ(got.outputs, want.outputs) << "k " << k << " budget " << o.limits.max_batch_tokens << " blocks "
                                           << o.num_blocks;
      EXPECT_GT(accepted, 0u) << "k " << k;
      for (const auto& [id, f] : got.finishes) EXPECT_EQ(f.reason, SeqFinishReason::kLength);
    }
  }
}

TEST(SchedulerSpeculativeTest, StepsVerifyDraftsAndTrimTheirBlocks) {
  SchedulerCore core(Options(64, 3));
  testing::FakeStages fake(64, kVocab);
  auto id = core.Submit({Seq(62, 9, 7)});  // the drafting crosses into the second block
  ASSERT_TRUE(id.ok());
  int produced = 0, verify_steps = 0;
  for (int step = 0; step < 20; ++step) {
    auto plan = core.NextMicroBatch(absl::UnixEpoch());
    if (!plan) break;
    if (plan->seqs.empty()) {  // the finished sequence's release
      core.OnResult(fake.Execute(*plan));
      continue;
    }
    ASSERT_EQ(plan->seqs.size(), 1u);
    const PlannedSequence& p = plan->seqs[0];
    const int d = p.speculation->num_draft_tokens;
    verify_steps += d > 0;
    // A step never verifies more drafts than max_tokens leaves room for.
    EXPECT_LE(produced + d + 1, 9);
    // Its table covers the step and the drafting after it.
    const int64_t end = p.step.start_pos + static_cast<int64_t>(p.step.tokens.size());
    EXPECT_GE(static_cast<int64_t>(p.step.block_table.size()) * kCacheBlockTokens,
              end + std::max(p.speculation->num_drafts_wanted - 1, 0));
    MicroBatchResult r = fake.Execute(*plan);
    ASSERT_TRUE(r.status.ok()) << r.status;
    for (const SeqEvent& e : core.OnResult(r)) produced += e.token.has_value();
    // Afterwards the table covers exactly the cached positions.
    if (core.Has((*id)[0])) {
      ASSERT_EQ(r.speculation.size(), 1u);
      const int64_t cached = p.step.start_pos + static_cast<int64_t>(p.step.tokens.size()) - d + r.speculation[0].num_accepted;
      EXPECT_EQ(core.ledger().BlocksOf((*id)[0]), BlockLedger::BlocksFor(cached));
    }
  }
  EXPECT_EQ(produced, 9);
  EXPECT_GT(verify_steps, 0);
  const SpecDecodeCounts st = core.Stats().spec;
  EXPECT_EQ(st.drafts, static_cast<uint64_t>(verify_steps));
  EXPECT_LE(st.accepted_tokens, st.draft_tokens);
  EXPECT_GE(st.accepted_per_position[0], st.accepted_per_position[1]);
  EXPECT_EQ(core.ledger().num_used(), 0);
}

TEST(SchedulerSpeculativeTest, AStopTokenMidDraftEndsTheSequenceThere) {
  const RunResult all = RunWorkload(Options(64, 0), 0);
  const std::vector<int32_t>& out = all.outputs.at(6);  // the longest (max_tokens 36)
  const int32_t stop = out[20];
  const size_t first = std::find(out.begin(), out.end(), stop) - out.begin();
  SchedulerCore core(Options(64, 4));
  testing::FakeStages fake(64, kVocab);
  for (const SequenceRequest& r : Workload()) {
    SequenceRequest s = r;
    s.stop_token_ids = {stop};
    ASSERT_TRUE(core.Submit({s}).ok());
  }
  RunResult got = Drive(core, fake, 4);
  EXPECT_EQ(got.outputs[6], std::vector<int32_t>(out.begin(), out.begin() + first));
  EXPECT_EQ(got.finishes[6].reason, SeqFinishReason::kStop);
  EXPECT_EQ(core.ledger().num_used(), 0);
}

TEST(SchedulerSpeculativeTest, AResultThatDoesNotMatchItsPlanIsAnError) {
  SchedulerCore core(Options(64, 2));
  testing::FakeStages fake(64, kVocab);
  ASSERT_TRUE(core.Submit({Seq(10, 20, 3)}).ok());
  // Prefill, then a verify step with two drafts.
  for (int i = 0; i < 2; ++i) {
    auto plan = core.NextMicroBatch(absl::UnixEpoch());
    ASSERT_TRUE(plan);
    MicroBatchResult r = fake.Execute(*plan);
    if (i == 1) {
      ASSERT_EQ(plan->seqs[0].speculation->num_draft_tokens, 2);
      // Four tokens for two drafts: impossible.
      while (r.tokens.size() < 4) r.tokens.push_back(r.tokens.back());
      auto ev = core.OnResult(r);
      ASSERT_FALSE(ev.empty());
      ASSERT_TRUE(ev.back().finish.has_value());
      EXPECT_EQ(ev.back().finish->status.code(), absl::StatusCode::kInternal) << ev.back().finish->status;
    } else {
      core.OnResult(r);
    }
  }
  EXPECT_EQ(core.ledger().num_used(), 0);
}

}  // namespace
}  // namespace spar
