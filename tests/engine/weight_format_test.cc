// 4-bit quantization configs as the tools write them (AutoAWQ, AutoGPTQ /
// GPTQModel, llm-compressor, ModelOpt): what each parses to, which modules
// it converts, and the clear refusal of every variant spar does not read.
#include "engine/weight_format.h"

#include <sys/stat.h>

#include "base/mapped_file.h"
#include "engine/model_config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

using json = nlohmann::json;

// GLM-5's real config.json with `quant` as its quantization_config.
std::string Glm5ConfigWith(const json& quant) {
  json c = json::parse(testing::ReadSource("tests/data/glm5_config.json"));
  c["quantization_config"] = quant;
  return c.dump();
}

const json kAwq = json::parse(R"({
  "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm",
  "modules_to_not_convert": ["self_attn.indexer", "kv_b_proj"]})");

const json kGptqV1 = json::parse(R"({
  "bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": false, "static_groups": false,
  "sym": true, "true_sequential": true, "model_name_or_path": null, "model_file_base_name": "model",
  "quant_method": "gptq", "checkpoint_format": "gptq"})");

const json kGptqV2 = json::parse(R"({
  "bits": 4, "group_size": -1, "desc_act": false, "sym": false, "lm_head": false, "quant_method": "gptq",
  "checkpoint_format": "gptq_v2", "pack_dtype": "int32", "meta": {"quantizer": ["gptqmodel:2.2.0"]}})");

// llm-compressor's W4A16 preset as saved.
const json kCt = json::parse(R"({
  "config_groups": {"group_0": {"input_activations": null, "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 128, "num_bits": 4,
                "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": true, "type": "int"}}},
  "format": "pack-quantized", "global_compression_ratio": null,
  "ignore": ["lm_head", "re:.*mlp\\.gate$", "re:.*self_attn\\.indexer\\..*"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
  "sparsity_config": {}, "transform_config": {}, "version": "0.12.2"})");

// As nvidia/DeepSeek-R1-NVFP4 ships it (exclude list shortened).
const char kHfQuant[] = R"({
  "producer": {"name": "modelopt", "version": "0.23.0"},
  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16,
    "exclude_modules": ["model.layers.30.self_attn*", "model.layers.26.mlp.gate", "lm_head"]}})";

TEST(WeightFormatTest, AwqGemm) {
  auto w = ParseWeightFormat(kAwq.dump());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->layout, QuantLayout::kAwq);
  auto s = w->SchemeFor("model.layers.5.mlp.experts.17.down_proj");
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->group_size, 128);
  EXPECT_TRUE((*s)->zero_points);
  EXPECT_FALSE((*s)->zero_plus_one);
  // modules_to_not_convert: substring semantics, as AutoAWQ and vLLM match.
  EXPECT_FALSE(w->SchemeFor("model.layers.5.self_attn.indexer.wq_b")->has_value());
  EXPECT_FALSE(w->SchemeFor("model.layers.5.self_attn.kv_b_proj")->has_value());
  // AWQ converts the decoder blocks only.
  EXPECT_FALSE(w->SchemeFor("lm_head")->has_value());
  EXPECT_NE(w->Describe().find("AWQ"), std::string::npos);
  // AutoAWQ's alternative spellings, and no version (vLLM reads it as gemm).
  auto alt = ParseWeightFormat(R"({"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": true})");
  ASSERT_TRUE(alt.ok()) << alt.status();
  EXPECT_EQ(alt->groups[0].scheme.group_size, 64);
}

TEST(WeightFormatTest, GptqV1AndV2) {
  auto v1 = ParseWeightFormat(kGptqV1.dump());
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->layout, QuantLayout::kGptq);
  EXPECT_TRUE(v1->groups[0].scheme.zero_plus_one);  // checkpoint_format "gptq": stored zero = z - 1
  EXPECT_TRUE(v1->groups[0].scheme.zero_points);    // qzeros are always stored and used
  auto v2 = ParseWeightFormat(kGptqV2.dump());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_FALSE(v2->groups[0].scheme.zero_plus_one);
  EXPECT_EQ(v2->groups[0].scheme.group_size, 0);  // -1: one group per row
  EXPECT_EQ(v2->groups[0].scheme.GroupFor(6144), 6144);
  json no_format = kGptqV1;
  no_format.erase("checkpoint_format");  // AutoGPTQ before the field existed: v1
  EXPECT_TRUE(ParseWeightFormat(no_format.dump())->groups[0].scheme.zero_plus_one);
}

