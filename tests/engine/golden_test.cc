// The cpu engine against Hugging Face transformers: goldens written by
// tools/golden/make_goldens.py (see tests/data/goldens/PROVENANCE.md) from
// GlmMoeDsaForCausalLM / DeepseekV32ForCausalLM in float32, eager attention,
// on the make-tiny checkpoints this test regenerates bit-identically.
#include <cmath>
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"
#include "tests/engine/tiny_variants.h"

namespace spar {
namespace {

using nlohmann::json;

class GoldenTest : public ::testing::TestWithParam<testing::TinyVariant> {
 protected:
  void SetUp() override {
    const testing::TinyVariant v = GetParam();
    golden_ = json::parse(testing::ReadSource(testing::GoldenPath(v)));
    dir_ = testing::MakeTinyVariant(v, "golden_");
    EngineOptions eo;
    eo.model.num_blocks = 64;
    auto engine = Engine::Create(dir_, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  static std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

  // max |a - b| over the row, relative to the largest |logit| of the golden.
  static double RelLogitError(const std::vector<float>& ours, const std::vector<double>& gold) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < gold.size(); ++i) {
      err = std::max(err, std::fabs(ours[i] - gold[i]));
      scale = std::max(scale, std::fabs(gold[i]));
    }
    return err / scale;
  }

  json golden_;
  std::string dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(GoldenTest, LogitsMatchTransformers) {
  double worst = 0;
  for (const auto& p : golden_["prompts"]) {
    const auto ids = Ids(p["ids"]);
    const int n = static_cast<int>(p["logits"].size());
    auto logits = engine_->PromptLogits({ids}, n);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int i = 0; i < n; ++i) {
      const double e = RelLogitError((*logits)[0][i], p["logits"][i].get<std::vector<double>>());
      worst = std::max(worst, e);
      EXPECT_LE(e, 1e-3) << "prompt of " << ids.size() << " tokens, logits row " << i;
    }
  }
  std::cout << GetParam().name << ": worst relative logit error " << worst << "\n";
}

TEST_P(GoldenTest, TopKSetsMatchTransformers) {
  const int topk = engine_->config().index_topk;
  int compared = 0;
  for (const auto& p : golden_["prompts"]) {
    const auto ids = Ids(p["ids"]);
    ForwardTrace trace;
    std::vector<std::vector<int32_t>> tables;
    ASSERT_TRUE(engine_->PromptLogits({ids}, 1, &trace, &tables).ok());
    // slot -> position through the sequence's block table
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
    }
  }
  EXPECT_GT(compared, 20);
}

TEST_P(GoldenTest, GreedyContinuationsMatchTransformers) {
  std::vector<GenerationRequest> reqs;
  for (const auto& p : golden_["prompts"]) {
    GenerationRequest r;
    r.prompt = Ids(p["ids"]);
    r.sampling.temperature = 0;
    r.max_tokens = static_cast<int>(p["greedy"].size());
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  // All prompts in one continuous batch: batching must not change results.
  auto gens = engine_->Generate(reqs);
  ASSERT_TRUE(gens.ok()) << gens.status();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> got;
    for (const auto& t : (*gens)[i].tokens) got.push_back(t.id);
    EXPECT_EQ(got, Ids(golden_["prompts"][i]["greedy"])) << "prompt " << i;
  }
  EXPECT_EQ(engine_->allocator().num_used(), 0);
}

TEST_P(GoldenTest, DenseControlMatchesTransformersAndDiffersFromSparse) {
  const auto& d = golden_["dense_control"];
  const auto ids = Ids(d["ids"]);
  EngineOptions eo;
  eo.model.num_blocks = 64;
  eo.model.index_topk_override = 1024;  // above the sequence: every key selected
  auto dense = Engine::Create(dir_, eo);
  ASSERT_TRUE(dense.ok()) << dense.status();
  const int n = static_cast<int>(d["logits"].size());
  auto dl = (*dense)->PromptLogits({ids}, n);
  auto sl = engine_->PromptLogits({ids}, n);
  ASSERT_TRUE(dl.ok() && sl.ok());
  double moved = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_LE(RelLogitError((*dl)[0][i], d["logits"][i].get<std::vector<double>>()), 1e-3);
    for (size_t v = 0; v < (*dl)[0][i].size(); ++v) moved = std::max<double>(moved, std::fabs((*dl)[0][i][v] - (*sl)[0][i][v]));
  }
  // Sparse attention really changes late logits (transformers: several units).
  EXPECT_GT(moved, 0.5);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, GoldenTest, testing::AllTinyVariants(), testing::TinyVariantTestName);
// The 4-bit checkpoints against transformers on their dequantized weights:
// each variant runs once its fixture is committed (tools/device/goldens.sh
// QUANT_ONLY=1 writes them; see tests/data/goldens/PROVENANCE.md).
INSTANTIATE_TEST_SUITE_P(QuantVariants, GoldenTest, ::testing::ValuesIn(testing::QuantTinyVariantsWithGoldens()),
                         testing::TinyVariantTestName);

TEST(QuantGoldens, ListsTheVariantsStillWithoutFixtures) {
  std::string missing;
  for (const auto& v : testing::QuantTinyVariants()) {
    if (!testing::HasGolden(v)) missing += std::string(" ") + v.name;
  }
  if (!missing.empty()) GTEST_SKIP() << "no transformers goldens yet for:" << missing;
}

}  // namespace
}  // namespace spar
