// The cpu engine against Hugging Face transformers: goldens written by
// tools/golden/make_goldens.py (see tests/data/goldens/PROVENANCE.md) from
// GlmMoeDsaForCausalLM / DeepseekV32ForCausalLM in float32, eager attention,
// on the make-tiny checkpoints this test regenerates bit-identically.
#include <cmath>
#include <iostream>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/golden_checks.h"
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

  json golden_;
  std::string dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(GoldenTest, LogitsMatchTransformers) {
  const testing::LogitsComparison r = testing::ExpectPromptLogitsMatch(*engine_, golden_);
  std::cout << GetParam().name << ": worst relative logit error " << r.worst << "\n";
}

TEST_P(GoldenTest, TopKSetsMatchTransformers) {
  EXPECT_GT(testing::ExpectTopKSetsMatch(*engine_, golden_).compared, 20);
}

TEST_P(GoldenTest, GreedyContinuationsMatchTransformers) {
  testing::ExpectGreedyMatches(*engine_, golden_);
  EXPECT_EQ(engine_->allocator().num_used(), 0);
}

TEST_P(GoldenTest, DenseControlMatchesTransformersAndDiffersFromSparse) {
  const auto& d = golden_["dense_control"];
  const auto ids = testing::GoldenIds(d["ids"]);
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
    EXPECT_LE(testing::RelLogitError((*dl)[0][i], d["logits"][i].get<std::vector<double>>()), 1e-3);
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
