// Speculative decoding and automatic prefix caching together, with the fake
// pipeline (fake_stages.h: its tokens depend on what it reads back through
// each block table, and it checks the MTP layer's cache rows every step):
// a block's key covers the token after it (the MTP layer's row reads it),
// no step writes a block another sequence holds or the cache keyed
// (core_driver.h checks every plan), only accepted tokens get keyed, and
// outputs equal those with neither feature under shared prefixes, n > 1,
// chunking, preemption, cancellation and a randomized (seeded) sequence of
// operations that leaks no block and frees none twice (the ledger soak,
// also without speculation).
#include <algorithm>
#include <deque>
#include <iostream>
#include <map>
#include <set>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "services/scheduler/block_ledger.h"
#include "services/scheduler/scheduler_core.h"
#include "tests/services/core_driver.h"

namespace spar {
namespace {

using testing::Concat;
using testing::Drive;
using testing::kVocab;
using testing::Request;
using testing::RunResult;

constexpr int kB = kCacheBlockTokens;
constexpr auto Tokens = testing::RandomTokens;

CoreOptions Opts(int64_t blocks, int k, bool caching, int64_t budget = 512, int in_flight = 1) {
  CoreOptions o = testing::Options(blocks, budget, in_flight);
  o.max_model_len = 8192;
  o.limits.num_speculative_tokens = k;
  o.enable_prefix_caching = caching;
  o.prefix_cache_salt = "fake";
  return o;
}

// The output a request gets alone with neither feature, in a roomy cache.
std::vector<int32_t> Alone(const SequenceRequest& r) {
  SchedulerCore core(Opts(256, 0, false));
  testing::FakeStages fake(256, kVocab);
  auto id = core.Submit({r});
  EXPECT_TRUE(id.ok()) << id.status();
  return Drive(core, fake).outputs[(*id)[0]];
}

// One micro-batch through the fake pipeline; its events' tokens appended.
std::optional<MicroBatchPlan> Step(SchedulerCore& core, testing::FakeStages& fake,
                                   std::map<int64_t, std::vector<int32_t>>* outputs) {
  auto plan = core.NextMicroBatch(absl::UnixEpoch());
  if (!plan) return plan;
  testing::ExpectWritesOwnBlocks(core, *plan);
  MicroBatchResult r = fake.Execute(*plan);
  EXPECT_TRUE(r.status.ok()) << r.status;
  for (const SeqEvent& e : core.OnResult(r)) {
    if (e.token) (*outputs)[e.seq].push_back(e.token->token);
    if (e.finish) EXPECT_TRUE(e.finish->status.ok()) << e.finish->status;
  }
  EXPECT_TRUE(core.ledger().CheckConsistency().ok()) << core.ledger().CheckConsistency();
  return plan;
}

// ---- the ledger ----

TEST(SpeculativePrefixLedgerTest, ABlockIsKeyedWithTheTokenAfterIt) {
  const std::vector<int32_t> t = Tokens(200, 1);
  for (int lookahead : {0, 1}) {
    BlockLedger ledger(32, {true, "m", lookahead});
    ASSERT_EQ(*ledger.Admit(1, t, 512), 0);
    // 192 tokens known: without lookahead three blocks are keyed; with it the
    // third waits for token 192, which its last MTP row reads.
    ledger.Commit(1, absl::MakeConstSpan(t).first(3 * kB), 3 * kB);
    EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3 - lookahead) << lookahead;
    ledger.Commit(1, t, 200);
    EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3) << lookahead;
    // The same 192 tokens, another token 192: with lookahead the third block
    // is not this sequence's (its MTP row read another token).
    std::vector<int32_t> other = Concat({t.begin(), t.begin() + 3 * kB}, {(t[3 * kB] + 1) % kVocab, 5, 6});
    EXPECT_EQ(*ledger.Admit(2, other, 512), (3 - lookahead) * kB) << lookahead;
    // Token 192 too: all three.
    std::vector<int32_t> same = Concat({t.begin(), t.begin() + 3 * kB + 1}, {7, 8});
    EXPECT_EQ(*ledger.Admit(3, same, 512), 3 * kB) << lookahead;
    // A prompt of exactly 193 tokens: its last is computed, and block 2's key
    // needs token 192 (known): three blocks either way.
    EXPECT_EQ(*ledger.Admit(4, absl::MakeConstSpan(t).first(3 * kB + 1), 512), 3 * kB) << lookahead;
    EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
  }
}

