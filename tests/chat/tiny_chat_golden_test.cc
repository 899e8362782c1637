// spar's cpu engine against transformers 5.17 on the trained tiny GLM-5
// (models/tiny-glm5-chat): goldens written on the GPU host by
// tools/train_tiny/hf_check.py with make_goldens.py's records
// (GlmMoeDsaForCausalLM, float32, eager attention) for real chat prompts,
// two of them arithmetic and three long recall prompts far beyond
// index_topk, so the trained indexer's selections are compared too.
#include <iostream>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/golden_checks.h"
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

  json golden_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(TinyChatGoldenTest, LogitsMatchTransformers) {
  const testing::LogitsComparison r = testing::ExpectPromptLogitsMatch(*engine_, golden_);
  EXPECT_GT(r.longest, 12 * engine_->config().index_topk);
  std::cout << GetParam() << ": worst relative logit error " << r.worst << "\n";
}

TEST_P(TinyChatGoldenTest, TopKSetsMatchTransformers) {
  const testing::TopKComparison r = testing::ExpectTopKSetsMatch(*engine_, golden_);
  EXPECT_GT(r.sparse, 10);  // selections that really are a choice of 64 among more
  std::cout << GetParam() << ": " << r.compared << " top-k sets compared, " << r.sparse << " of them sparse\n";
}

TEST_P(TinyChatGoldenTest, GreedyContinuationsMatchTransformers) {
  testing::ExpectGreedyMatches(*engine_, golden_);
}

TEST_P(TinyChatGoldenTest, DenseControlMatchesTransformers) {
  const auto& d = golden_["dense_control"];
  const auto ids = testing::GoldenIds(d["ids"]);
  EngineOptions eo;
  eo.model.num_blocks = 128;
  eo.model.index_topk_override = 4096;  // above the sequence: every key selected
  auto dense = Engine::Create(testing::SourcePath("models/tiny-glm5-chat/" + GetParam()), eo);
  ASSERT_TRUE(dense.ok()) << dense.status();
  const int n = static_cast<int>(d["logits"].size());
  auto dl = (*dense)->PromptLogits({ids}, n);
  ASSERT_TRUE(dl.ok()) << dl.status();
  for (int i = 0; i < n; ++i) EXPECT_LE(testing::RelLogitError((*dl)[0][i], d["logits"][i].get<std::vector<double>>()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyChatGoldenTest, ::testing::Values("bf16", "fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace spar
