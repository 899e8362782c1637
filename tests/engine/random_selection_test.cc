// The random-selection control (engine/random_selection.h): a uniform,
// deterministic, batch-independent choice of index_topk causal positions,
// and its ModelOptions switch on the cpu engine.
#include "engine/random_selection.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

std::vector<int32_t> Select(uint64_t seed, int layer, int32_t position, int32_t ctx, int topk) {
  std::vector<int32_t> out(topk, 12345);
  RandomCausalSelection(seed, layer, position, ctx, topk, out.data());
  return out;
}

TEST(RandomSelectionTest, DistinctSortedCausalAndPadded) {
  for (int32_t ctx : {1, 7, 64, 65, 100, 2000}) {
    const auto sel = Select(7, 0, ctx - 1, ctx, 64);
    const int n = std::min(64, ctx);
    for (int i = 0; i < n; ++i) {
      EXPECT_GE(sel[i], 0);
      EXPECT_LT(sel[i], ctx);
      if (i > 0) {
        EXPECT_LT(sel[i - 1], sel[i]) << "ctx " << ctx;
      }
    }
    for (int i = n; i < 64; ++i) EXPECT_EQ(sel[i], -1);
    if (ctx <= 64) {
      for (int i = 0; i < ctx; ++i) EXPECT_EQ(sel[i], i);  // everything visible, like the indexer
    }
  }
}

TEST(RandomSelectionTest, DeterministicPerLayerAndPosition) {
  EXPECT_EQ(Select(1, 2, 500, 501, 64), Select(1, 2, 500, 501, 64));
  EXPECT_NE(Select(1, 2, 500, 501, 64), Select(2, 2, 500, 501, 64));
  EXPECT_NE(Select(1, 2, 500, 501, 64), Select(1, 3, 500, 501, 64));
  EXPECT_NE(Select(1, 2, 500, 501, 64), Select(1, 2, 501, 501, 64));
}

// Every position is chosen with probability topk / ctx.
TEST(RandomSelectionTest, Uniform) {
  const int32_t ctx = 200;
  const int topk = 20, draws = 20000;
  std::vector<int> hits(ctx, 0);
  for (int d = 0; d < draws; ++d) {
    for (int32_t p : Select(99, 0, d, ctx, topk)) ++hits[p];
  }
  const double expect = static_cast<double>(draws) * topk / ctx;  // 2000
  for (int32_t p = 0; p < ctx; ++p) EXPECT_NEAR(hits[p], expect, 5 * std::sqrt(expect)) << "position " << p;
}

TEST(RandomSelectionTest, EngineOptionReplacesTheIndexerOnLongContextsOnly) {
  MakeTinyOptions mo;
  mo.out_dir = testing::TempDir("random_selection");
  ASSERT_TRUE(MakeTinyModel(mo).ok());
  auto engine_with = [&](std::optional<uint64_t> seed) {
    EngineOptions eo;
    eo.model.num_blocks = 16;
    eo.model.random_topk_seed = seed;
    auto e = Engine::Create(mo.out_dir, eo);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  };
  auto indexer = engine_with(std::nullopt);
  auto random_a = engine_with(11);
  auto random_b = engine_with(11);
  const int topk = indexer->config().index_topk;
  std::vector<int32_t> short_prompt, long_prompt;
  for (int i = 0; i < topk; ++i) short_prompt.push_back((i * 37) % 250);
  for (int i = 0; i < 6 * topk; ++i) long_prompt.push_back((i * 53) % 250);
  auto logits = [](Engine& e, const std::vector<int32_t>& p) { return (*e.PromptLogits({p}, 1))[0][0]; };
  // Up to index_topk keys, every key is attended either way.
  EXPECT_EQ(logits(*indexer, short_prompt), logits(*random_a, short_prompt));
  // Beyond it the random selection is another attention pattern, and a reproducible one.
  const auto a = logits(*random_a, long_prompt);
  EXPECT_EQ(a, logits(*random_b, long_prompt));
  const auto b = logits(*indexer, long_prompt);
  double moved = 0;
  for (size_t v = 0; v < a.size(); ++v) moved = std::max<double>(moved, std::fabs(a[v] - b[v]));
  EXPECT_GT(moved, 0.1);
}

}  // namespace
}  // namespace spar
