// Engine behaviour on make-tiny models: decode equals prefill, batching
// does not change results, sparse equals dense up to index_topk, bad input.
#include "engine/engine.h"

#include <cmath>

#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

std::string TinyModel(const std::string& name, ModelArch arch, bool fp8 = false) {
  MakeTinyOptions o;
  o.arch = arch;
  o.fp8 = fp8;
  o.seed = 5;
  o.out_dir = testing::TempDir(name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

std::unique_ptr<Engine> MakeEngine(const std::string& dir, int topk_override = 0) {
  EngineOptions eo;
  eo.model.num_blocks = 64;
  eo.model.index_topk_override = topk_override;
  auto e = Engine::Create(dir, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

class EngineTest : public ::testing::TestWithParam<ModelArch> {};

TEST_P(EngineTest, DecodeStepByStepEqualsPrefill) {
  auto engine = MakeEngine(TinyModel("decode_prefill", GetParam()));
  GenerationRequest r;
  r.prompt = testing::RandomTokens(70, 1);  // beyond index_topk (32): sparse decode
  r.sampling.temperature = 0;
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.top_logprobs = 5;
  auto gen = engine->Generate({r});
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::vector<int32_t> full = r.prompt;
  for (const auto& t : (*gen)[0].tokens) full.push_back(t.id);
  // Prefill of the whole sequence; logits of the positions that produced
  // generated tokens 1..11 (the last token's logits are not needed).
  const int n = r.max_tokens;
  auto logits = engine->PromptLogits({std::vector<int32_t>(full.begin(), full.end() - 1)}, n);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (int i = 0; i < n; ++i) {
    const auto& row = (*logits)[0][i];
    double mx = -1e30, sum = 0;
    for (float v : row) mx = std::max<double>(mx, v);
    for (float v : row) sum += std::exp(v - mx);
    const auto& tok = (*gen)[0].tokens[i];
    for (const auto& [id, lp] : tok.top) {
      EXPECT_NEAR(lp, row[id] - mx - std::log(sum), 1e-4) << "step " << i;
    }
    int argmax = 0;
    for (int v = 1; v < static_cast<int>(row.size()); ++v) if (row[v] > row[argmax]) argmax = v;
    EXPECT_EQ(argmax, tok.id) << "step " << i;
  }
}

TEST_P(EngineTest, MixedBatchEqualsEachSequenceAlone) {
  auto engine = MakeEngine(TinyModel("batch_alone", GetParam()));
  std::vector<std::vector<int32_t>> prompts = {testing::RandomTokens(5, 2), testing::RandomTokens(90, 3),
                                               testing::RandomTokens(33, 4), testing::RandomTokens(150, 5)};
  auto together = engine->PromptLogits(prompts, 3);
  ASSERT_TRUE(together.ok()) << together.status();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = engine->PromptLogits({prompts[i]}, 3);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*together)[i], (*alone)[0]) << "prompt " << i;  // bit-identical
  }
}

TEST_P(EngineTest, SparseEqualsDenseUpToTopkAndDiffersBeyond) {
  const std::string dir = TinyModel("sparse_dense", GetParam());
  auto sparse = MakeEngine(dir);
  auto dense = MakeEngine(dir, /*topk_override=*/1000);
  const int topk = sparse->config().index_topk;
  // Context <= index_topk: identical bits.
  auto short_prompt = testing::RandomTokens(topk, 6);
  auto a = sparse->PromptLogits({short_prompt}, topk);
  auto b = dense->PromptLogits({short_prompt}, topk);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // Well beyond: the late logits move.
  auto long_prompt = testing::RandomTokens(8 * topk, 7);
  auto c = sparse->PromptLogits({long_prompt}, 1);
  auto d = dense->PromptLogits({long_prompt}, 1);
  ASSERT_TRUE(c.ok() && d.ok());
  double moved = 0;
  for (size_t v = 0; v < (*c)[0][0].size(); ++v) moved = std::max<double>(moved, std::fabs((*c)[0][0][v] - (*d)[0][0][v]));
  EXPECT_GT(moved, 0.1);
}

TEST_P(EngineTest, SeededSamplingIsReproducibleAndStopsOnStopTokens) {
  auto engine = MakeEngine(TinyModel("seeded", GetParam()));
  GenerationRequest r;
  r.prompt = testing::RandomTokens(20, 8);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.seed = 42;
  r.max_tokens = 16;
  r.ignore_eos = true;
  auto a = engine->Generate({r});
  auto b = engine->Generate({r, r});
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> ta, tb, tc;
  for (const auto& t : (*a)[0].tokens) ta.push_back(t.id);
  for (const auto& t : (*b)[1].tokens) tb.push_back(t.id);
  EXPECT_EQ(ta, tb);
  ASSERT_EQ(ta.size(), 16u);
  // Stopping on the 4th token's id ends the stream before it.
  GenerationRequest s = r;
  s.stop_token_ids = {ta[3]};
  auto c = engine->Generate({s});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0].finish, FinishReason::kStop);
  EXPECT_EQ((*c)[0].stop_token, ta[3]);
  for (const auto& t : (*c)[0].tokens) tc.push_back(t.id);
  EXPECT_LE(tc.size(), 3u);
  EXPECT_EQ(engine->allocator().num_used(), 0);
}

