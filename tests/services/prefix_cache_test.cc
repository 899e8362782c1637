// Automatic prefix caching, step by step: the block keys, the pool's
// reference counts and least-recently-used eviction, the ledger's hits,
// commits and tail trims, and the scheduler core sharing cached blocks
// across requests (with the fake pipeline, whose tokens depend on what it
// reads back through each block table, so a wrong share changes outputs):
// outputs equal a run without caching, hits are counted, a shared prefix is
// computed once, under memory pressure, preemption, cancellation and n > 1.
// The randomized (seeded) soak of operations is in speculative_prefix_test.cc
// (without speculation and with it).
#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "services/scheduler/block_hash.h"
#include "services/scheduler/block_ledger.h"
#include "services/scheduler/block_pool.h"
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

PrefixCacheOptions On() { return {true, "test model"}; }

// ---- keys ----

TEST(BlockHashTest, ChainDependsOnSaltParentAndEveryToken) {
  const std::vector<int32_t> block = Tokens(kB, 1);
  const BlockHash root = RootBlockHash("model a");
  EXPECT_EQ(ChainBlockHash(root, block), ChainBlockHash(RootBlockHash("model a"), block));
  EXPECT_FALSE(ChainBlockHash(root, block) == ChainBlockHash(RootBlockHash("model b"), block));
  std::vector<int32_t> other = block;
  other[63] += 1;
  EXPECT_FALSE(ChainBlockHash(root, block) == ChainBlockHash(root, other));
  const BlockHash first = ChainBlockHash(root, block);
  EXPECT_FALSE(ChainBlockHash(first, block) == first);  // same tokens, another position
}

// ---- the pool ----

TEST(BlockPoolTest, FreshBlocksFirstThenLeastRecentlyUsedAndNoDoubleFree) {
  BlockPool pool(3);
  const BlockHash k1 = ChainBlockHash(RootBlockHash(""), Tokens(kB, 1));
  const BlockHash k2 = ChainBlockHash(RootBlockHash(""), Tokens(kB, 2));
  const int32_t a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  EXPECT_EQ((std::vector<int32_t>{a, b, c}), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_TRUE(pool.Publish(a, k1));
  EXPECT_FALSE(pool.Publish(b, k1)) << "one block per content";
  EXPECT_TRUE(pool.Publish(b, k2));
  ASSERT_TRUE(pool.Release(c).ok());
  ASSERT_TRUE(pool.Release(a).ok());  // a before b: a is the least recently used
  ASSERT_TRUE(pool.Release(b).ok());
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.num_evictable(), 2);
  EXPECT_EQ(pool.Release(b).code(), absl::StatusCode::kInternal) << "a double free is an error";
  EXPECT_TRUE(pool.CheckConsistency({0, 0, 0}).ok()) << pool.CheckConsistency({0, 0, 0});
  EXPECT_EQ(*pool.Allocate(), c) << "a block holding nothing reusable goes first";
  EXPECT_EQ(*pool.Allocate(), a) << "then the least recently used cached one";
  EXPECT_EQ(pool.evictions(), 1u);
  EXPECT_FALSE(pool.Lookup(k1).has_value());
  EXPECT_EQ(pool.Lookup(k2), b);
  pool.Acquire(b);  // a hit takes it off the evictable list
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_TRUE(pool.CheckConsistency({1, 1, 1}).ok()) << pool.CheckConsistency({1, 1, 1});
  EXPECT_FALSE(pool.CheckConsistency({1, 2, 1}).ok()) << "a wrong holder count is caught";
  pool.UnpublishAll();
  EXPECT_EQ(pool.num_cached(), 0);
}

// ---- the ledger ----

