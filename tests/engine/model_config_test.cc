#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/engine/test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using nlohmann::json;

TEST(ModelConfigTest, ParsesRealGlm5Config) {
  auto c = ParseModelConfig(testing::ReadSource("tests/data/glm5_config.json"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kGlmMoeDsa);
  EXPECT_EQ(c->hidden_size, 6144);
  EXPECT_EQ(c->num_hidden_layers, 78);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->q_lora_rank, 2048);
  EXPECT_EQ(c->kv_lora_rank, 512);
  EXPECT_EQ(c->qk_head_dim(), 256);
  EXPECT_EQ(c->v_head_dim, 256);
  EXPECT_EQ(c->latent_dim(), 576);
  EXPECT_EQ(c->index_n_heads, 32);
  EXPECT_EQ(c->index_head_dim, 128);
  EXPECT_EQ(c->index_topk, 2048);
  EXPECT_EQ(c->mla_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c->indexer_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  EXPECT_EQ(c->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.0625);
  EXPECT_DOUBLE_EQ(c->indexer_weight_scale(), 0.015625);
  EXPECT_EQ(c->n_routed_experts, 256);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->n_group, 1);
  EXPECT_EQ(c->topk_group, 1);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->first_k_dense_replace, 3);
  EXPECT_EQ(c->mlp_layer_types[2], MlpType::kDense);
  EXPECT_EQ(c->mlp_layer_types[3], MlpType::kMoe);
  EXPECT_EQ(c->intermediate_size, 12288);
  EXPECT_EQ(c->moe_intermediate_size, 2048);
  EXPECT_EQ(c->indexer_types.size(), 78u);
  for (IndexerType t : c->indexer_types) EXPECT_EQ(t, IndexerType::kFull);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->vocab_size, 154880);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_EQ(c->pad_token_id, 154820);
  EXPECT_EQ(c->max_position_embeddings, 202752);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  EXPECT_TRUE(c->quant.fp8);
  EXPECT_EQ(c->quant.block_n, 128);
  EXPECT_FALSE(c->quant.ue8m0_scales);
}

TEST(ModelConfigTest, ParsesRealDeepseekV32Config) {
  auto c = ParseModelConfig(testing::ReadSource("tests/data/dsv32_config.json"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kDeepseekV32);
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->num_attention_heads, 128);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->qk_head_dim(), 192);
  EXPECT_EQ(c->index_n_heads, 64);
  EXPECT_EQ(c->indexer_rope_layout, RopeLayout::kHalfSplit);
  EXPECT_EQ(c->mla_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c->rope.type, RopeType::kYarn);
  EXPECT_EQ(c->rope.theta, 1e4);
  EXPECT_EQ(c->rope.factor, 40);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rope.attention_factor, 1.0);
  // 192^-0.5 * (0.1 ln 40 + 1)^2
  EXPECT_NEAR(c->softmax_scale(), 0.135234, 1e-6);
  EXPECT_NEAR(c->indexer_weight_scale(), 0.0110485, 1e-7);
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_EQ(c->intermediate_size, 18432);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_TRUE(c->quant.ue8m0_scales);
}

TEST(ModelConfigTest, Glm52SharedIndexerSchedule) {
  json j = json::parse(testing::ReadSource("tests/data/glm5_config.json"));
  j["index_topk_freq"] = 4;
  j["index_skip_topk_offset"] = 3;
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  // full iff max(i - 2, 0) % 4 == 0: layers 0, 1, 2, 6, 10, ...
  std::vector<int> full;
  for (int i = 0; i < c->num_hidden_layers; ++i) {
    if (c->indexer_types[i] == IndexerType::kFull) full.push_back(i);
  }
  ASSERT_GE(full.size(), 5u);
  EXPECT_EQ(std::vector<int>(full.begin(), full.begin() + 5), (std::vector<int>{0, 1, 2, 6, 10}));
  EXPECT_EQ(full.size(), 21u);
}

TEST(ModelConfigTest, ExplicitIndexerTypesAndNeoxOverride) {
  json j = json::parse(testing::ReadSource("tests/data/glm5_config.json"));
  j["num_hidden_layers"] = 3;
  j["indexer_types"] = {"full", "shared", "full"};
  j["indexer_rope_interleave"] = false;
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->indexer_types[1], IndexerType::kShared);
  EXPECT_EQ(c->indexer_rope_layout, RopeLayout::kHalfSplit);
}

struct BadCase {
  const char* name;
  std::function<void(json&)> mutate;
  const char* must_mention;
};