TEST(SpeculativePrefixLedgerTest, AdmissionCoversTheDraftingAndWritesOnlyOwnBlocks) {
  BlockLedger ledger(32, {true, "m", 1});
  const std::vector<int32_t> t = Tokens(200, 2);
  ASSERT_EQ(*ledger.Admit(1, t, 512, /*drafting=*/3), 0);
  EXPECT_EQ(ledger.BlocksOf(1), BlockLedger::BlocksFor(203)) << "the drafting's positions after the last token";
  ledger.Commit(1, t, 199);
  const std::vector<int32_t> t2 = Concat({t.begin(), t.begin() + 3 * kB + 1}, Tokens(30, 3));
  // A first chunk that does not reach the last token does not draft.
  ASSERT_EQ(*ledger.Admit(2, t2, /*max_new=*/10, /*drafting=*/3), 3 * kB);
  EXPECT_EQ(ledger.BlocksOf(2), BlockLedger::BlocksFor(3 * kB + 10));
  EXPECT_TRUE(ledger.CheckWritable(2, 3 * kB, 3 * kB + 10).ok());
  EXPECT_FALSE(ledger.CheckWritable(2, 3 * kB - 1, 3 * kB + 10).ok()) << "a shared block";
  EXPECT_FALSE(ledger.CheckWritable(2, 3 * kB, 4 * kB + 1).ok()) << "past the table";
  ASSERT_TRUE(ledger.Forget(2).ok());
  EXPECT_FALSE(ledger.CheckWritable(1, 2 * kB + 5, 2 * kB + 6).ok()) << "a keyed block, even held alone";
  EXPECT_TRUE(ledger.CheckWritable(1, 3 * kB, 203).ok());
  // Rejected drafts: trimmed to the accepted end, the lookahead blocks go.
  EXPECT_EQ(ledger.TrimTail(1, 199), 199);
  EXPECT_EQ(ledger.BlocksOf(1), BlockLedger::BlocksFor(199));
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
}

// ---- the core ----

// Shared prefixes (block-aligned or not, a shared prompt whose next token
// differs, prompts shorter than a block), n > 1, in waves: every
// combination of speculation (k = 0 .. 4) and caching gives the same tokens.
TEST(SpeculativePrefixCoreTest, OutputsEqualThoseWithNeither) {
  const std::vector<int32_t> p1 = Tokens(3 * kB, 11), p2 = Tokens(5 * kB + 17, 12);
  std::vector<std::vector<std::vector<SequenceRequest>>> waves(3);
  uint64_t seed = 1;
  for (int w = 0; w < 3; ++w) {
    for (int i = 0; i < 6; ++i) {
      const std::vector<int32_t>& base = i % 2 ? p1 : p2;
      std::vector<int32_t> prompt = Concat(base, Tokens(i % 3 == 0 ? 0 : 1 + 13 * i, 100 + w * 10 + i));
      if (i == 5) prompt = Tokens(20, 7);
      const int n = i == 2 ? 3 : 1;
      std::vector<SequenceRequest> req;
      for (int j = 0; j < n; ++j) req.push_back(Request(prompt, 3 + 5 * i, seed++));
      waves[w].push_back(req);
    }
  }
  std::map<int64_t, std::vector<int32_t>> want;
  for (int k = 0; k <= kMaxSpeculativeTokens; ++k) {
    for (bool caching : {false, true}) {
      for (int64_t budget : {200, 48}) {
        SchedulerCore core(Opts(64, k, caching, budget, 3));
        testing::FakeStages fake(64, kVocab);
        std::map<int64_t, std::vector<int32_t>> got;
        for (const auto& wave : waves) {
          for (const auto& r : wave) ASSERT_TRUE(core.Submit(r).ok());
          RunResult res = Drive(core, fake);
          for (const auto& [id, f] : res.finishes) EXPECT_TRUE(f.status.ok()) << f.status;
          got.insert(res.outputs.begin(), res.outputs.end());
        }
        const std::string what = absl::StrCat("k ", k, " caching ", caching, " budget ", budget);
        if (want.empty()) want = got;
        EXPECT_EQ(got, want) << what;
        EXPECT_EQ(core.ledger().num_used(), 0) << what;
        EXPECT_EQ(fake.num_states(), 0u) << what;
        const CoreStats st = core.Stats();
        if (caching) EXPECT_GT(st.prefix_cache.hits, 0u) << what;
        if (k > 0) EXPECT_GT(st.spec.accepted_tokens, 0u) << what;
      }
    }
  }
  EXPECT_EQ(want.size(), 3u * 8);
}