TEST(PrefixLedgerTest, AdmitSharesFullBlocksButNeverTheLastTokenNorAPartialBlock) {
  BlockLedger ledger(16, On());
  const std::vector<int32_t> t = Tokens(200, 7);
  ASSERT_EQ(*ledger.Admit(1, t, 512), 0);
  ASSERT_EQ(ledger.BlocksOf(1), 4);
  ledger.Commit(1, t, 200);
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3) << "the partial last block is never keyed";
  // The same 192-token prefix, another suffix: three blocks shared.
  const std::vector<int32_t> t2 = Concat({t.begin(), t.begin() + 3 * kB}, Tokens(10, 8));
  ASSERT_EQ(*ledger.Admit(2, t2, 512), 3 * kB);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ledger.Table(2)[i], ledger.Table(1)[i]);
  EXPECT_EQ(ledger.BlocksOf(2), 4);
  // Exactly the cached prefix: its last token is computed, so one block less.
  ASSERT_EQ(*ledger.Admit(3, absl::MakeConstSpan(t).first(3 * kB), 512), 2 * kB);
  // Another first token: nothing.
  std::vector<int32_t> t4 = t;
  t4[0] ^= 1;
  ASSERT_EQ(*ledger.Admit(4, t4, 512), 0);
  const PrefixCacheStats st = ledger.prefix_stats();
  EXPECT_EQ(st.queries, 200u + 202 + 192 + 200);
  EXPECT_EQ(st.hits, 3u * kB + 2 * kB);
  // Blocks held by three tables; freeing 1 gives back only its own.
  EXPECT_EQ(ledger.BlocksFreedBy(1), 1);
  EXPECT_EQ(ledger.num_used(), 4 + 1 + 1 + 4);
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
  for (int64_t s : {1, 2, 3, 4}) ASSERT_TRUE(ledger.Forget(s).ok());
  EXPECT_EQ(ledger.num_used(), 0);
  EXPECT_EQ(ledger.num_free(), 16);
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3) << "freed content stays reusable";
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
}

TEST(PrefixLedgerTest, AdmitIsAllOrNothingCountingHitsItTakes) {
  BlockLedger ledger(4, On());
  const std::vector<int32_t> t = Tokens(3 * kB + 5, 1);
  ASSERT_TRUE(ledger.Admit(1, t, 512).ok());
  ledger.Commit(1, t, static_cast<int64_t>(t.size()));
  ASSERT_TRUE(ledger.Forget(1).ok());  // 3 evictable cached blocks, 1 free
  // 3 hits + 2 new blocks: the hits leave the free count, so this needs 5.
  const std::vector<int32_t> longer = Concat({t.begin(), t.begin() + 3 * kB}, Tokens(2 * kB, 2));
  EXPECT_EQ(ledger.Admit(2, longer, 512).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger.BlocksOf(2), 0);
  EXPECT_EQ(ledger.prefix_stats().hits, 0u) << "a refused admission counts nothing";
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3) << "and evicts nothing";
  // With a budget of one chunk it fits: 3 hits + 1 block.
  EXPECT_EQ(*ledger.Admit(2, longer, kB), 3 * kB);
  EXPECT_EQ(ledger.BlocksOf(2), 4);
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
}

TEST(PrefixLedgerTest, MemoryPressureEvictsTheLeastRecentlyUsedTailFirst) {
  BlockLedger ledger(4, On());
  const std::vector<int32_t> a = Tokens(3 * kB + 1, 1);
  ASSERT_TRUE(ledger.Admit(1, a, 512).ok());
  ledger.Commit(1, a, 3 * kB);
  ASSERT_TRUE(ledger.Forget(1).ok());
  // Two blocks for new content: the one never keyed, then one eviction, of
  // the prefix's tail (released first, so the least recently used).
  ASSERT_TRUE(ledger.Admit(2, Tokens(kB + 1, 9), 512).ok());
  EXPECT_EQ(ledger.prefix_stats().evictions, 1u);
  ASSERT_TRUE(ledger.Forget(2).ok());
  EXPECT_EQ(*ledger.Admit(3, a, 512), 2 * kB) << "the head of the prefix survived";
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
}