TEST_P(EngineTest, BadInputIsAClearError) {
  auto engine = MakeEngine(TinyModel("bad_input", GetParam()));
  const auto& c = engine->config();
  auto expect_error = [&](GenerationRequest r, const char* mention) {
    auto g = engine->Generate({r});
    ASSERT_FALSE(g.ok()) << mention;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(g.status().message()).find(mention), std::string::npos) << g.status();
  };
  GenerationRequest ok;
  ok.prompt = {1, 2, 3};
  GenerationRequest r = ok;
  r.prompt = {1, static_cast<int32_t>(c.vocab_size), 3};
  expect_error(r, "vocabulary");
  r = ok;
  r.prompt = {-5};
  expect_error(r, "vocabulary");
  r = ok;
  r.prompt = {};
  expect_error(r, "empty");
  r = ok;
  r.prompt = testing::RandomTokens(static_cast<int>(c.max_position_embeddings), 9);
  expect_error(r, "context");
  r = ok;
  r.max_tokens = 0;
  expect_error(r, "max_tokens");
  r = ok;
  r.sampling.top_p = 0;
  expect_error(r, "top_p");
  EXPECT_FALSE(engine->PromptLogits({{}}, 1).ok());
  // The engine is unaffected.
  ok.max_tokens = 2;
  EXPECT_TRUE(engine->Generate({ok}).ok());
  EXPECT_EQ(engine->allocator().num_used(), 0);
}

TEST(EngineLoadTest, MissingOrCorruptModelIsAnError) {
  EXPECT_FALSE(Engine::Create("/nonexistent/model", EngineOptions()).ok());
  const std::string dir = TinyModel("corrupt", ModelArch::kGlmMoeDsa);
  ASSERT_TRUE(WriteStringToFile(dir + "/model.safetensors", "garbage").ok());
  auto e = Engine::Create(dir, EngineOptions());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("model.safetensors"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Arch, EngineTest, ::testing::Values(ModelArch::kGlmMoeDsa, ModelArch::kDeepseekV32),
                         [](const auto& info) { return info.param == ModelArch::kGlmMoeDsa ? "glm5" : "dsv32"; });

}  // namespace
}  // namespace spar

namespace spar {
namespace {

TEST(SharedIndexerTest, SharedLayersReuseThePreviousFullLayersTopK) {
  MakeTinyOptions o;
  o.arch = ModelArch::kGlmMoeDsa;
  o.layers = 4;
  o.indexer_pattern = "FSFS";
  o.out_dir = testing::TempDir("shared_indexer");
  ASSERT_TRUE(MakeTinyModel(o).ok());
  auto ck = Checkpoint::Open(o.out_dir);
  ASSERT_TRUE(ck.ok());
  EXPECT_FALSE((*ck)->Has("model.layers.1.self_attn.indexer.wk.weight"));  // shared layers carry no indexer
  EXPECT_TRUE((*ck)->Has("model.layers.2.self_attn.indexer.wk.weight"));
  EngineOptions eo;
  eo.model.num_blocks = 16;
  auto engine = Engine::Create(o.out_dir, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ForwardTrace trace;
  ASSERT_TRUE((*engine)->PromptLogits({testing::RandomTokens(120, 11)}, 1, &trace).ok());
  EXPECT_EQ(trace.topk_slots.at(1), trace.topk_slots.at(0));
  EXPECT_EQ(trace.topk_slots.at(3), trace.topk_slots.at(2));
  EXPECT_NE(trace.topk_slots.at(2), trace.topk_slots.at(0));
  // A pipeline stage may not start on a shared layer.
  ModelOptions mo;
  mo.first_layer = 1;
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto stage = Model::Load(o.out_dir, backend->get(), mo);
  ASSERT_FALSE(stage.ok());
  EXPECT_NE(std::string(stage.status().message()).find("shares the top-k"), std::string::npos);
  o.indexer_pattern = "SFFF";
  o.out_dir = testing::TempDir("shared_first");
  EXPECT_FALSE(MakeTinyModel(o).ok());
}

}  // namespace
}  // namespace spar

namespace spar {
namespace {

TEST(EngineMemoryOptions, MaxModelLenBoundsRequestsAndNeedsRoomForOneSequence) {
  const std::string dir = TinyModel("max_model_len", ModelArch::kGlmMoeDsa);
  EngineOptions eo;
  eo.model.num_blocks = 4;  // 256 tokens
  eo.model.max_model_len = 200;
  auto engine = Engine::Create(dir, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->config().max_position_embeddings, 200);
  GenerationRequest r;
  r.prompt = testing::RandomTokens(150, 4);
  r.max_tokens = 60;  // 210 > 200
  r.sampling.temperature = 0;
  EXPECT_FALSE(ValidateRequest(r, (*engine)->config()).ok());
  r.max_tokens = 50;
  EXPECT_TRUE(ValidateRequest(r, (*engine)->config()).ok());
  auto gen = (*engine)->Generate({r});
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_LE((*gen)[0].tokens.size(), 50u);

  eo.model.max_model_len = 1 << 20;  // beyond the model's context
  auto too_long = Engine::Create(dir, eo);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_position_embeddings"), std::string::npos) << too_long.status();

  eo.model.max_model_len = 1000;  // 16 blocks needed, 4 allocated
  auto too_small = Engine::Create(dir, eo);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kResourceExhausted) << too_small.status();
}

}  // namespace
}  // namespace spar
