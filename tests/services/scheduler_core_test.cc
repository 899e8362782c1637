// The scheduler's state machine step by step, with a fake pipeline
// (fake_stages.h): chunked prefill under the token budget, KV blocks never
// leaking (finish, abort, preemption), preemption and resume producing the
// same tokens, the admission bound, micro-batches in flight, stop
// conditions, deadlines and sampling-state releases.
#include "services/scheduler/scheduler_core.h"

#include <deque>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "tests/services/core_driver.h"

namespace spar {
namespace {

using testing::Drive;
using testing::kVocab;
using testing::Options;
using testing::RunResult;
using testing::Seq;

int64_t Tokens(const MicroBatchPlan& p) {
  int64_t n = 0;
  for (const auto& s : p.seqs) n += static_cast<int64_t>(s.step.tokens.size());
  return n;
}

TEST(SchedulerCoreTest, ChunkedPrefillRespectsTheTokenBudget) {
  // Budget 16 tokens per micro-batch. A: 40-token prompt, B: 5-token prompt.
  //   mb1: A[0,16)                       (B waits: budget spent)
  //   mb2: A[16,32)
  //   mb3: A[32,40)+logit, B[0,5)+logit  (8 + 5 = 13 tokens)
  //   mb4: A decode, B decode
  SchedulerCore core(Options(64, 16));
  testing::FakeStages fake(64, kVocab);
  auto a = core.Submit({Seq(40, 3, 1)});
  auto b = core.Submit({Seq(5, 3, 2, 1)});
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t A = (*a)[0], B = (*b)[0];
  std::vector<MicroBatchPlan> plans;
  Drive(core, fake, [&](const MicroBatchPlan& p) { plans.push_back(p); });
  ASSERT_GE(plans.size(), 4u);
  for (const auto& p : plans) EXPECT_LE(Tokens(p), 16);
  auto step = [&](size_t mb, size_t i) { return plans[mb].seqs.at(i).step; };
  ASSERT_EQ(plans[0].seqs.size(), 1u);
  EXPECT_EQ(step(0, 0).seq_id, A);
  EXPECT_EQ(step(0, 0).start_pos, 0);
  EXPECT_EQ(step(0, 0).tokens.size(), 16u);
  EXPECT_EQ(step(0, 0).num_logits, 0);
  ASSERT_EQ(plans[1].seqs.size(), 1u);
  EXPECT_EQ(step(1, 0).start_pos, 16);
  EXPECT_EQ(step(1, 0).tokens.size(), 16u);
  ASSERT_EQ(plans[2].seqs.size(), 2u);
  EXPECT_EQ(step(2, 0).seq_id, A);
  EXPECT_EQ(step(2, 0).start_pos, 32);
  EXPECT_EQ(step(2, 0).tokens.size(), 8u);
  EXPECT_EQ(step(2, 0).num_logits, 1);
  EXPECT_EQ(step(2, 1).seq_id, B);
  EXPECT_EQ(step(2, 1).tokens.size(), 5u);
  EXPECT_EQ(step(2, 1).num_logits, 1);
  ASSERT_EQ(plans[3].seqs.size(), 2u);
  EXPECT_EQ(step(3, 0).tokens.size(), 1u);
  EXPECT_EQ(step(3, 1).tokens.size(), 1u);
  // Sampling state rides with each sequence's first chunk only.
  EXPECT_TRUE(plans[0].seqs[0].sampling.has_value());
  EXPECT_FALSE(plans[1].seqs[0].sampling.has_value());
  EXPECT_FALSE(plans[2].seqs[0].sampling.has_value());
  EXPECT_TRUE(plans[2].seqs[1].sampling.has_value());
  // Every table covers the positions of its plan, on every stage alike.
  for (const auto& p : plans) {
    for (const auto& s : p.seqs) {
      EXPECT_GE(static_cast<int64_t>(s.step.block_table.size()) * kCacheBlockTokens,
                s.step.start_pos + static_cast<int64_t>(s.step.tokens.size()));
    }
  }
}

TEST(SchedulerCoreTest, ChunkedOutputEqualsUnchunkedOutput) {
  testing::FakeStages f1(64, kVocab), f2(64, kVocab);
  SchedulerCore chunked(Options(64, 7)), whole(Options(64, 4096));
  for (SchedulerCore* c : {&chunked, &whole}) {
    ASSERT_TRUE(c->Submit({Seq(50, 10, 3)}).ok());
    ASSERT_TRUE(c->Submit({Seq(9, 10, 4, 2)}).ok());
  }
  RunResult a = Drive(chunked, f1), b = Drive(whole, f2);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_GT(a.micro_batches, b.micro_batches);
}

TEST(SchedulerCoreTest, BlocksAreFreeAfterFinish) {
  SchedulerCore core(Options(32));
  testing::FakeStages fake(32, kVocab);
  ASSERT_TRUE(core.Submit({Seq(70, 20, 1), Seq(3, 5, 2, 1)}).ok());
  ASSERT_TRUE(core.Submit({Seq(130, 1, 3, 2)}).ok());
  RunResult r = Drive(core, fake);
  EXPECT_EQ(r.finishes.size(), 3u);
  EXPECT_EQ(core.ledger().num_used(), 0);
  EXPECT_EQ(core.ledger().num_sequences(), 0u);
  EXPECT_TRUE(core.idle());
  // The finished sequences' sampling states were released on the last stage.
  EXPECT_EQ(fake.num_states(), 0u);
}

TEST(SchedulerCoreTest, AbortFreesBlocksAtOnceEvenInFlight) {
  SchedulerCore core(Options(32, 512, 2));
  testing::FakeStages fake(32, kVocab);
  auto ids = core.Submit({Seq(100, 50, 1)});
  ASSERT_TRUE(ids.ok());
  const int64_t s = (*ids)[0];
  auto plan = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(core.ledger().num_used(), 2);  // 100 tokens: 2 blocks
  EXPECT_TRUE(core.Finish(s));             // aborted while in flight
  EXPECT_EQ(core.ledger().num_used(), 0);
  EXPECT_FALSE(core.Finish(s));
  // The late result is ignored; the next plan releases the sampling state.
  EXPECT_TRUE(core.OnResult(fake.Execute(*plan)).empty());
  EXPECT_EQ(fake.num_states(), 1u);
  auto release = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(release.has_value());
  EXPECT_TRUE(release->seqs.empty());
  EXPECT_EQ(release->release, std::vector<int64_t>{s});
  core.OnResult(fake.Execute(*release));
  EXPECT_EQ(fake.num_states(), 0u);
  EXPECT_TRUE(core.idle());
  EXPECT_TRUE(core.ledger().CheckConsistency().ok());
}

TEST(SchedulerCoreTest, PreemptionAndResumeProduceTheSameTokens) {
  // Four sequences growing to 60 + 40 = 100 tokens (2 blocks each) in a
  // cache of 5 blocks: they cannot all run, so some are preempted and later
  // recomputed from prompt + the tokens they had produced.
  auto submit = [](SchedulerCore& c) {
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.Submit({Seq(60, 40, 10 + i, i)}).ok());
  };
  SchedulerCore roomy(Options(64, 512, 2)), tight(Options(5, 512, 2));
  testing::FakeStages f1(64, kVocab), f2(5, kVocab);
  submit(roomy);
  submit(tight);
  RunResult want = Drive(roomy, f1);
  RunResult got = Drive(tight, f2);
  EXPECT_EQ(roomy.Stats().preemptions, 0u);
  EXPECT_GT(tight.Stats().preemptions, 0u);
  ASSERT_EQ(want.outputs.size(), 4u);
  EXPECT_EQ(got.outputs, want.outputs);
  for (const auto& [id, out] : got.outputs) EXPECT_EQ(out.size(), 40u);
  EXPECT_EQ(tight.ledger().num_used(), 0);  // nothing leaked through preemption
  EXPECT_EQ(f2.num_states(), 0u);
}

TEST(SchedulerCoreTest, QueueLimitReturnsResourceExhausted) {
  CoreOptions o = Options(64);
  o.max_waiting = 4;
  SchedulerCore core(o);
  ASSERT_TRUE(core.Submit({Seq(5, 2, 1), Seq(5, 2, 2), Seq(5, 2, 3)}).ok());  // n = 3
  auto full = core.Submit({Seq(5, 2, 4), Seq(5, 2, 5)});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(core.Stats().waiting, 3u);  // all or nothing
  ASSERT_TRUE(core.Submit({Seq(5, 2, 4)}).ok());
  EXPECT_EQ(core.Submit({Seq(5, 2, 5)}).status().code(), absl::StatusCode::kResourceExhausted);
  // Admission to running makes room again.
  ASSERT_TRUE(core.NextMicroBatch(absl::UnixEpoch()).has_value());
  EXPECT_EQ(core.Stats().waiting, 0u);
  EXPECT_TRUE(core.Submit({Seq(5, 2, 5)}).ok());
}

TEST(SchedulerCoreTest, RequestsThatCanNeverRunAreRefused) {
  SchedulerCore core(Options(2));  // 128 token slots
  EXPECT_EQ(core.Submit({Seq(100, 29, 1)}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(core.Submit({Seq(100, 28, 1)}).ok());
  EXPECT_EQ(core.Submit({Seq(4000, 200, 1)}).status().code(), absl::StatusCode::kInvalidArgument);  // > context
  EXPECT_EQ(core.Submit({Seq(0, 5, 1)}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core.Submit({Seq(5, 0, 1)}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchedulerCoreTest, UpToMaxInFlightMicroBatchesEachSequenceInOne) {
  CoreOptions o = Options(64, 512, 3);
  o.balance = true;
  SchedulerCore core(o);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(core.Submit({Seq(8, 4, i, i)}).ok());
  std::vector<MicroBatchPlan> wire;
  while (auto p = core.NextMicroBatch(absl::UnixEpoch())) wire.push_back(*p);
  ASSERT_EQ(wire.size(), 3u);  // one per stage
  std::set<int64_t> seen;
  for (const auto& p : wire) {
    EXPECT_EQ(p.seqs.size(), 2u);  // balanced: ceil(6 / 3)
    for (const auto& s : p.seqs) EXPECT_TRUE(seen.insert(s.step.seq_id).second);
  }
  testing::FakeStages fake(64, kVocab);
  core.OnResult(fake.Execute(wire[0]));
  auto next = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(next.has_value());
  // Only the sequences whose micro-batch came back can run again.
  for (const auto& s : next->seqs) {
    EXPECT_TRUE(s.step.seq_id == wire[0].seqs[0].step.seq_id || s.step.seq_id == wire[0].seqs[1].step.seq_id);
  }
  EXPECT_FALSE(core.NextMicroBatch(absl::UnixEpoch()).has_value());
}

TEST(SchedulerCoreTest, StopTokensEosAndMaxTokens) {
  testing::FakeStages probe_fake(64, kVocab);
  SchedulerCore probe(Options(64));
  ASSERT_TRUE(probe.Submit({Seq(10, 12, 7)}).ok());
  const std::vector<int32_t> all = Drive(probe, probe_fake).outputs.begin()->second;
  ASSERT_EQ(all.size(), 12u);
  const size_t j = 5;
  const size_t first = std::find(all.begin(), all.end(), all[j]) - all.begin();

  auto run = [&](SequenceRequest r, CoreOptions o) {
    SchedulerCore c(o);
    testing::FakeStages f(64, kVocab);
    auto id = c.Submit({r});
    EXPECT_TRUE(id.ok());
    RunResult res = Drive(c, f);
    return std::make_pair(res.outputs[(*id)[0]], res.finishes[(*id)[0]]);
  };
  SequenceRequest r = Seq(10, 12, 7);
  r.stop_token_ids = {all[j]};
  auto [out, fin] = run(r, Options(64));
  EXPECT_EQ(out, std::vector<int32_t>(all.begin(), all.begin() + first));  // the stop id is not output
  EXPECT_EQ(fin.reason, SeqFinishReason::kStop);
  EXPECT_EQ(fin.stop_token, all[j]);
  EXPECT_FALSE(fin.stop_token_is_eos);

  CoreOptions eos = Options(64);
  eos.eos_token_ids = {all[j]};
  r = Seq(10, 12, 7);
  r.ignore_eos = false;
  std::tie(out, fin) = run(r, eos);
  EXPECT_EQ(out.size(), first);
  EXPECT_TRUE(fin.stop_token_is_eos);
  r.ignore_eos = true;
  std::tie(out, fin) = run(r, eos);
  EXPECT_EQ(out, all);
  EXPECT_EQ(fin.reason, SeqFinishReason::kLength);
  EXPECT_EQ(fin.num_output_tokens, 12);
}

TEST(SchedulerCoreTest, DeadlinesExpireAndFreeBlocks) {
  SchedulerCore core(Options(64));
  SequenceRequest r = Seq(10, 100, 1);
  r.deadline = absl::UnixEpoch() + absl::Seconds(5);
  auto id = core.Submit({r});
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(core.NextMicroBatch(absl::UnixEpoch()).has_value());
  EXPECT_TRUE(core.ExpireDeadlines(absl::UnixEpoch() + absl::Seconds(4)).empty());
  auto ev = core.ExpireDeadlines(absl::UnixEpoch() + absl::Seconds(5));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].finish->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(core.ledger().num_used(), 0);
}

TEST(SchedulerCoreTest, FailedMicroBatchFailsItsSequencesOnly) {
  SchedulerCore core(Options(64, 512, 2));
  CoreOptions o;
  ASSERT_TRUE(core.Submit({Seq(10, 5, 1)}).ok());
  auto p1 = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(core.Submit({Seq(10, 5, 2)}).ok());
  auto p2 = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(p1 && p2);
  MicroBatchResult bad;
  bad.id = p1->id;
  bad.status = absl::InternalError("stage 1: boom");
  auto ev = core.OnResult(bad);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].finish->status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(core.Stats().running, 1u);
  auto all = core.FailAll(absl::UnavailableError("pipeline down"));
  EXPECT_EQ(all.size(), 1u);
  EXPECT_TRUE(core.idle());
  EXPECT_EQ(core.ledger().num_used(), 0);
}

}  // namespace
}  // namespace spar