TEST(PrefixLedgerTest, TrimTailNeverRewritesASharedBlock) {
  BlockLedger ledger(16, On());
  const std::vector<int32_t> t = Tokens(200, 3);
  ASSERT_TRUE(ledger.Admit(1, t, 512).ok());
  ledger.Commit(1, t, 200);  // blocks 0-2 keyed
  const std::vector<int32_t> t2 = Concat({t.begin(), t.begin() + 3 * kB}, Tokens(40, 4));
  ASSERT_EQ(*ledger.Admit(2, t2, 512), 3 * kB);
  const std::vector<int32_t> shared = ledger.Table(1);
  // 2's end falls inside a block 1 holds too: it is given back, and 2
  // recomputes from that block's start.
  EXPECT_EQ(ledger.TrimTail(2, 150), 2 * kB);
  EXPECT_EQ(ledger.BlocksOf(2), 2);
  EXPECT_EQ(ledger.Table(1), shared);
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3) << "the shared block keeps its content";
  // 1's own last block (partial, never keyed) is its alone: kept.
  EXPECT_EQ(ledger.TrimTail(1, 195), 195);
  EXPECT_EQ(ledger.BlocksOf(1), 4);
  // A boundary trim keeps every full block as it is.
  EXPECT_EQ(ledger.TrimTail(1, 3 * kB), 3 * kB);
  EXPECT_EQ(ledger.BlocksOf(1), 3);
  ASSERT_TRUE(ledger.Forget(2).ok());
  // Now 1 holds block 2 (keyed) alone: trimming into it forgets its key.
  EXPECT_EQ(ledger.TrimTail(1, 2 * kB + 10), 2 * kB + 10);
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 2);
  EXPECT_EQ(ledger.Table(1)[2], shared[2]);
  // The new tail computes and commits again under the new tokens.
  std::vector<int32_t> t1 = {t.begin(), t.begin() + 2 * kB + 10};
  const std::vector<int32_t> more = Tokens(kB, 5);
  t1.insert(t1.end(), more.begin(), more.end());
  ASSERT_TRUE(ledger.Grow(1, static_cast<int64_t>(t1.size())).ok());
  ledger.Commit(1, t1, static_cast<int64_t>(t1.size()));
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 3);
  EXPECT_EQ(*ledger.Admit(3, t1, 512), 3 * kB) << "keyed by the new tokens";
  EXPECT_EQ(*ledger.Admit(4, t, 512), 2 * kB) << "not by the old ones";
  EXPECT_TRUE(ledger.CheckConsistency().ok()) << ledger.CheckConsistency();
}

TEST(PrefixLedgerTest, OffMeansNoKeysNoHitsNoCounts) {
  BlockLedger ledger(8);
  const std::vector<int32_t> t = Tokens(200, 1);
  ASSERT_EQ(*ledger.Admit(1, t, 512), 0);
  ledger.Commit(1, t, 200);
  ASSERT_EQ(*ledger.Admit(2, t, 512), 0);
  EXPECT_EQ(ledger.prefix_stats().queries, 0u);
  EXPECT_EQ(ledger.prefix_stats().cached_blocks, 0);
  EXPECT_TRUE(ledger.CheckConsistency().ok());
}

TEST(PrefixLedgerTest, DroppedContentIsNeverHit) {
  BlockLedger ledger(8, On());
  const std::vector<int32_t> t = Tokens(200, 1);
  ASSERT_TRUE(ledger.Admit(1, t, 512).ok());
  ledger.Commit(1, t, 200);
  ledger.DropCachedContent();
  EXPECT_EQ(*ledger.Admit(2, t, 512), 0);
  EXPECT_TRUE(ledger.CheckConsistency().ok());
}

// ---- the core ----

CoreOptions Opts(int64_t blocks, bool caching, int64_t budget = 512, int in_flight = 1) {
  CoreOptions o = testing::Options(blocks, budget, in_flight);
  o.max_model_len = 8192;
  o.enable_prefix_caching = caching;
  o.prefix_cache_salt = "fake";
  return o;
}