TEST(ModelConfigTest, BadInputsNameTheField) {
  const std::vector<BadCase> cases = {
      {"unknown model type", [](json& j) { j["model_type"] = "llama"; }, "model_type"},
      {"missing hidden", [](json& j) { j.erase("hidden_size"); }, "hidden_size"},
      {"negative heads", [](json& j) { j["num_attention_heads"] = -4; }, "num_attention_heads"},
      {"string layers", [](json& j) { j["num_hidden_layers"] = "78"; }, "num_hidden_layers"},
      {"null q_lora", [](json& j) { j["q_lora_rank"] = nullptr; }, "q_lora_rank"},
      {"kv heads differ", [](json& j) { j["num_key_value_heads"] = 8; }, "num_key_value_heads"},
      {"group not dividing", [](json& j) { j["n_group"] = 7; }, "n_group"},
      {"topk_group too big", [](json& j) { j["topk_group"] = 2; }, "topk_group"},
      {"too many experts per tok", [](json& j) { j["num_experts_per_tok"] = 300; }, "num_experts_per_tok"},
      {"index dim below rope", [](json& j) { j["index_head_dim"] = 32; }, "index_head_dim"},
      {"odd rope", [](json& j) { j["qk_rope_head_dim"] = 63; }, "qk_rope_head_dim"},
      {"eos outside vocab", [](json& j) { j["eos_token_id"] = {999999}; }, "eos_token_id"},
      {"bad rope type", [](json& j) { j["rope_parameters"]["rope_type"] = "dynamic"; }, "rope_type"},
      {"yarn without factor", [](json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 4096}}; }, "factor"},
      {"block 64", [](json& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; }, "weight_block_size"},
      {"e5m2", [](json& j) { j["quantization_config"]["fmt"] = "e5m2"; }, "fmt"},
      {"bitsandbytes", [](json& j) { j["quantization_config"]["quant_method"] = "bitsandbytes"; }, "quant_method"},
      {"awq without its fields", [](json& j) { j["quantization_config"]["quant_method"] = "awq"; }, "quantization_config.bits"},
      {"mlp types length", [](json& j) { j["mlp_layer_types"] = {"dense"}; }, "mlp_layer_types"},
      {"unknown mlp type", [](json& j) { j["mlp_layer_types"] = json::array(); for (int i = 0; i < 78; ++i) j["mlp_layer_types"].push_back("weird"); }, "mlp_layer_types"},
      {"shared first", [](json& j) { j["num_hidden_layers"] = 2; j["indexer_types"] = {"shared", "full"}; }, "indexer_types"},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"tied", [](json& j) { j["tie_word_embeddings"] = true; }, "tie_word_embeddings"},
      {"non-interleaved mla", [](json& j) { j["rope_interleave"] = false; }, "rope_interleave"},
      {"softmax scoring", [](json& j) { j["scoring_func"] = "softmax"; }, "scoring_func"},
      {"fractional vocab", [](json& j) { j["vocab_size"] = 12.5; }, "vocab_size"},
      // Found by model_config_fuzzer (explore run, 2026-12-07): 40M layers made
      // the per-layer lists allocate ~500 MB before anything was refused.
      {"layers beyond any model", [](json& j) { j["num_hidden_layers"] = 40000000; }, "num_hidden_layers"},
      // Stored as int: 2^32 + 256 would have wrapped to 256 experts.
      {"experts past int", [](json& j) { j["n_routed_experts"] = int64_t{4294967552}; }, "n_routed_experts"},
      {"negative past int", [](json& j) { j["first_k_dense_replace"] = int64_t{-4294967293}; }, "first_k_dense_replace"},
  };
  for (const auto& bad : cases) {
    json j = json::parse(testing::ReadSource("tests/data/glm5_config.json"));
    bad.mutate(j);
    auto c = ParseModelConfig(j.dump());
    ASSERT_FALSE(c.ok()) << bad.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(std::string(c.status().message()).find(bad.must_mention), std::string::npos)
        << bad.name << ": " << c.status();
  }
}

TEST(ModelConfigTest, RejectsNonJson) {
  for (const char* text : {"", "{", "[1,2]", "null", "{\"model_type\": 3}"}) {
    auto c = ParseModelConfig(text);
    EXPECT_FALSE(c.ok()) << text;
  }
}

TEST(ModelConfigTest, SerialisedConfigParsesBack) {
  auto c = ParseModelConfig(testing::ReadSource("tests/data/dsv32_config.json"));
  ASSERT_TRUE(c.ok());
  auto again = ParseModelConfig(ModelConfigToJson(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->hidden_size, c->hidden_size);
  EXPECT_EQ(again->indexer_rope_layout, c->indexer_rope_layout);
  EXPECT_DOUBLE_EQ(again->softmax_scale(), c->softmax_scale());
  EXPECT_EQ(again->quant.ue8m0_scales, true);
  EXPECT_EQ(again->n_group, 8);
}

// DeepSeek-V3.2 reads an indexer on every layer when no schedule is given,
// so shared layers, however the config spelled them, must survive
// ModelConfigToJson (make-tiny's writer) -> parse.
TEST(ModelConfigTest, SharedIndexerLayersOfDeepSeekSurviveTheRoundTrip) {
  const std::vector<std::pair<std::string, json>> schedules = {
      {"indexer_types", json::array({"full", "shared", "full"})},
      {"index_topk_pattern", "FSS"},
      {"index_topk_freq", 2},
  };
  for (const auto& [key, value] : schedules) {
    json j = json::parse(testing::ReadSource("fuzz/corpus/model_config_fuzzer/tiny_dsv32.json"));
    j[key] = value;
    auto c = ParseModelConfig(j.dump());
    ASSERT_TRUE(c.ok()) << key << ": " << c.status();
    ASSERT_NE(std::count(c->indexer_types.begin(), c->indexer_types.end(), IndexerType::kShared), 0) << key;
    auto again = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(again.ok()) << key << ": " << again.status();
    EXPECT_EQ(again->indexer_types, c->indexer_types) << key;
  }
}

}  // namespace
}  // namespace spar