TEST(WeightFormatTest, CompressedTensorsGroupsTargetsAndIgnore) {
  auto w = ParseWeightFormat(kCt.dump());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->layout, QuantLayout::kPackQuantized);
  auto s = w->SchemeFor("model.layers.3.self_attn.o_proj");
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_FALSE((*s)->zero_points);
  EXPECT_EQ((*s)->group_size, 128);
  EXPECT_FALSE(w->SchemeFor("lm_head")->has_value());
  EXPECT_FALSE(w->SchemeFor("model.layers.3.mlp.gate")->has_value());
  EXPECT_TRUE(w->SchemeFor("model.layers.3.mlp.gate_proj")->has_value());  // "$" anchors the regex
  EXPECT_FALSE(w->SchemeFor("model.layers.3.self_attn.indexer.wk")->has_value());

  // Two groups: experts by regex, the rest per channel with zero points;
  // a module claimed by two groups with different schemes is an error.
  json two = kCt;
  two["config_groups"]["group_0"]["targets"] = {"re:.*mlp\\.experts\\..*"};
  two["config_groups"]["group_1"] = two["config_groups"]["group_0"];
  two["config_groups"]["group_1"]["targets"] = {"re:.*self_attn\\..*_proj$"};
  two["config_groups"]["group_1"]["weights"]["strategy"] = "channel";
  two["config_groups"]["group_1"]["weights"]["symmetric"] = false;
  auto w2 = ParseWeightFormat(two.dump());
  ASSERT_TRUE(w2.ok()) << w2.status();
  EXPECT_EQ((*w2->SchemeFor("model.layers.3.mlp.experts.0.up_proj"))->group_size, 128);
  const auto attn = *w2->SchemeFor("model.layers.3.self_attn.q_b_proj");
  EXPECT_EQ(attn->group_size, 0);
  EXPECT_TRUE(attn->zero_points);
  EXPECT_FALSE(w2->SchemeFor("model.layers.3.mlp.shared_experts.up_proj")->has_value());  // not targeted
  two["config_groups"]["group_1"]["targets"] = {"re:.*experts.*"};
  auto clash = ParseWeightFormat(two.dump());
  ASSERT_TRUE(clash.ok());
  auto s2 = clash->SchemeFor("model.layers.3.mlp.experts.0.up_proj");
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("group_0\" and \"group_1"), std::string::npos) << s2.status();
}

TEST(WeightFormatTest, ModelOptNvfp4BothFiles) {
  auto hf = ParseHfQuantConfig(kHfQuant);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->layout, QuantLayout::kNvfp4);
  EXPECT_EQ(hf->source, "hf_quant_config.json");
  // exclude_modules: fnmatch over the whole name.
  EXPECT_FALSE(hf->SchemeFor("model.layers.30.self_attn.q_a_proj")->has_value());
  EXPECT_TRUE(hf->SchemeFor("model.layers.3.self_attn.q_a_proj")->has_value());
  EXPECT_TRUE(hf->SchemeFor("model.layers.300.self_attn.q_a_proj")->has_value());
  EXPECT_FALSE(hf->SchemeFor("lm_head")->has_value());
  EXPECT_TRUE(hf->SchemeFor("model.layers.26.mlp.gate_proj")->has_value());
  EXPECT_EQ((*hf->SchemeFor("model.layers.3.mlp.experts.1.up_proj"))->group_size, 16);
  // Newer exports put the same object in config.json (flat or nested).
  auto flat = ParseWeightFormat(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                    "kv_cache_quant_algo": "FP8", "ignore": ["lm_head"]})");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_FALSE(flat->SchemeFor("lm_head")->has_value());
  auto nested = ParseWeightFormat(json{{"quant_method", "modelopt"}, {"quantization", json::parse(kHfQuant)["quantization"]}}.dump());
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->not_converted.patterns, hf->not_converted.patterns);
}