// The output each request would get alone, without caching, in a roomy cache.
std::vector<int32_t> Alone(const SequenceRequest& r) {
  SchedulerCore core(Opts(256, false));
  testing::FakeStages fake(256, kVocab);
  auto id = core.Submit({r});
  EXPECT_TRUE(id.ok()) << id.status();
  return Drive(core, fake).outputs[(*id)[0]];
}

TEST(PrefixCoreTest, ASecondRequestSharingA4kPrefixComputesOnlyItsSuffix) {
  const std::vector<int32_t> prefix = Tokens(4096, 1);
  const SequenceRequest a = Request(Concat(prefix, Tokens(30, 2)), 8, 1);
  const SequenceRequest b = Request(Concat(prefix, Tokens(40, 3)), 8, 2);
  SchedulerCore core(Opts(200, true));
  testing::FakeStages fake(200, kVocab);
  ASSERT_TRUE(core.Submit({a}).ok());
  RunResult ra = Drive(core, fake);
  const CoreStats after_a = core.Stats();
  EXPECT_EQ(after_a.prefill_tokens, 4126u);
  EXPECT_EQ(after_a.prefix_cache.hits, 0u);
  auto id = core.Submit({b});
  ASSERT_TRUE(id.ok());
  std::vector<MicroBatchPlan> plans;
  RunResult rb = Drive(core, fake, [&](const MicroBatchPlan& p) { plans.push_back(p); });
  const CoreStats after_b = core.Stats();
  EXPECT_EQ(after_b.prefill_tokens - after_a.prefill_tokens, 40u) << "only the suffix is computed";
  EXPECT_EQ(after_b.prefix_cache.queries - after_a.prefix_cache.queries, 4136u);
  EXPECT_EQ(after_b.prefix_cache.hits - after_a.prefix_cache.hits, 4096u);
  ASSERT_FALSE(plans.empty());
  const PlannedSequence& first = plans[0].seqs.at(0);
  EXPECT_EQ(first.step.start_pos, 4096);
  EXPECT_EQ(first.step.tokens.size(), 40u);
  ASSERT_TRUE(first.sampling.has_value());
  EXPECT_EQ(first.sampling->cached_tokens, prefix) << "the last stage learns the skipped prompt";
  EXPECT_EQ(rb.outputs[(*id)[0]], Alone(b));
  EXPECT_EQ(ra.outputs.begin()->second, Alone(a));
}

// A mixed workload of shared prefixes (block-aligned or not, identical
// prompts, prompts shorter than a block), in waves, over a pipeline of
// three micro-batches in flight: the same tokens with and without caching.
TEST(PrefixCoreTest, OutputsEqualWithAndWithoutCaching) {
  const std::vector<int32_t> p1 = Tokens(3 * kB, 11), p2 = Tokens(5 * kB + 17, 12);
  std::vector<std::vector<SequenceRequest>> waves(3);
  uint64_t seed = 1;
  for (int w = 0; w < 3; ++w) {
    for (int i = 0; i < 6; ++i) {
      const std::vector<int32_t>& base = i % 2 ? p1 : p2;
      std::vector<int32_t> prompt = Concat(base, Tokens(i % 3 == 0 ? 0 : 1 + 13 * i, 100 + w * 10 + i));
      if (i == 5) prompt = Tokens(20, 7);  // shorter than a block
      waves[w].push_back(Request(prompt, 3 + i, seed++));
    }
  }
  RunResult out[2];
  uint64_t hits = 0;
  for (int caching = 0; caching < 2; ++caching) {
    SchedulerCore core(Opts(64, caching, 200, 3));
    testing::FakeStages fake(64, kVocab);
    for (const auto& wave : waves) {
      for (const auto& r : wave) ASSERT_TRUE(core.Submit({r}).ok());
      RunResult r = Drive(core, fake);
      out[caching].outputs.insert(r.outputs.begin(), r.outputs.end());
    }
    EXPECT_EQ(core.ledger().num_used(), 0);
    hits = core.Stats().prefix_cache.hits;
  }
  EXPECT_EQ(out[1].outputs, out[0].outputs);
  EXPECT_EQ(out[0].outputs.size(), 18u);
  EXPECT_GT(hits, 0u);
}

