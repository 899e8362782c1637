// spar's cpu engine against transformers 5.17 on the trained tiny GLM-5
// (models/tiny-glm5-chat): goldens written on the GPU host by
// tools/train_tiny/hf_check.py with make_goldens.py's records
// (GlmMoeDsaForCausalLM, float32, eager attention) for real chat prompts,
// two of them arithmetic and three long recall prompts far beyond
// index_topk, so the trained indexer's selections are compared too.
#include <cmath>
#include <map>
#include <set>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

using nlohmann::json;

class TinyChatGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = json::parse(testing::ReadSource("tests/data/goldens/tiny-glm5-chat-" + GetParam() + ".json"));
    EngineOptions eo;
    eo.model.num_blocks = 128;
    auto engine = Engine::Create(testing::SourcePath("models/tiny-glm5-chat/" + GetParam()), eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  static std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

  static double RelLogitError(const std::vector<float>& ours, const std::vector<double>& gold) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < gold.size(); ++i) {
      err = std::max(err, std::fabs(ours[i] - gold[i]));
      scale = std::max(scale, std::fabs(gold[i]));
    }
    return err / scale;
  }

  json golden_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(TinyChatGoldenTest, LogitsMatchTransformers) {
  double worst = 0;
  int longest = 0;
  for (const auto& p : golden_["prompts"]) {
    const auto ids = Ids(p["ids"]);
    longest = std::max<int>(longest, static_cast<int>(ids.size()));
    const int n = static_cast<int>(p["logits"].size());
    auto logits = engine_->PromptLogits({ids}, n);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int i = 0; i < n; ++i) {
      const double e = RelLogitError((*logits)[0][i], p["logits"][i].get<std::vector<double>>());
      worst = std::max(worst, e);
      EXPECT_LE(e, 1e-3) << "prompt of " << ids.size() << " tokens, logits row " << i;
    }
  }
  EXPECT_GT(longest, 12 * engine_->config().index_topk);
  std::cout << GetParam() << ": worst relative logit error " << worst << "\n";
}

TEST_P(TinyChatGoldenTest, TopKSetsMatchTransformers) {
  const int topk = engine_->config().index_topk;
  int compared = 0, sparse = 0;
  for (const auto& p : golden_["prompts"]) {
    const auto ids = Ids(p["ids"]);
    ForwardTrace trace;
    std::vector<std::vector<int32_t>> tables;
    ASSERT_TRUE(engine_->PromptLogits({ids}, 1, &trace, &tables).ok());
    std::map<int32_t, int32_t> pos_of_slot;
    for (size_t b = 0; b < tables[0].size(); ++b) {
      for (int o = 0; o < kCacheBlockTokens; ++o) pos_of_slot[tables[0][b] * kCacheBlockTokens + o] = static_cast<int32_t>(b * kCacheBlockTokens + o);
    }
    for (const auto& t : p["topk"]) {
      const int layer = t["layer"], position = t["position"];
      std::set<int32_t> want;
      for (int v : t["indices"]) want.insert(v);
      std::set<int32_t> got;
      const auto& slots = trace.topk_slots.at(layer);
      for (int j = 0; j < topk; ++j) {
        const int32_t s = slots[static_cast<size_t>(position) * topk + j];
        if (s >= 0) got.insert(pos_of_slot.at(s));
      }
      EXPECT_EQ(got, want) << "layer " << layer << " position " << position << " of " << ids.size();
      ++compared;
      sparse += position >= topk;
    }
  }
  EXPECT_GT(sparse, 10);  // selections that really are a choice of 64 among more
  std::cout << GetParam() << ": " << compared << " top-k sets compared, " << sparse << " of them sparse\n";
}

TEST_P(TinyChatGoldenTest, GreedyContinuationsMatchTransformers) {
  std::vector<GenerationRequest> reqs;
  for (const auto& p : golden_["prompts"]) {
    GenerationRequest r;
    r.prompt = Ids(p["ids"]);
    r.sampling.temperature = 0;
    r.max_tokens = static_cast<int>(p["greedy"].size());
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  auto gens = engine_->Generate(reqs);
  ASSERT_TRUE(gens.ok()) << gens.status();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> got;
    for (const auto& t : (*gens)[i].tokens) got.push_back(t.id);
    EXPECT_EQ(got, Ids(golden_["prompts"][i]["greedy"])) << "prompt " << i;
  }
}

TEST_P(TinyChatGoldenTest, DenseControlMatchesTransformers) {
  const auto& d = golden_["dense_control"];
  const auto ids = Ids(d["ids"]);
  EngineOptions eo;
  eo.model.num_blocks = 128;
  eo.model.index_topk_override = 4096;  // above the sequence: every key selected
  auto dense = Engine::Create(testing::SourcePath("models/tiny-glm5-chat/" + GetParam()), eo);
  ASSERT_TRUE(dense.ok()) << dense.status();
  const int n = static_cast<int>(d["logits"].size());
  auto dl = (*dense)->PromptLogits({ids}, n);
  ASSERT_TRUE(dl.ok()) << dl.status();
  for (int i = 0; i < n; ++i) EXPECT_LE(RelLogitError((*dl)[0][i], d["logits"][i].get<std::vector<double>>()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyChatGoldenTest, ::testing::Values("bf16", "fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace spar