TEST(WeightFormatTest, FullConfigCarriesTheFormatAndRoundTrips) {
  for (const json& q : {kAwq, kGptqV1, kGptqV2, kCt}) {
    auto c = ParseModelConfig(Glm5ConfigWith(q));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->quant.fp8);
    ASSERT_TRUE(c->quant.weight_format.has_value());
    auto again = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->quant.weight_format->config_json, c->quant.weight_format->config_json);
  }
}

struct BadCase {
  const char* what;
  json config;
  const char* field;  // the error must name it
};

json With(json base, const std::string& key, json value) {
  base[key] = std::move(value);
  return base;
}

json WithWeights(const std::string& key, json value) {
  json c = kCt;
  c["config_groups"]["group_0"]["weights"][key] = std::move(value);
  return c;
}

TEST(WeightFormatTest, RefusesWhatItDoesNotRead) {
  json w4a8 = kCt;
  w4a8["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}};
  const std::vector<BadCase> cases = {
      {"awq 8 bits", With(kAwq, "bits", 8), "quantization_config.bits"},
      {"awq gemv", With(kAwq, "version", "gemv"), "quantization_config.version"},
      {"awq exllama", With(kAwq, "version", "exllama"), "quantization_config.version"},
      {"awq without zeros", With(kAwq, "zero_point", false), "quantization_config.zero_point"},
      {"awq no group", With(kAwq, "group_size", -1), "quantization_config.group_size"},
      {"gptq act-order", With(kGptqV1, "desc_act", true), "quantization_config.desc_act"},
      {"gptq 3 bits", With(kGptqV1, "bits", 3), "quantization_config.bits"},
      {"gptq marlin", With(kGptqV1, "checkpoint_format", "marlin"), "quantization_config.checkpoint_format"},
      {"gptq marlin flag", With(kGptqV1, "is_marlin_format", true), "quantization_config.is_marlin_format"},
      {"gptq dynamic", With(kGptqV1, "dynamic", {{"-:.*mlp.gate", json::object()}}), "quantization_config.dynamic"},
      {"gptq lm_head", With(kGptqV1, "lm_head", true), "quantization_config.lm_head"},
      {"gptq group 0", With(kGptqV1, "group_size", 0), "quantization_config.group_size"},
      {"ct naive", With(kCt, "format", "naive-quantized"), "quantization_config.format"},
      {"ct float", With(kCt, "format", "float-quantized"), "quantization_config.format"},
      {"ct frozen", With(kCt, "quantization_status", "frozen"), "quantization_config.quantization_status"},
      {"ct kv scheme", With(kCt, "kv_cache_scheme", {{"num_bits", 8}}), "quantization_config.kv_cache_scheme"},
      {"ct sparse", With(kCt, "sparsity_config", {{"format", "sparse-24-bitmask"}}), "quantization_config.sparsity_config"},
      {"ct w4a8", w4a8, "quantization_config.config_groups.group_0.input_activations"},
      {"ct act-order", WithWeights("actorder", "group"), "quantization_config.config_groups.group_0.weights.actorder"},
      {"ct 8 bits", WithWeights("num_bits", 8), "quantization_config.config_groups.group_0.weights.num_bits"},
      {"ct fp4", WithWeights("type", "float"), "quantization_config.config_groups.group_0.weights.type"},
      {"ct tensor strategy", WithWeights("strategy", "tensor"), "quantization_config.config_groups.group_0.weights.strategy"},
      {"ct dynamic", WithWeights("dynamic", true), "quantization_config.config_groups.group_0.weights.dynamic"},
      {"ct bad regex", With(kCt, "ignore", {"re:(unclosed"}), "quantization_config.ignore"},
      {"ct deep regex", With(kCt, "ignore", {"re:" + std::string(40, '(') + "x" + std::string(40, ')')}),
       "quantization_config.ignore"},
      {"ct no groups", With(kCt, "config_groups", json::object()), "quantization_config.config_groups"},
      {"modelopt fp8", json{{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}, "quantization_config.quant_algo"},
      {"modelopt block 32", json{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 32}},
       "quantization_config.group_size"},
      {"modelopt int8 kv", json{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", "INT8"}},
       "quantization_config.kv_cache_quant_algo"},
  };
  for (const BadCase& c : cases) {
    auto w = ParseWeightFormat(c.config.dump());
    ASSERT_FALSE(w.ok()) << c.what;
    EXPECT_NE(w.status().message().find(std::string("\"") + c.field + "\""), std::string::npos)
        << c.what << ": " << w.status();
    // And through the whole config.json.
    auto full = ParseModelConfig(Glm5ConfigWith(c.config));
    ASSERT_FALSE(full.ok()) << c.what;
    EXPECT_NE(full.status().message().find(c.field), std::string::npos) << c.what << ": " << full.status();
  }
  auto other = ParseModelConfig(Glm5ConfigWith(json{{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("quantization_config.quant_method"), std::string::npos) << other.status();
}

TEST(WeightFormatTest, HfQuantConfigNextToConfigJson) {
  json c = json::parse(testing::ReadSource("tests/data/glm5_config.json"));
  c.erase("quantization_config");
  const std::string dir = testing::TempDir("hf_quant");
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", c.dump()).ok());
  ASSERT_TRUE(WriteStringToFile(dir + "/hf_quant_config.json", kHfQuant).ok());
  auto loaded = LoadModelConfig(dir + "/config.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->quant.weight_format.has_value());
  EXPECT_EQ(loaded->quant.weight_format->layout, QuantLayout::kNvfp4);
  // Both files, agreeing.
  c["quantization_config"] = json::parse(loaded->quant.weight_format->config_json);
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", c.dump()).ok());
  EXPECT_TRUE(LoadModelConfig(dir + "/config.json").ok());
  // Disagreeing exclusion lists, or another format in config.json.
  c["quantization_config"]["exclude_modules"] = {"lm_head"};
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", c.dump()).ok());
  auto disagree = LoadModelConfig(dir + "/config.json");
  ASSERT_FALSE(disagree.ok());
  EXPECT_NE(disagree.status().message().find("disagree"), std::string::npos) << disagree.status();
  c["quantization_config"] = kAwq;
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", c.dump()).ok());
  EXPECT_FALSE(LoadModelConfig(dir + "/config.json").ok());
  // A broken hf_quant_config.json names itself.
  c.erase("quantization_config");
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", c.dump()).ok());
  ASSERT_TRUE(WriteStringToFile(dir + "/hf_quant_config.json", R"({"quantization": {"quant_algo": "W4A8_AWQ"}})").ok());
  auto bad = LoadModelConfig(dir + "/config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hf_quant_config.json"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("quantization.quant_algo"), std::string::npos) << bad.status();
}

TEST(ModulePatternsTest, MatchKinds) {
  ModulePatterns glob{ModulePatterns::Match::kGlob, {"model.layers.?.self_attn*", "*mlp.gate"}};
  EXPECT_TRUE(glob.Matches("model.layers.3.self_attn.o_proj"));
  EXPECT_FALSE(glob.Matches("model.layers.13.self_attn.o_proj"));
  EXPECT_TRUE(glob.Matches("model.layers.13.mlp.gate"));
  EXPECT_FALSE(glob.Matches("model.layers.13.mlp.gate_proj"));
  ModulePatterns sub{ModulePatterns::Match::kSubstring, {"mlp.gate"}};
  EXPECT_TRUE(sub.Matches("model.layers.13.mlp.gate_proj"));  // AWQ's substring rule catches gate_proj too
  ModulePatterns ct{ModulePatterns::Match::kTensors, {"lm_head", "re:.*experts\\.1\\."}};
  ASSERT_TRUE(ct.Compile().ok());
  EXPECT_TRUE(ct.Matches("lm_head"));
  EXPECT_FALSE(ct.Matches("model.lm_head"));  // exact names are exact
  EXPECT_TRUE(ct.Matches("model.layers.3.mlp.experts.1.up_proj"));
  EXPECT_FALSE(ct.Matches("model.layers.3.mlp.experts.11.up_proj"));
}

}  // namespace
}  // namespace spar