// A decodes with drafts across a block boundary while B, then C, arrive:
// B shares A's prompt and generated tokens up to the block A completed (its
// accepted tokens are keyed), C the same blocks but another token after the
// third, so it shares only two. A keeps speculating on the blocks it shares.
TEST(SpeculativePrefixCoreTest, ASecondRequestSharesAPrefixWhileTheFirstSpeculates) {
  const SequenceRequest a = Request(Tokens(2 * kB + 40, 21), 70, 1);  // decodes into a fourth block
  SchedulerCore core(Opts(64, 3, true));
  testing::FakeStages fake(64, kVocab);
  auto ia = core.Submit({a});
  ASSERT_TRUE(ia.ok());
  std::map<int64_t, std::vector<int32_t>> outputs;
  const int64_t ida = (*ia)[0];
  auto known = [&] { return Concat(a.prompt, core.OutputOf(ida)); };
  int verify_steps = 0;
  while (static_cast<int>(known().size()) < 3 * kB + 8) {
    auto plan = Step(core, fake, &outputs);
    ASSERT_TRUE(plan.has_value());
    verify_steps += plan->seqs.at(0).speculation->num_draft_tokens > 0;
    // A alone: the full blocks below its computed length (the known tokens
    // but the last) whose next token is known are keyed, no more.
    EXPECT_EQ(core.Stats().prefix_cache.cached_blocks, (static_cast<int64_t>(known().size()) - 1) / kB);
  }
  EXPECT_GT(verify_steps, 0);
  const std::vector<int32_t> a_now = known();
  const SequenceRequest b = Request(Concat({a_now.begin(), a_now.begin() + 3 * kB + 3}, Tokens(20, 22)), 12, 2);
  std::vector<int32_t> c_prompt(a_now.begin(), a_now.begin() + 3 * kB);
  c_prompt.push_back((a_now[3 * kB] + 1) % kVocab);
  const SequenceRequest c = Request(Concat(c_prompt, Tokens(9, 23)), 12, 3);
  auto ib = core.Submit({b});
  auto ic = core.Submit({c});
  ASSERT_TRUE(ib.ok() && ic.ok());
  const uint64_t prefill_before = core.Stats().prefill_tokens;
  auto together = Step(core, fake, &outputs);
  ASSERT_TRUE(together.has_value());
  ASSERT_EQ(together->seqs.size(), 3u);
  EXPECT_GT(together->seqs[0].speculation->num_draft_tokens, 0) << "A verifies drafts in the same micro-batch";
  EXPECT_EQ(together->seqs[1].step.start_pos, 3 * kB) << "B shares three blocks, A's generated tokens included";
  EXPECT_EQ(together->seqs[2].step.start_pos, 2 * kB) << "C's token after the third block differs";
  EXPECT_EQ(core.Stats().prefill_tokens - prefill_before, b.prompt.size() - 3 * kB + c.prompt.size() - 2 * kB);
  RunResult rest = Drive(core, fake);
  for (auto& [id, toks] : rest.outputs) outputs[id].insert(outputs[id].end(), toks.begin(), toks.end());
  EXPECT_EQ(outputs[ida], Alone(a));
  EXPECT_EQ(outputs[(*ib)[0]], Alone(b));
  EXPECT_EQ(outputs[(*ic)[0]], Alone(c));
  EXPECT_EQ(core.ledger().num_used(), 0);
  EXPECT_GT(core.Stats().spec.accepted_tokens, 0u);
}

// n = 4 sequences of one prompt under speculation: the first computes the
// prompt, the others start from its blocks and speculate on their own.
TEST(SpeculativePrefixCoreTest, TheNSequencesOfARequestShareThePromptAndSpeculate) {
  const std::vector<int32_t> prompt = Tokens(5 * kB + 20, 51);
  std::vector<SequenceRequest> n4;
  for (int i = 0; i < 4; ++i) n4.push_back(Request(prompt, 30, 100 + i));
  SchedulerCore core(Opts(64, 2, true));
  testing::FakeStages fake(64, kVocab);
  auto ids = core.Submit(n4);
  ASSERT_TRUE(ids.ok());
  RunResult r = Drive(core, fake);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.outputs[(*ids)[i]], Alone(n4[i])) << "sequence " << i;
  EXPECT_EQ(core.Stats().prefill_tokens, prompt.size() + 3 * 20) << "the prompt is computed once";
  EXPECT_EQ(core.Stats().prefix_cache.hits, 3u * 5 * kB);
  EXPECT_GT(core.Stats().spec.accepted_tokens, 0u);
  EXPECT_EQ(core.ledger().num_used(), 0);
}

// The ledger soak, without speculation (k = 0) and with it: a seeded
// sequence of submissions (shared prefixes, n > 1), cancellations (mid-draft
// too), pipeline failures and results over a small cache (preemption,
// eviction). After every operation the ledger is consistent (no block
// leaked, lost or freed twice) and every plan writes only blocks of its
// own; at the end nothing is held; every sequence that finished produced
// the tokens it produces alone with neither feature.
class PrefixCoreSoakTest : public ::testing::TestWithParam<int> {};

