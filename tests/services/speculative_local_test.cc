// The Scheduler with speculative decoding over an in-process pipeline of
// real stage executors (3 stages; the last one runs the MTP layer of a
// make-tiny model whose drafts are often right): outputs equal the
// single-process engine's without speculation (greedy and seeded sampling,
// chunked prefill, preemption, bf16 and FP8, --num-speculative-tokens
// 1..4); stop strings cut mid-draft as without speculation; aborts free
// every block; a scheduler asking for more drafts than the last stage
// serves is refused with a message; prefix caching changes neither the
// outputs nor the drafts; a constrained sequence decodes without drafts
// (its output follows its schema) next to one that speculates.
#include "base/rng.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/scheduler/scheduler.h"
#include "tests/engine/test_util.h"
#include "tests/services/collecting_sink.h"
#include "tests/services/engine_request_params.h"
#include "tests/services/local_pipeline.h"
#include "tests/services/mixed_requests.h"

namespace spar {
namespace {

std::string MtpModel(bool fp8) {
  static std::map<bool, std::string> dirs;
  auto it = dirs.find(fp8);
  if (it != dirs.end()) return it->second;
  MakeTinyOptions o;
  o.seed = 3;
  o.fp8 = fp8;
  o.mtp = true;
  o.predictable = true;
  o.out_dir = testing::TempDir(fp8 ? "spec_local_fp8" : "spec_local_bf16");
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return dirs[fp8] = o.out_dir;
}

struct Harness {
  testing::LocalPipeline* pipeline = nullptr;
  std::unique_ptr<Scheduler> scheduler;
};

Harness Start(const std::string& model, SchedulerOptions so, int stages, int64_t blocks, int k, int worker_k = -1) {
  Harness h;
  auto config = LoadModelConfig(model + "/config.json");
  EXPECT_TRUE(config.ok());
  auto tok = Tokenizer::FromFile(model + "/tokenizer.json");
  EXPECT_TRUE(tok.ok());
  auto p = testing::LocalPipeline::Create(model, stages, blocks, worker_k < 0 ? k : worker_k);
  EXPECT_TRUE(p.ok()) << p.status();
  h.pipeline = p->get();
  so.step_timeout = absl::Seconds(60);
  so.limits.num_speculative_tokens = k;
  h.scheduler = std::make_unique<Scheduler>(so, *config, std::move(*tok), std::move(*p));
  return h;
}

using testing::FromEngineRequest;

TEST(SpeculativeLocalTest, MatchesTheEngineUnderChunkingAndPreemption) {
  for (auto [fp8, ks] : {std::pair{false, std::vector<int>{1, 2, 3, 4}}, std::pair{true, std::vector<int>{2}}}) {
    const std::string model = MtpModel(fp8);
    auto requests = testing::MixedRequests(12, 5);
    auto want = testing::EngineReference(model, requests);
    ASSERT_EQ(want.size(), requests.size());
    for (int k : ks) {
      SchedulerOptions so;
      so.limits.max_batch_tokens = 40;  // long prompts are chunked
      Harness h = Start(model, so, 3, /*blocks=*/8, k);  // too few blocks for all: preemption
      ASSERT_TRUE(h.scheduler->Start().ok());
      std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
      for (const auto& r : requests) {
        sinks.push_back(std::make_shared<testing::CollectingSink>());
        ASSERT_TRUE(h.scheduler->Submit(FromEngineRequest(r), sinks.back()).ok());
      }
      const std::string what = absl::StrCat(fp8 ? "fp8" : "bf16", " k=", k);
      for (size_t i = 0; i < sinks.size(); ++i) {
        ASSERT_TRUE(sinks[i]->Wait()) << what << " request " << i;
        ASSERT_TRUE(sinks[i]->status().ok()) << sinks[i]->status();
        const auto got = sinks[i]->seqs().at(0);
        std::vector<int32_t> ids;
        std::vector<float> lps;
        for (const auto& t : want[i].tokens) {
          ids.push_back(t.id);
          lps.push_back(t.logprob);
        }
        EXPECT_EQ(got.ids, ids) << what << " request " << i;
        EXPECT_EQ(got.logprobs, lps) << what << " request " << i;  // bit-identical
        ASSERT_TRUE(got.finish.has_value());
        EXPECT_EQ(got.finish->reason == SeqFinishReason::kStop, want[i].finish == FinishReason::kStop) << what;
        EXPECT_EQ(sinks[i]->usage()->completion_tokens, static_cast<int>(want[i].tokens.size())) << what;
      }
      const LoadInfo load = h.scheduler->Load();
      EXPECT_EQ(load.core.used_blocks, 0) << what;
      EXPECT_GT(load.core.preemptions, 0u) << what;
      EXPECT_GT(load.core.spec.drafts, 0u) << what;
      EXPECT_GT(load.core.spec.accepted_tokens, 0u) << what;  // drafts were accepted
      for (int i = 0; i < 100 && h.pipeline->sampling_states() > 0; ++i) absl::SleepFor(absl::Milliseconds(20));
      EXPECT_EQ(h.pipeline->sampling_states(), 0u) << what;
    }
  }
}

TEST(SpeculativeLocalTest, StopStringsCutMidDraftAsWithoutSpeculation) {
  const std::string model = MtpModel(false);
  auto run = [&](Harness& h, GenerateParams p) {
    auto sink = std::make_shared<testing::CollectingSink>();
    EXPECT_TRUE(h.scheduler->Submit(std::move(p), sink).ok());
    EXPECT_TRUE(sink->Wait());
    EXPECT_TRUE(sink->status().ok()) << sink->status();
    return sink->seqs().at(0);
  };
  Harness plain = Start(model, SchedulerOptions(), 2, 64, 0);
  Harness spec = Start(model, SchedulerOptions(), 2, 64, 4);
  ASSERT_TRUE(plain.scheduler->Start().ok());
  ASSERT_TRUE(spec.scheduler->Start().ok());
  GenerateParams p;
  p.text = "The capital of France is";
  p.sampling.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  const std::string full = run(plain, p).text;
  EXPECT_EQ(run(spec, p).text, full);
  ASSERT_GE(full.size(), 8u);
  for (size_t at : {full.size() / 3, full.size() / 2, full.size() - 3}) {
    p.stop_strings = {full.substr(at, 2)};
    for (bool include : {false, true}) {
      p.include_stop_strings = include;
      const auto want = run(plain, p);
      const auto got = run(spec, p);
      EXPECT_EQ(got.text, want.text) << "stop at " << at;
      EXPECT_EQ(got.ids, want.ids) << "stop at " << at;
      ASSERT_TRUE(got.finish.has_value());
      EXPECT_EQ(got.finish->reason, SeqFinishReason::kStop);
    }
  }
  EXPECT_EQ(spec.scheduler->Load().core.used_blocks, 0);
  EXPECT_GT(spec.scheduler->Load().core.spec.accepted_tokens, 0u);
}

// Speculation with prefix caching on real stages: requests sharing a
// 140-token prefix (some only its first two blocks, followed by another
// token than the one after them), run one after another so every step's
// draft budget is the same with and without caching. Outputs equal the
// engine without speculation; the later requests share cached blocks, but
// not a block whose next token differs from theirs (it is keyed with the
// token after it, which the MTP layer's last row there reads); the drafts
// verified and accepted are exactly those without caching.
TEST(SpeculativeLocalTest, PrefixCachingChangesNeitherOutputsNorDrafts) {
  const std::string model = MtpModel(false);
  Rng rng(5);
  std::vector<int32_t> prefix(140);
  for (auto& t : prefix) t = static_cast<int32_t>(rng.Below(288));
  std::vector<GenerationRequest> requests = testing::MixedRequests(8, 3);
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest& r = requests[i];
    r.prompt.resize(std::min<size_t>(r.prompt.size(), 12));
    if (i % 3 == 2) r.prompt.insert(r.prompt.begin(), (prefix[128] + 1 + static_cast<int32_t>(i)) % 288);
    r.prompt.insert(r.prompt.begin(), prefix.begin(), prefix.begin() + (i % 3 == 2 ? 128 : 140));
    r.max_tokens = 6 + static_cast<int>(i % 7);
  }
  auto want = testing::EngineReference(model, requests);
  SpecDecodeCounts counts[2];
  for (bool caching : {false, true}) {
    SchedulerOptions so;
    so.enable_prefix_caching = caching;
    Harness h = Start(model, so, 3, /*blocks=*/32, /*k=*/3);
    ASSERT_TRUE(h.scheduler->Start().ok());
    for (size_t i = 0; i < requests.size(); ++i) {
      auto sink = std::make_shared<testing::CollectingSink>();
      ASSERT_TRUE(h.scheduler->Submit(FromEngineRequest(requests[i]), sink).ok());
      ASSERT_TRUE(sink->Wait()) << "request " << i;
      ASSERT_TRUE(sink->status().ok()) << sink->status();
      std::vector<int32_t> ids;
      for (const auto& tok : want[i].tokens) ids.push_back(tok.id);
      EXPECT_EQ(sink->seqs().at(0).ids, ids) << "caching " << caching << " request " << i;
      if (caching && i > 0) {
        EXPECT_EQ(sink->usage()->cached_prompt_tokens, i % 3 == 2 ? kCacheBlockTokens : 2 * kCacheBlockTokens)
            << "request " << i;
      }
    }
    const LoadInfo load = h.scheduler->Load();
    EXPECT_EQ(load.core.used_blocks, 0);
    EXPECT_EQ(load.core.prefix_cache.hits > 0, caching);
    counts[caching] = load.core.spec;
  }
  EXPECT_GT(counts[0].accepted_tokens, 0u);
  EXPECT_EQ(counts[1].drafts, counts[0].drafts);
  EXPECT_EQ(counts[1].draft_tokens, counts[0].draft_tokens);
  EXPECT_EQ(counts[1].accepted_tokens, counts[0].accepted_tokens);
  EXPECT_EQ(counts[1].accepted_per_position, counts[0].accepted_per_position);
}

TEST(SpeculativeLocalTest, AbortInFlightFreesEveryBlock) {
  Harness h = Start(MtpModel(false), SchedulerOptions(), 3, 64, 3);
  ASSERT_TRUE(h.scheduler->Start().ok());
  GenerateParams p;
  p.prompt_ids.assign(61, 9);
  p.max_tokens = 40;
  p.ignore_eos = true;
  p.request_id = "long";
  auto sink = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h.scheduler->Submit(p, sink).ok());
  // Let it decode with drafts for a while, then hold a step in flight.
  for (int i = 0; i < 200 && sink->seqs()[0].ids.size() < 6; ++i) absl::SleepFor(absl::Milliseconds(10));
  h.pipeline->Hold(true);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(h.scheduler->Abort({"long"}), std::vector<std::string>{"long"});
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 0);
  h.pipeline->Hold(false);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(h.scheduler->Load().core.used_blocks, 0);
}

