// The Scheduler (admission, batching, preemption, text, stop strings,
// aborts, deadlines) over an in-process pipeline of real stage executors
// (3 stages of the make-tiny GLM-5): outputs equal the single-process
// Engine's for the same requests and seeds, under chunked prefill,
// preemption and prefix caching; blocks are freed at once on abort and
// deadline.
#include "services/scheduler/scheduler.h"

#include "base/rng.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/shared_tiny_model.h"
#include "tests/engine/test_util.h"
#include "tests/services/collecting_sink.h"
#include "tests/services/engine_request_params.h"
#include "tests/services/local_pipeline.h"
#include "tests/services/mixed_requests.h"

namespace spar {
namespace {

const std::string& TinyModel() { return testing::SharedTinyModel("sched_local_model", MakeTinyOptions{.seed = 3}); }

struct Harness {
  testing::LocalPipeline* pipeline = nullptr;
  std::unique_ptr<Scheduler> scheduler;
};

Harness Start(SchedulerOptions so, int stages, int64_t blocks) {
  Harness h;
  auto config = LoadModelConfig(TinyModel() + "/config.json");
  EXPECT_TRUE(config.ok());
  auto tok = Tokenizer::FromFile(TinyModel() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok());
  auto p = testing::LocalPipeline::Create(TinyModel(), stages, blocks);
  EXPECT_TRUE(p.ok()) << p.status();
  h.pipeline = p->get();
  so.step_timeout = absl::Seconds(60);
  h.scheduler = std::make_unique<Scheduler>(so, *config, std::move(*tok), std::move(*p));
  EXPECT_TRUE(h.scheduler->Start().ok());
  return h;
}

using testing::FromEngineRequest;

void ExpectSame(const Generation& want, const testing::CollectingSink::Seq& got, size_t i) {
  std::vector<int32_t> ids;
  std::vector<float> lps;
  for (const auto& t : want.tokens) {
    ids.push_back(t.id);
    lps.push_back(t.logprob);
  }
  EXPECT_EQ(got.ids, ids) << "request " << i;
  EXPECT_EQ(got.logprobs, lps) << "request " << i;  // bit-identical
  ASSERT_TRUE(got.finish.has_value()) << "request " << i;
  EXPECT_EQ(got.finish->reason == SeqFinishReason::kStop, want.finish == FinishReason::kStop) << "request " << i;
  if (want.stop_token) {
    EXPECT_EQ(got.finish->eos_token_id.value_or(got.finish->stop_token_id.value_or(-1)), *want.stop_token)
        << "request " << i;
  }
}

TEST(SchedulerLocalTest, MatchesTheEngineUnderChunkingAndPreemption) {
  auto requests = testing::MixedRequests(16, 1);
  auto want = testing::EngineReference(TinyModel(), requests);
  ASSERT_EQ(want.size(), requests.size());
  SchedulerOptions so;
  so.limits.max_batch_tokens = 40;  // long prompts are chunked
  Harness h = Start(so, 3, /*blocks=*/8);  // too few blocks for all: preemption
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (const auto& r : requests) {
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE(h.scheduler->Submit(FromEngineRequest(r), sinks.back()).ok());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait()) << "request " << i;
    ASSERT_TRUE(sinks[i]->status().ok()) << sinks[i]->status();
    ExpectSame(want[i], sinks[i]->seqs().at(0), i);
    EXPECT_EQ(sinks[i]->prompt_infos(), 1);
    ASSERT_TRUE(sinks[i]->usage().has_value());
    EXPECT_EQ(sinks[i]->usage()->completion_tokens, static_cast<int>(want[i].tokens.size()));
  }
  LoadInfo load = h.scheduler->Load();
  EXPECT_GT(load.core.preemptions, 0u);
  EXPECT_EQ(load.core.used_blocks, 0);
  EXPECT_EQ(load.core.running + load.core.waiting, 0u);
  // Finished sequences' sampling states are released on the last stage.
  for (int i = 0; i < 100 && h.pipeline->sampling_states() > 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(h.pipeline->sampling_states(), 0u);
}

// Prefix caching over real stages: requests sharing prefixes (chat turns
// resending a conversation), in two waves so the second shares what the
// first computed, greedy and seeded (penalties included: the last stage's
// history must hold the skipped prompt), chunked prefill, n = 2:
// bit-identical to the single-process engine with caching on and off, and
// with it on the second wave computes little more than its suffixes.
TEST(SchedulerLocalTest, SharedPrefixesMatchTheEngineWithAndWithoutCaching) {
  Rng rng(5);
  std::vector<int32_t> prefix(140);
  for (auto& t : prefix) t = static_cast<int32_t>(rng.Below(288));
  std::vector<std::vector<GenerationRequest>> waves(2);
  auto base = testing::MixedRequests(6, 3);
  for (size_t i = 0; i < base.size(); ++i) {
    GenerationRequest r = base[i];
    r.prompt.resize(std::min<size_t>(r.prompt.size(), 12));
    r.prompt.insert(r.prompt.begin(), prefix.begin(), prefix.begin() + (i % 2 ? 140 : 128));
    r.max_tokens = 1 + static_cast<int>(i % 5);
    waves[i / 3].push_back(r);
  }
  std::vector<GenerationRequest> all = waves[0];
  all.insert(all.end(), waves[1].begin(), waves[1].end());
  auto want = testing::EngineReference(TinyModel(), all);
  GenerateParams n2 = FromEngineRequest(all[1]);
  n2.n = 2;
  std::vector<GenerationRequest> siblings = {all[1], all[1]};
  siblings[1].seed = *all[1].seed + 1;
  auto want_n2 = testing::EngineReference(TinyModel(), siblings);
  for (bool caching : {true, false}) {
    SchedulerOptions so;
    so.enable_prefix_caching = caching;
    so.limits.max_batch_tokens = 100;
    Harness h = Start(so, 3, /*blocks=*/10);
    size_t next = 0;
    uint64_t prompt_tokens = 0;
    for (const auto& wave : waves) {
      std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
      for (const auto& r : wave) {
        sinks.push_back(std::make_shared<testing::CollectingSink>());
        ASSERT_TRUE(h.scheduler->Submit(FromEngineRequest(r), sinks.back()).ok());
        prompt_tokens += r.prompt.size();
      }
      const uint64_t before = h.scheduler->Load().core.prefill_tokens;
      for (size_t i = 0; i < sinks.size(); ++i, ++next) {
        ASSERT_TRUE(sinks[i]->Wait()) << "request " << next;
        ASSERT_TRUE(sinks[i]->status().ok()) << sinks[i]->status();
        ExpectSame(want[next], sinks[i]->seqs().at(0), next);
        EXPECT_EQ(sinks[i]->usage()->cached_prompt_tokens % kCacheBlockTokens, 0);
      }
      if (caching && &wave == &waves[1]) {
        EXPECT_LT(h.scheduler->Load().core.prefill_tokens - before, prompt_tokens / 2)
            << "the second wave shares the prefix the first computed";
      }
    }
    auto sink = std::make_shared<testing::CollectingSink>();
    ASSERT_TRUE(h.scheduler->Submit(n2, sink).ok());
    ASSERT_TRUE(sink->Wait());
    ASSERT_TRUE(sink->status().ok()) << sink->status();
    for (int i = 0; i < 2; ++i) ExpectSame(want_n2[i], sink->seqs().at(i), 100 + i);
    const LoadInfo load = h.scheduler->Load();
    EXPECT_EQ(load.core.used_blocks, 0);
    EXPECT_EQ(load.prefix_caching, caching);
    if (caching) {
      EXPECT_GT(load.core.prefix_cache.hits, 0u);
      EXPECT_GT(load.core.prefix_cache.queries, load.core.prefix_cache.hits);
      // This prompt ran before: the first sequence shares all its full blocks.
      EXPECT_EQ(sink->usage()->cached_prompt_tokens, (all[1].prompt.size() - 1) / kCacheBlockTokens * kCacheBlockTokens);
    } else {
      EXPECT_EQ(load.core.prefix_cache.queries, 0u);
      EXPECT_EQ(sink->usage()->cached_prompt_tokens, 0);
    }
    EXPECT_EQ(load.cache_dtype, "fp32/fp32,fp32/fp32,fp32/fp32");
  }
}

TEST(SchedulerLocalTest, TextStopStringsAndSeveralSequences) {
  Harness h = Start(SchedulerOptions(), 2, 64);
  auto run = [&](GenerateParams p) {
    auto sink = std::make_shared<testing::CollectingSink>();
    auto id = h.scheduler->Submit(std::move(p), sink);
    EXPECT_TRUE(id.ok()) << id.status();
    EXPECT_TRUE(sink->Wait());
    EXPECT_TRUE(sink->status().ok()) << sink->status();
    return sink;
  };
  GenerateParams p;
  p.text = "The capital of France is";
  p.sampling.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  const std::string full = run(p)->seqs().at(0).text;
  ASSERT_GE(full.size(), 6u);
  // Stop on a piece of the middle of that text: output ends right before it.
  const std::string stop = full.substr(full.size() / 2, 2);
  const std::string before = full.substr(0, full.find(stop));
  p.stop_strings = {stop};
  auto stopped = run(p);
  EXPECT_EQ(stopped->seqs().at(0).text, before);
  ASSERT_TRUE(stopped->seqs().at(0).finish.has_value());
  EXPECT_EQ(stopped->seqs().at(0).finish->reason, SeqFinishReason::kStop);
  EXPECT_EQ(stopped->seqs().at(0).finish->stop_string, stop);
  p.include_stop_strings = true;
  EXPECT_EQ(run(p)->seqs().at(0).text, before + stop);

  // n = 3 seeded: sequence i is the engine's output with seed + i.
  GenerateParams n3;
  n3.prompt_ids = {5, 6, 7, 8};
  n3.sampling.temperature = 0.9f;
  n3.seed = 77;
  n3.n = 3;
  n3.max_tokens = 8;
  n3.ignore_eos = true;
  n3.output_logprobs = true;
  auto sink = run(n3);
  std::vector<GenerationRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].prompt = n3.prompt_ids;
    reqs[i].sampling = n3.sampling;
    reqs[i].seed = 77 + i;
    reqs[i].max_tokens = 8;
    reqs[i].ignore_eos = true;
  }
  auto want = testing::EngineReference(TinyModel(), reqs);
  ASSERT_EQ(sink->seqs().size(), 3u);
  for (int i = 0; i < 3; ++i) ExpectSame(want[i], sink->seqs().at(i), i);
  EXPECT_EQ(sink->usage()->completion_tokens, 24);
}