TEST(PrefixCoreTest, ConcurrentSharersHoldTheSameBlocks) {
  const std::vector<int32_t> prefix = Tokens(4 * kB, 21);
  const SequenceRequest a = Request(Concat(prefix, Tokens(44, 22)), 30, 1);
  const SequenceRequest b = Request(Concat(prefix, Tokens(9, 23)), 5, 2);
  const SequenceRequest c = Request(Concat(prefix, Tokens(70, 24)), 5, 3);
  SchedulerCore core(Opts(64, true));
  testing::FakeStages fake(64, kVocab);
  auto ia = core.Submit({a});
  ASSERT_TRUE(ia.ok());
  std::map<int64_t, std::vector<int32_t>> outputs;
  auto step = [&] {
    auto plan = core.NextMicroBatch(absl::UnixEpoch());
    EXPECT_TRUE(plan.has_value());
    if (!plan) return MicroBatchPlan();
    for (const SeqEvent& e : core.OnResult(fake.Execute(*plan))) {
      if (e.token) outputs[e.seq].push_back(e.token->token);
    }
    return *plan;
  };
  step();  // a's prefill
  auto ib = core.Submit({b});
  auto ic = core.Submit({c});
  ASSERT_TRUE(ib.ok() && ic.ok());
  const MicroBatchPlan together = step();  // a decodes; b and c join, sharing a's prefix
  ASSERT_EQ(together.seqs.size(), 3u);
  for (size_t i = 1; i < 3; ++i) EXPECT_EQ(together.seqs[i].step.start_pos, 4 * kB);
  const std::vector<int32_t>& ta = core.ledger().Table((*ia)[0]);
  for (int64_t s : {(*ib)[0], (*ic)[0]}) {
    EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 4, core.ledger().Table(s).begin()));
  }
  EXPECT_EQ(core.ledger().BlocksFreedBy((*ia)[0]), 1) << "a gives back only its own last block";
  RunResult rest = Drive(core, fake);
  for (auto& [id, toks] : rest.outputs) outputs[id].insert(outputs[id].end(), toks.begin(), toks.end());
  EXPECT_EQ(outputs[(*ia)[0]], Alone(a));
  EXPECT_EQ(outputs[(*ib)[0]], Alone(b));
  EXPECT_EQ(outputs[(*ic)[0]], Alone(c));
  EXPECT_EQ(core.ledger().num_used(), 0);
}

// Few blocks: cached prefixes are evicted to make room, preemption by
// recompute takes place, and a preempted sequence comes back on its own
// cached blocks; outputs stay those of a roomy cache without caching.
TEST(PrefixCoreTest, EvictionAndPreemptionUnderMemoryPressure) {
  const std::vector<int32_t> prefix = Tokens(2 * kB, 31);
  std::vector<SequenceRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = i % 3 == 2 ? Tokens(2 * kB + 5, 40 + i) : Concat(prefix, Tokens(3 + i, 50 + i));
    reqs.push_back(Request(prompt, 70, 60 + i));  // grows into a fourth block
  }
  SchedulerCore tight(Opts(9, true, 512, 2));
  testing::FakeStages fake(9, kVocab);
  std::vector<int64_t> ids;
  for (const auto& r : reqs) {
    auto id = tight.Submit({r});
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back((*id)[0]);
  }
  RunResult got = Drive(tight, fake);
  const CoreStats st = tight.Stats();
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_GT(st.prefix_cache.evictions, 0u);
  EXPECT_GT(st.prefix_cache.hits, 0u);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got.outputs[ids[i]], Alone(reqs[i])) << "request " << i;
  EXPECT_EQ(tight.ledger().num_used(), 0);
  EXPECT_EQ(fake.num_states(), 0u);
}

