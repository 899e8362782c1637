// 128K-token contexts on the cpu side: make-tiny writes a model of 131072
// positions that the engine loads, sizes requests by, and runs a decode
// step at position 131071 over a 2048-block table with (cheaply: its blocks
// alias a few physical ones). The cuda backend's long-context tests are in
// long_context_gpu_test.cc.
#include <cmath>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

std::string Model131K() {
  MakeTinyOptions o;
  o.seed = 4;
  o.layers = 1;
  o.max_position_embeddings = 131072;
  o.out_dir = testing::TempDir("long_context_131k");
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

TEST(LongContextTest, MakeTinyWritesA131072PositionModelTheEngineServes) {
  const std::string dir = Model131K();
  auto config = LoadModelConfig(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_position_embeddings, 131072);
  MakeTinyOptions bad;
  bad.max_position_embeddings = -1;
  EXPECT_FALSE(TinyModelConfig(bad).ok());

  EngineOptions eo;
  eo.model.num_blocks = 8;
  eo.cache_dtypes = {LatentFormat::kFp8Ds, IndexerFormat::kBF16};
  auto engine = Engine::Create(dir, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GenerationRequest r;
  r.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  r.max_tokens = 131062;
  EXPECT_TRUE(ValidateRequest(r, (*engine)->config()).ok());
  r.max_tokens = 131063;
  EXPECT_FALSE(ValidateRequest(r, (*engine)->config()).ok());

  // A decode step at the last position, its context 131072 keys through a
  // table of 2048 blocks that repeat the 8 physical ones: the indexer
  // scores every position, the rows land where the table says.
  Model& model = (*engine)->model();
  Backend* backend = model.backend();
  StepPlan fill;
  std::vector<int32_t> table8 = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> prompt(512);
  for (int i = 0; i < 512; ++i) prompt[i] = (i * 37) % 288;
  fill.seqs.push_back({.seq_id = 1, .tokens = prompt, .block_table = table8, .num_logits = 1});
  ASSERT_TRUE(fill.Finalize(0, 131072, 8).ok());
  auto first = model.Forward(fill, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  auto before = backend->ReadCacheBlock(Backend::CacheKind::kLatent, 0, 7);
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<int32_t> table(2048);
  for (int b = 0; b < 2048; ++b) table[b] = b % 8;
  StepPlan far;
  far.seqs.push_back({.seq_id = 2, .start_pos = 131071, .tokens = {42}, .block_table = table, .num_logits = 1});
  ASSERT_TRUE(far.Finalize(0, 131072, 8).ok());
  ForwardTrace trace;
  auto logits = model.Forward(far, nullptr, &trace);
  ASSERT_TRUE(logits.ok()) << logits.status();
  auto host = backend->ToHost(*logits);
  ASSERT_TRUE(host.ok());
  for (float v : *host) ASSERT_TRUE(std::isfinite(v));
  // Every selected position is a slot of the 8 blocks (the position's
  // alias), and the selection is not just the first keys.
  const std::vector<int32_t>& sel = trace.topk_slots.at(0);
  ASSERT_EQ(static_cast<int>(sel.size()), trace.topk);
  for (int32_t slot : sel) {
    EXPECT_GE(slot, 0);
    EXPECT_LT(slot, 8 * 64);
  }
  // The new token's row went to position 131071: block 2047 = physical 7, offset 63.
  auto after = backend->ReadCacheBlock(Backend::CacheKind::kLatent, 0, 7);
  ASSERT_TRUE(after.ok());
  const size_t row = LatentRowBytes(LatentFormat::kFp8Ds);
  EXPECT_TRUE(std::equal(before->begin(), before->begin() + 63 * row, after->begin())) << "only offset 63 changes";
  EXPECT_FALSE(std::equal(before->begin() + 63 * row, before->end(), after->begin() + 63 * row));
}

}  // namespace
}  // namespace spar