TEST(SpeculativeLocalTest, ConstrainedSequencesDecodeWithoutDrafts) {
  const std::string model = MtpModel(false);
  auto requests = testing::MixedRequests(1, 9);  // greedy
  requests[0].max_tokens = 24;                  // long enough to draft
  auto want = testing::EngineReference(model, requests);
  ASSERT_EQ(want.size(), 1u);
  Harness h = Start(model, SchedulerOptions(), 3, 64, /*k=*/3);
  ASSERT_TRUE(h.scheduler->Start().ok());
  GenerateParams constrained;
  constrained.prompt_ids = {5, 6, 7, 8, 9};
  constrained.max_tokens = 40;
  constrained.constraint = R"({"type": "json_schema", "schema": {"type": "object",
      "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}})";
  auto c_sink = std::make_shared<testing::CollectingSink>();
  auto p_sink = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h.scheduler->Submit(constrained, c_sink).ok());
  ASSERT_TRUE(h.scheduler->Submit(FromEngineRequest(requests[0]), p_sink).ok());
  ASSERT_TRUE(c_sink->Wait());
  ASSERT_TRUE(p_sink->Wait());
  ASSERT_TRUE(c_sink->status().ok()) << c_sink->status();
  ASSERT_TRUE(p_sink->status().ok()) << p_sink->status();
  const auto got = c_sink->seqs().at(0);
  ASSERT_TRUE(got.finish.has_value());
  EXPECT_EQ(got.finish->reason, SeqFinishReason::kStop) << got.text;
  const nlohmann::json parsed = nlohmann::json::parse(got.text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(parsed.is_object()) << got.text;
  ASSERT_TRUE(parsed.contains("a") && parsed["a"].is_number_integer()) << got.text;
  EXPECT_EQ(parsed.size(), 1u) << got.text;
  // The unconstrained sequence speculated and kept its output.
  std::vector<int32_t> ids;
  for (const auto& t : want[0].tokens) ids.push_back(t.id);
  EXPECT_EQ(p_sink->seqs().at(0).ids, ids);
  const LoadInfo load = h.scheduler->Load();
  EXPECT_GT(load.core.spec.drafts, 0u);
  EXPECT_EQ(load.core.used_blocks, 0);
}

TEST(SpeculativeLocalTest, MoreDraftsThanTheLastStageServesIsRefused) {
  Harness h = Start(MtpModel(false), SchedulerOptions(), 2, 64, /*k=*/3, /*worker_k=*/1);
  absl::Status s = h.scheduler->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--num-speculative-tokens 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace spar