TEST(SchedulerLocalTest, AbortAndClientGoneFreeBlocksAtOnce) {
  Harness h = Start(SchedulerOptions(), 3, 64);
  h.pipeline->Hold(true);
  GenerateParams p;
  p.prompt_ids.assign(130, 9);  // 3 blocks
  p.max_tokens = 50;
  p.request_id = "long";
  auto sink = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h.scheduler->Submit(p, sink).ok());
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 3);
  EXPECT_EQ(h.scheduler->Abort({"long", "unknown"}), std::vector<std::string>{"long"});
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 0);  // at once, while in flight
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kCancelled);

  p.request_id = "gone";
  auto sink2 = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h.scheduler->Submit(p, sink2).ok());
  h.scheduler->Cancel("gone");
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 0);
  h.pipeline->Hold(false);
  // The pipeline still works afterwards.
  p.request_id = "";
  p.max_tokens = 3;
  auto sink3 = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h.scheduler->Submit(p, sink3).ok());
  ASSERT_TRUE(sink3->Wait());
  EXPECT_TRUE(sink3->status().ok());
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 0);
}

TEST(SchedulerLocalTest, QueueLimitDeadlinesAndBadRequests) {
  SchedulerOptions so;
  so.max_waiting = 3;
  so.max_in_flight = 1;
  so.limits.max_seqs = 1;
  so.balance = false;
  Harness h = Start(so, 1, 64);
  h.pipeline->Hold(true);
  GenerateParams p;
  p.prompt_ids = {1, 2, 3};
  p.max_tokens = 2;
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  absl::Status last;
  for (int i = 0; i < 5 && last.ok(); ++i) {
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    last = h.scheduler->Submit(p, sinks.back()).status();
  }
  // One in flight + 3 waiting fit; the fifth is refused.
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_EQ(sinks.size(), 5u);
  sinks.pop_back();

  GenerateParams late = p;
  late.deadline = absl::Now() - absl::Milliseconds(1);
  p.request_id = "dup";
  auto dup_sink = std::make_shared<testing::CollectingSink>();
  h.pipeline->Hold(false);
  for (auto& s : sinks) ASSERT_TRUE(s->Wait());
  ASSERT_TRUE(h.scheduler->Submit(p, dup_sink).ok());
  EXPECT_EQ(h.scheduler->Submit(p, std::make_shared<testing::CollectingSink>()).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto late_sink = std::make_shared<testing::CollectingSink>();
  h.pipeline->Hold(true);
  ASSERT_TRUE(h.scheduler->Submit(late, late_sink).ok());
  ASSERT_TRUE(late_sink->Wait(absl::Seconds(10)));
  EXPECT_EQ(late_sink->status().code(), absl::StatusCode::kDeadlineExceeded);
  h.pipeline->Hold(false);

  GenerateParams too_long;
  too_long.prompt_ids.assign(4000, 1);
  too_long.max_tokens = 200;
  auto s = h.scheduler->Submit(too_long, std::make_shared<testing::CollectingSink>()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("stopping.max_tokens"), std::string::npos) << s;
  ASSERT_TRUE(dup_sink->Wait());
}

}  // namespace
}  // namespace spar