TEST_P(PrefixCoreSoakTest, RandomizedOperationsLeakNothingAndChangeNoOutput) {
  const int k = GetParam();
  Rng rng(2024 + k);
  const std::vector<std::vector<int32_t>> bases = {Tokens(3 * kB, 61), Tokens(kB + 30, 62), Tokens(6 * kB, 63)};
  SchedulerCore core(Opts(16, k, true, 150, 2));
  testing::FakeStages fake(16, kVocab);
  std::deque<MicroBatchPlan> wire;
  std::map<int64_t, SequenceRequest> requests;
  std::map<int64_t, std::vector<int32_t>> outputs;
  std::set<int64_t> live, finished;
  auto deliver = [&] {
    MicroBatchResult r = fake.Execute(wire.front());
    EXPECT_TRUE(r.status.ok()) << r.status;
    for (const SeqEvent& e : core.OnResult(r)) {
      if (e.token) outputs[e.seq].push_back(e.token->token);
      if (e.finish) {
        live.erase(e.seq);
        EXPECT_TRUE(e.finish->status.ok()) << e.finish->status;
        if (e.finish->status.ok()) finished.insert(e.seq);
      }
    }
    wire.pop_front();
  };
  uint64_t seed = 1;
  for (int op = 0; op < 600; ++op) {
    const uint64_t what = rng.Below(10);
    if (what < 3 && live.size() < 12) {
      const auto& base = bases[rng.Below(bases.size())];
      std::vector<int32_t> prompt(base.begin(), base.begin() + 1 + rng.Below(base.size()));
      prompt = Concat(prompt, Tokens(static_cast<int>(rng.Below(40)), 1000 + op));
      const int n = 1 + static_cast<int>(rng.Below(3));
      const int max_tokens = 1 + static_cast<int>(rng.Below(rng.Below(4) == 0 ? 120 : 12));
      std::vector<SequenceRequest> seqs;
      for (int i = 0; i < n; ++i) seqs.push_back(Request(prompt, max_tokens, seed++));
      auto ids = core.Submit(seqs);
      if (ids.ok()) {
        for (int i = 0; i < n; ++i) {
          requests[(*ids)[i]] = seqs[i];
          live.insert((*ids)[i]);
        }
      }
    } else if (what == 3 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng.Below(live.size()));
      core.Finish(*it);  // maybe mid-draft, with its verify step on the wire
      live.erase(it);
    } else if (what == 4 && rng.Below(20) == 0) {
      for (const SeqEvent& e : core.FailAll(absl::UnavailableError("pipeline down"))) live.erase(e.seq);
      wire.clear();
    } else {
      while (auto p = core.NextMicroBatch(absl::UnixEpoch())) {
        testing::ExpectWritesOwnBlocks(core, *p);
        wire.push_back(std::move(*p));
      }
      if (!wire.empty()) deliver();
    }
    ASSERT_TRUE(core.ledger().CheckConsistency().ok()) << "op " << op << ": " << core.ledger().CheckConsistency();
  }
  while (!wire.empty()) deliver();
  RunResult rest = Drive(core, fake);
  for (auto& [id, toks] : rest.outputs) outputs[id].insert(outputs[id].end(), toks.begin(), toks.end());
  for (auto& [id, f] : rest.finishes) {
    if (f.status.ok() && live.count(id)) finished.insert(id);
  }
  EXPECT_TRUE(core.idle());
  EXPECT_EQ(core.ledger().num_used(), 0);
  EXPECT_EQ(core.ledger().num_sequences(), 0u);
  const CoreStats st = core.Stats();
  EXPECT_GT(st.prefix_cache.hits, 0u);
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_GT(st.prefix_cache.evictions, 0u);
  if (k > 0) {
    EXPECT_GT(st.spec.accepted_tokens, 0u);
    EXPECT_LT(st.spec.accepted_tokens, st.spec.draft_tokens) << "drafts were rejected too";
  }
  EXPECT_GT(finished.size(), 30u);
  std::cout << "k " << k << ": " << finished.size() << " of " << requests.size() << " sequences finished; "
            << st.prefix_cache.hits << " of " << st.prefix_cache.queries << " looked-up tokens hit, "
            << st.prefix_cache.evictions << " evictions, " << st.preemptions << " preemptions, "
            << st.spec.accepted_tokens << " of " << st.spec.draft_tokens << " drafts accepted\n";
  for (int64_t id : finished) EXPECT_EQ(outputs[id], Alone(requests[id])) << "sequence " << id;
}

INSTANTIATE_TEST_SUITE_P(Drafts, PrefixCoreSoakTest, ::testing::Values(0, 1, 3, 4));

}  // namespace
}  // namespace spar