// A request cancelled while a prefill chunk is in flight: what that chunk
// writes is never shared; the chunks whose results came back are.
TEST(PrefixCoreTest, CancelledMidPrefillLeavesOnlyCompletedChunksCached) {
  const SequenceRequest r = Request(Tokens(5 * kB, 41), 6, 7);
  SchedulerCore core(Opts(32, true, kB, 2));
  testing::FakeStages fake(32, kVocab);
  auto id = core.Submit({r});
  ASSERT_TRUE(id.ok());
  auto chunk1 = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(chunk1.has_value());
  core.OnResult(fake.Execute(*chunk1));
  auto chunk2 = core.NextMicroBatch(absl::UnixEpoch());
  ASSERT_TRUE(chunk2.has_value());
  EXPECT_EQ(chunk2->seqs.at(0).step.start_pos, kB);
  EXPECT_TRUE(core.Finish((*id)[0]));  // the client went away; chunk 2 is still on the wire
  auto again = core.Submit({r});
  ASSERT_TRUE(again.ok());
  std::vector<MicroBatchPlan> plans;
  std::deque<MicroBatchPlan> wire = {*chunk2};
  RunResult out;
  for (int i = 0; i < 1000; ++i) {
    while (auto p = core.NextMicroBatch(absl::UnixEpoch())) {
      plans.push_back(*p);
      wire.push_back(*p);
    }
    if (wire.empty()) break;
    for (const SeqEvent& e : core.OnResult(fake.Execute(wire.front()))) {
      if (e.token) out.outputs[e.seq].push_back(e.token->token);
    }
    wire.pop_front();
    ASSERT_TRUE(core.ledger().CheckConsistency().ok()) << core.ledger().CheckConsistency();
  }
  ASSERT_FALSE(plans.empty());
  ASSERT_FALSE(plans[0].seqs.empty());
  EXPECT_EQ(plans[0].seqs[0].step.seq_id, (*again)[0]);
  EXPECT_EQ(plans[0].seqs[0].step.start_pos, kB) << "only chunk 1 had come back";
  EXPECT_EQ(out.outputs[(*again)[0]], Alone(r));
  EXPECT_EQ(core.ledger().num_used(), 0);
}

// n = 4 sequences of one prompt: the first computes it, the others wait for
// it (without holding up other requests) and start from its blocks.
TEST(PrefixCoreTest, TheNSequencesOfARequestShareThePrompt) {
  const std::vector<int32_t> prompt = Tokens(5 * kB + 20, 51);
  std::vector<SequenceRequest> n4;
  for (int i = 0; i < 4; ++i) n4.push_back(Request(prompt, 6, 100 + i));
  const SequenceRequest other = Request(Tokens(30, 52), 4, 9);
  for (int caching = 0; caching < 2; ++caching) {
    SchedulerCore core(Opts(64, caching, 512));
    testing::FakeStages fake(64, kVocab);
    auto ids = core.Submit(n4);
    auto oid = core.Submit({other});
    ASSERT_TRUE(ids.ok() && oid.ok());
    std::vector<MicroBatchPlan> plans;
    RunResult r = Drive(core, fake, [&](const MicroBatchPlan& p) { plans.push_back(p); });
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.outputs[(*ids)[i]], Alone(n4[i])) << "sequence " << i;
    EXPECT_EQ(r.outputs[(*oid)[0]], Alone(other));
    if (!caching) continue;
    std::set<int64_t> first;
    for (const auto& s : plans[0].seqs) first.insert(s.step.seq_id);
    EXPECT_EQ(first, (std::set<int64_t>{(*ids)[0], (*oid)[0]})) << "the others wait; the other request does not";
    EXPECT_EQ(core.Stats().prefill_tokens, prompt.size() + 3 * 20 + 30) << "the prompt is computed once";
    EXPECT_EQ(core.Stats().prefix_cache.hits, 3u * 5 * kB);
  }
}

}  // namespace
}  // namespace spar
