#include "engine/model_config.h"

#include <sys/stat.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxHiddenLayers = 4096;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: field \"", field, "\" ", what));
}

// Typed accessors over one JSON object; every error names the field.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }

  absl::StatusOr<int64_t> Int(const char* name) const {
    if (!Has(name)) return FieldError(Path(name), "is missing");
    const json& v = obj_.at(name);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    return FieldError(Path(name), absl::StrCat("must be an integer, got ", v.dump()));
  }

  absl::StatusOr<int64_t> PositiveInt(const char* name) const {
    SPAR_ASSIGN_OR_RETURN(int64_t v, Int(name));
    if (v <= 0) return FieldError(Path(name), absl::StrCat("must be positive, got ", v));
    SPAR_RETURN_IF_ERROR(FitsInt(name, v));
    return v;
  }

  absl::StatusOr<int64_t> IntOr(const char* name, int64_t fallback) const {
    if (!Has(name)) return fallback;
    SPAR_ASSIGN_OR_RETURN(int64_t v, Int(name));
    SPAR_RETURN_IF_ERROR(FitsInt(name, v));
    return v;
  }

  absl::StatusOr<double> Number(const char* name) const {
    if (!Has(name)) return FieldError(Path(name), "is missing");
    const json& v = obj_.at(name);
    if (!v.is_number()) return FieldError(Path(name), absl::StrCat("must be a number, got ", v.dump()));
    return v.get<double>();
  }

  absl::StatusOr<double> NumberOr(const char* name, double fallback) const {
    if (!Has(name)) return fallback;
    return Number(name);
  }

  absl::StatusOr<bool> BoolOr(const char* name, bool fallback) const {
    if (!Has(name)) return fallback;
    const json& v = obj_.at(name);
    if (!v.is_boolean()) return FieldError(Path(name), absl::StrCat("must be true or false, got ", v.dump()));
    return v.get<bool>();
  }

  absl::StatusOr<std::string> String(const char* name) const {
    if (!Has(name)) return FieldError(Path(name), "is missing");
    const json& v = obj_.at(name);
    if (!v.is_string()) return FieldError(Path(name), absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }

  absl::StatusOr<std::string> StringOr(const char* name, std::string fallback) const {
    if (!Has(name)) return fallback;
    return String(name);
  }

  absl::StatusOr<std::vector<std::string>> StringList(const char* name) const {
    std::vector<std::string> out;
    if (!Has(name)) return out;
    const json& v = obj_.at(name);
    if (!v.is_array()) return FieldError(Path(name), "must be a list of strings");
    for (const auto& e : v) {
      if (!e.is_string()) return FieldError(Path(name), "must be a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  // The config's integer fields are stored as int: a value outside its
  // range is refused rather than wrapped.
  absl::Status FitsInt(const char* name, int64_t v) const {
    if (v > std::numeric_limits<int32_t>::max()) return FieldError(Path(name), absl::StrCat("is too large: ", v));
    if (v < std::numeric_limits<int32_t>::min()) return FieldError(Path(name), absl::StrCat("is too small: ", v));
    return absl::OkStatus();
  }

  std::string Path(const char* name) const { return prefix_.empty() ? name : absl::StrCat(prefix_, ".", name); }

 private:
  const json& obj_;
  std::string prefix_;
};

absl::StatusOr<RopeConfig> ParseRope(const json& root, int rope_dim) {
  RopeConfig rope;
  // transformers >= 5 writes rope_parameters; older configs have rope_theta at
  // the top level and rope_scaling for YaRN.
  const json* params = nullptr;
  std::string prefix;
  if (root.contains("rope_parameters") && root.at("rope_parameters").is_object()) {
    params = &root.at("rope_parameters");
    prefix = "rope_parameters";
  } else if (root.contains("rope_scaling") && root.at("rope_scaling").is_object()) {
    params = &root.at("rope_scaling");
    prefix = "rope_scaling";
  } else if (root.contains("rope_parameters") && !root.at("rope_parameters").is_null()) {
    return FieldError("rope_parameters", "must be an object");
  }
  FieldReader top(root, "");
  SPAR_ASSIGN_OR_RETURN(rope.theta, top.NumberOr("rope_theta", 10000.0));
  std::string type = "default";
  if (params != nullptr) {
    FieldReader p(*params, prefix);
    SPAR_ASSIGN_OR_RETURN(rope.theta, p.NumberOr("rope_theta", rope.theta));
    if (p.Has("rope_type")) {
      SPAR_ASSIGN_OR_RETURN(type, p.String("rope_type"));
    } else if (p.Has("type")) {
      SPAR_ASSIGN_OR_RETURN(type, p.String("type"));
    }
    if (type == "yarn") {
      rope.type = RopeType::kYarn;
      SPAR_ASSIGN_OR_RETURN(rope.factor, p.Number("factor"));
      SPAR_ASSIGN_OR_RETURN(rope.original_max_position_embeddings, p.Int("original_max_position_embeddings"));
      SPAR_ASSIGN_OR_RETURN(rope.beta_fast, p.NumberOr("beta_fast", 32.0));
      SPAR_ASSIGN_OR_RETURN(rope.beta_slow, p.NumberOr("beta_slow", 1.0));
      SPAR_ASSIGN_OR_RETURN(rope.mscale, p.NumberOr("mscale", 0.0));
      SPAR_ASSIGN_OR_RETURN(rope.mscale_all_dim, p.NumberOr("mscale_all_dim", 0.0));
      SPAR_ASSIGN_OR_RETURN(rope.truncate, p.BoolOr("truncate", true));
      if (rope.factor <= 0) return FieldError(p.Path("factor"), "must be positive");
      if (rope.original_max_position_embeddings <= 0) {
        return FieldError(p.Path("original_max_position_embeddings"), "must be positive");
      }
      auto get_mscale = [](double scale, double m) {
        return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
      };
      if (p.Has("attention_factor")) {
        SPAR_ASSIGN_OR_RETURN(rope.attention_factor, p.Number("attention_factor"));
      } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
        rope.attention_factor = get_mscale(rope.factor, rope.mscale) / get_mscale(rope.factor, rope.mscale_all_dim);
      } else {
        rope.attention_factor = get_mscale(rope.factor, 1.0);
      }
    } else if (type != "default") {
      return FieldError(p.Path("rope_type"), absl::StrCat("\"", type, "\" is not supported (default or yarn)"));
    }
  }
  if (!(rope.theta > 0)) return FieldError("rope_theta", "must be positive");
  if (rope_dim % 2 != 0) return FieldError("qk_rope_head_dim", "must be even");
  return rope;
}

absl::Status ParseQuant(const json& root, QuantConfig* quant) {
  if (!root.contains("quantization_config") || root.at("quantization_config").is_null()) return absl::OkStatus();
  const json& q = root.at("quantization_config");
  if (!q.is_object()) return FieldError("quantization_config", "must be an object");
  FieldReader r(q, "quantization_config");
  SPAR_ASSIGN_OR_RETURN(std::string method, r.String("quant_method"));
  if (IsFourBitQuantMethod(method)) {
    SPAR_ASSIGN_OR_RETURN(quant->weight_format, ParseWeightFormat(q.dump()));
    return absl::OkStatus();
  }
  if (method != "fp8") {
    return FieldError("quantization_config.quant_method",
                      absl::StrCat("\"", method, "\" is not supported (fp8, awq, gptq, compressed-tensors, modelopt)"));
  }
  SPAR_ASSIGN_OR_RETURN(std::string fmt, r.StringOr("fmt", "e4m3"));
  if (fmt != "e4m3") return FieldError("quantization_config.fmt", absl::StrCat("\"", fmt, "\" is not supported (e4m3)"));
  SPAR_ASSIGN_OR_RETURN(std::string act, r.StringOr("activation_scheme", "dynamic"));
  if (act != "dynamic") {
    return FieldError("quantization_config.activation_scheme", absl::StrCat("\"", act, "\" is not supported (dynamic)"));
  }
  if (!r.Has("weight_block_size")) return FieldError("quantization_config.weight_block_size", "is missing");
  const json& bs = q.at("weight_block_size");
  if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() || !bs[1].is_number_integer()) {
    return FieldError("quantization_config.weight_block_size", "must be a list of two integers");
  }
  quant->block_n = bs[0].get<int>();
  quant->block_k = bs[1].get<int>();
  if (quant->block_n != 128 || quant->block_k != 128) {
    return FieldError("quantization_config.weight_block_size",
                      absl::StrCat("[", quant->block_n, ", ", quant->block_k, "] is not supported ([128, 128])"));
  }
  SPAR_ASSIGN_OR_RETURN(std::string scale_fmt, r.StringOr("scale_fmt", ""));
  if (!scale_fmt.empty() && scale_fmt != "ue8m0") {
    return FieldError("quantization_config.scale_fmt", absl::StrCat("\"", scale_fmt, "\" is not supported (ue8m0)"));
  }
  quant->ue8m0_scales = scale_fmt == "ue8m0";
  SPAR_ASSIGN_OR_RETURN(quant->modules_to_not_convert, r.StringList("modules_to_not_convert"));
  quant->fp8 = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ParseTokenIds(const json& root, const char* name) {
  std::vector<int64_t> ids;
  if (!root.contains(name) || root.at(name).is_null()) return ids;
  const json& v = root.at(name);
  if (v.is_number_integer()) {
    ids.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) return FieldError(name, "must be an integer or a list of integers");
      ids.push_back(e.get<int64_t>());
    }
  } else {
    return FieldError(name, "must be an integer or a list of integers");
  }
  return ids;
}

}  // namespace

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.type == RopeType::kYarn && rope.mscale_all_dim != 0.0 && rope.factor > 1.0) {
    const double m = 0.1 * rope.mscale_all_dim * std::log(rope.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

double ModelConfig::indexer_weight_scale() const {
  return 1.0 / std::sqrt(static_cast<double>(index_n_heads)) / std::sqrt(static_cast<double>(index_head_dim));
}

absl::string_view ModelArchName(ModelArch arch) {
  return arch == ModelArch::kGlmMoeDsa ? "glm_moe_dsa" : "deepseek_v32";
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v <= 0) return FieldError(name, absl::StrCat("must be positive, got ", v));
    return absl::OkStatus();
  };
  SPAR_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  SPAR_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  SPAR_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_hidden_layers));
  SPAR_RETURN_IF_ERROR(positive("num_attention_heads", c.num_attention_heads));
  SPAR_RETURN_IF_ERROR(positive("q_lora_rank", c.q_lora_rank));
  SPAR_RETURN_IF_ERROR(positive("kv_lora_rank", c.kv_lora_rank));
  SPAR_RETURN_IF_ERROR(positive("qk_nope_head_dim", c.qk_nope_head_dim));
  SPAR_RETURN_IF_ERROR(positive("qk_rope_head_dim", c.qk_rope_head_dim));
  SPAR_RETURN_IF_ERROR(positive("v_head_dim", c.v_head_dim));
  SPAR_RETURN_IF_ERROR(positive("index_n_heads", c.index_n_heads));
  SPAR_RETURN_IF_ERROR(positive("index_head_dim", c.index_head_dim));
  SPAR_RETURN_IF_ERROR(positive("index_topk", c.index_topk));
  SPAR_RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position_embeddings));
  if (c.qk_rope_head_dim % 2 != 0) return FieldError("qk_rope_head_dim", "must be even");
  if (c.index_head_dim < c.qk_rope_head_dim) {
    return FieldError("index_head_dim", absl::StrCat("(", c.index_head_dim, ") must be at least qk_rope_head_dim (",
                                                     c.qk_rope_head_dim, "): the indexer rotates its first ",
                                                     c.qk_rope_head_dim, " dims"));
  }
  if (c.num_key_value_heads != 0 && c.num_key_value_heads != c.num_attention_heads) {
    return FieldError("num_key_value_heads",
                      absl::StrCat("(", c.num_key_value_heads, ") must equal num_attention_heads (",
                                   c.num_attention_heads, ") for MLA"));
  }
  if (static_cast<int>(c.mlp_layer_types.size()) != c.num_hidden_layers) {
    return FieldError("mlp_layer_types", absl::StrCat("has ", c.mlp_layer_types.size(), " entries for ",
                                                      c.num_hidden_layers, " layers"));
  }
  if (static_cast<int>(c.indexer_types.size()) != c.num_hidden_layers) {
    return FieldError("indexer_types", absl::StrCat("has ", c.indexer_types.size(), " entries for ",
                                                    c.num_hidden_layers, " layers"));
  }
  if (c.indexer_types[0] != IndexerType::kFull) {
    return FieldError("indexer_types", "must start with \"full\": layer 0 has no earlier top-k to share");
  }
  bool any_dense = false, any_moe = false;
  for (MlpType t : c.mlp_layer_types) (t == MlpType::kDense ? any_dense : any_moe) = true;
  if (any_dense) SPAR_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size));
  if (any_moe) {
    SPAR_RETURN_IF_ERROR(positive("moe_intermediate_size", c.moe_intermediate_size));
    SPAR_RETURN_IF_ERROR(positive("n_routed_experts", c.n_routed_experts));
    SPAR_RETURN_IF_ERROR(positive("num_experts_per_tok", c.num_experts_per_tok));
    SPAR_RETURN_IF_ERROR(positive("n_group", c.n_group));
    SPAR_RETURN_IF_ERROR(positive("topk_group", c.topk_group));
    if (c.n_shared_experts < 0) return FieldError("n_shared_experts", "must not be negative");
    if (c.num_experts_per_tok > c.n_routed_experts) {
      return FieldError("num_experts_per_tok", absl::StrCat("(", c.num_experts_per_tok,
                                                            ") exceeds n_routed_experts (", c.n_routed_experts, ")"));
    }
    if (c.n_routed_experts % c.n_group != 0) {
      return FieldError("n_group", absl::StrCat("(", c.n_group, ") must divide n_routed_experts (",
                                                c.n_routed_experts, ")"));
    }
    if (c.topk_group > c.n_group) {
      return FieldError("topk_group", absl::StrCat("(", c.topk_group, ") exceeds n_group (", c.n_group, ")"));
    }
    if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2) {
      return FieldError("n_group", "leaves fewer than 2 experts per group (group score is a top-2 sum)");
    }
    if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
      return FieldError("num_experts_per_tok", "exceeds the experts left in the topk_group selected groups");
    }
  }
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return FieldError("eos_token_id", absl::StrCat(id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (!(c.rms_norm_eps > 0)) return FieldError("rms_norm_eps", "must be positive");
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config.json: not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("config.json: top level must be an object");
  FieldReader r(root, "");
  ModelConfig c;
  SPAR_ASSIGN_OR_RETURN(c.model_type, r.String("model_type"));
  if (c.model_type == "glm_moe_dsa") {
    c.arch = ModelArch::kGlmMoeDsa;
  } else if (c.model_type == "deepseek_v32") {
    c.arch = ModelArch::kDeepseekV32;
  } else {
    return FieldError("model_type",
                      absl::StrCat("\"", c.model_type, "\" is not supported (glm_moe_dsa or deepseek_v32)"));
  }
  SPAR_ASSIGN_OR_RETURN(c.architectures, r.StringList("architectures"));

  SPAR_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  SPAR_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size"));
  SPAR_ASSIGN_OR_RETURN(int64_t layers, r.PositiveInt("num_hidden_layers"));
  // The per-layer lists below are built from it (GLM-5 has 78 layers,
  // DeepSeek-V3.2 61): a garbled count must not allocate gigabytes.
  if (layers > kMaxHiddenLayers) {
    return FieldError("num_hidden_layers", absl::StrCat("(", layers, ") exceeds ", kMaxHiddenLayers));
  }
  c.num_hidden_layers = static_cast<int>(layers);
  SPAR_ASSIGN_OR_RETURN(int64_t heads, r.PositiveInt("num_attention_heads"));
  c.num_attention_heads = static_cast<int>(heads);
  SPAR_ASSIGN_OR_RETURN(int64_t kv_heads, r.IntOr("num_key_value_heads", heads));
  c.num_key_value_heads = static_cast<int>(kv_heads);
  SPAR_ASSIGN_OR_RETURN(int64_t nextn, r.IntOr("num_nextn_predict_layers", 0));
  c.num_nextn_predict_layers = static_cast<int>(nextn);

  if (!r.Has("q_lora_rank")) {
    return FieldError("q_lora_rank", "is missing or null (the DSA indexer needs the q_a projection)");
  }
  auto as_int = [](int64_t v) { return static_cast<int>(v); };
  SPAR_ASSIGN_OR_RETURN(int64_t v, r.PositiveInt("q_lora_rank"));
  c.q_lora_rank = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("kv_lora_rank"));
  c.kv_lora_rank = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("qk_nope_head_dim"));
  c.qk_nope_head_dim = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("qk_rope_head_dim"));
  c.qk_rope_head_dim = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("v_head_dim"));
  c.v_head_dim = as_int(v);

  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("index_n_heads"));
  c.index_n_heads = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("index_head_dim"));
  c.index_head_dim = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.PositiveInt("index_topk"));
  c.index_topk = as_int(v);

  SPAR_ASSIGN_OR_RETURN(bool rope_interleave, r.BoolOr("rope_interleave", true));
  if (!rope_interleave) {
    return FieldError("rope_interleave", "false is not supported: DSA checkpoints use interleaved MLA RoPE");
  }
  c.mla_rope_layout = RopeLayout::kInterleaved;
  // GLM-5 rotates indexer pairs interleaved; DeepSeek-V3.2 half-split (the
  // 2025-11-17 erratum). An explicit indexer_rope_interleave wins.
  const bool default_indexer_interleave = c.arch == ModelArch::kGlmMoeDsa;
  SPAR_ASSIGN_OR_RETURN(bool idx_interleave, r.BoolOr("indexer_rope_interleave", default_indexer_interleave));
  c.indexer_rope_layout = idx_interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  SPAR_ASSIGN_OR_RETURN(c.rope, ParseRope(root, c.qk_rope_head_dim));

  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("n_routed_experts", 0));
  c.n_routed_experts = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("n_shared_experts", 0));
  c.n_shared_experts = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("num_experts_per_tok", 0));
  c.num_experts_per_tok = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("n_group", 1));
  c.n_group = as_int(v);
  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("topk_group", 1));
  c.topk_group = as_int(v);
  SPAR_ASSIGN_OR_RETURN(c.routed_scaling_factor, r.NumberOr("routed_scaling_factor", 1.0));
  SPAR_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", true));
  SPAR_ASSIGN_OR_RETURN(std::string scoring, r.StringOr("scoring_func", "sigmoid"));
  if (scoring != "sigmoid") return FieldError("scoring_func", absl::StrCat("\"", scoring, "\" is not supported (sigmoid)"));
  SPAR_ASSIGN_OR_RETURN(std::string topk_method, r.StringOr("topk_method", "noaux_tc"));
  if (topk_method != "noaux_tc") {
    return FieldError("topk_method", absl::StrCat("\"", topk_method, "\" is not supported (noaux_tc)"));
  }
  SPAR_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
  if (act != "silu") return FieldError("hidden_act", absl::StrCat("\"", act, "\" is not supported (silu)"));
  SPAR_ASSIGN_OR_RETURN(bool attention_bias, r.BoolOr("attention_bias", false));
  if (attention_bias) return FieldError("attention_bias", "true is not supported");

  SPAR_ASSIGN_OR_RETURN(c.intermediate_size, r.IntOr("intermediate_size", 0));
  SPAR_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.IntOr("moe_intermediate_size", 0));
  SPAR_ASSIGN_OR_RETURN(v, r.IntOr("first_k_dense_replace", 0));
  c.first_k_dense_replace = as_int(v);
  SPAR_ASSIGN_OR_RETURN(int64_t moe_freq, r.IntOr("moe_layer_freq", 1));
  if (moe_freq != 1) return FieldError("moe_layer_freq", absl::StrCat("(", moe_freq, ") is not supported (1)"));
  if (r.Has("mlp_layer_types")) {
    SPAR_ASSIGN_OR_RETURN(auto types, r.StringList("mlp_layer_types"));
    for (const auto& t : types) {
      if (t == "dense") {
        c.mlp_layer_types.push_back(MlpType::kDense);
      } else if (t == "sparse" || t == "moe") {
        c.mlp_layer_types.push_back(MlpType::kMoe);
      } else {
        return FieldError("mlp_layer_types", absl::StrCat("has unknown entry \"", t, "\" (dense or sparse)"));
      }
    }
  } else {
    if (c.first_k_dense_replace < 0) return FieldError("first_k_dense_replace", "must not be negative");
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      c.mlp_layer_types.push_back(i < c.first_k_dense_replace ? MlpType::kDense : MlpType::kMoe);
    }
  }
  if (r.Has("indexer_types")) {
    SPAR_ASSIGN_OR_RETURN(auto types, r.StringList("indexer_types"));
    for (const auto& t : types) {
      if (t == "full") {
        c.indexer_types.push_back(IndexerType::kFull);
      } else if (t == "shared") {
        c.indexer_types.push_back(IndexerType::kShared);
      } else {
        return FieldError("indexer_types", absl::StrCat("has unknown entry \"", t, "\" (full or shared)"));
      }
    }
  } else if (r.Has("index_topk_pattern")) {
    SPAR_ASSIGN_OR_RETURN(std::string pattern, r.String("index_topk_pattern"));
    for (char ch : pattern) {
      if (ch == 'F') {
        c.indexer_types.push_back(IndexerType::kFull);
      } else if (ch == 'S') {
        c.indexer_types.push_back(IndexerType::kShared);
      } else {
        return FieldError("index_topk_pattern", absl::StrCat("has unknown letter '", std::string(1, ch), "' (F or S)"));
      }
    }
  } else {
    // Hugging Face's schedule: full iff max(i - offset + 1, 0) % freq == 0.
    SPAR_ASSIGN_OR_RETURN(int64_t freq, r.IntOr("index_topk_freq", 1));
    SPAR_ASSIGN_OR_RETURN(int64_t offset, r.IntOr("index_skip_topk_offset", 2));
    if (freq < 1) freq = 1;
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const int64_t k = std::max<int64_t>(i - offset + 1, 0);
      c.indexer_types.push_back(k % freq == 0 ? IndexerType::kFull : IndexerType::kShared);
    }
  }

  SPAR_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("rms_norm_eps", 1e-6));
  SPAR_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveInt("max_position_embeddings"));
  SPAR_ASSIGN_OR_RETURN(c.eos_token_ids, ParseTokenIds(root, "eos_token_id"));
  SPAR_ASSIGN_OR_RETURN(auto bos, ParseTokenIds(root, "bos_token_id"));
  if (!bos.empty()) c.bos_token_id = bos[0];
  SPAR_ASSIGN_OR_RETURN(auto pad, ParseTokenIds(root, "pad_token_id"));
  if (!pad.empty()) c.pad_token_id = pad[0];
  SPAR_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", false));
  if (c.tie_word_embeddings) return FieldError("tie_word_embeddings", "true is not supported (DSA models are untied)");
  SPAR_RETURN_IF_ERROR(ParseQuant(root, &c.quant));
  SPAR_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

namespace {

// ModelOpt's hf_quant_config.json next to config.json: the NVFP4 weight
// format when config.json has none, else a second statement of it that
// must agree (same layout and unconverted modules).
absl::Status MergeHfQuantConfig(const std::string& dir, ModelConfig* config) {
  const std::string path = dir + "/hf_quant_config.json";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::OkStatus();
  SPAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto hf = ParseHfQuantConfig(text);
  if (!hf.ok()) return absl::Status(hf.status().code(), absl::StrCat(path, ": ", hf.status().message()));
  QuantConfig& q = config->quant;
  if (q.fp8) {
    return absl::InvalidArgumentError(absl::StrCat(path, " describes NVFP4 weights but config.json's "
                                                         "quantization_config says block-FP8"));
  }
  if (!q.weight_format) {
    q.weight_format = std::move(*hf);
    return absl::OkStatus();
  }
  if (q.weight_format->layout != hf->layout ||
      q.weight_format->not_converted.patterns != hf->not_converted.patterns) {
    return absl::InvalidArgumentError(absl::StrCat(path, " and config.json's quantization_config disagree (",
                                                   hf->Describe(), " vs ", q.weight_format->Describe(), ")"));
  }
  q.weight_format->hf_quant_config_json = hf->hf_quant_config_json;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  SPAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto config = ParseModelConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(path, ": ", config.status().message()));
  }
  const size_t slash = path.find_last_of('/');
  SPAR_RETURN_IF_ERROR(MergeHfQuantConfig(slash == std::string::npos ? "." : path.substr(0, slash), &*config));
  return config;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j;
  j["architectures"] = c.architectures;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads == 0 ? c.num_attention_heads : c.num_key_value_heads;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["head_dim"] = c.qk_rope_head_dim;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  std::vector<std::string> indexer_types;
  bool any_shared = false;
  for (IndexerType t : c.indexer_types) {
    indexer_types.push_back(t == IndexerType::kFull ? "full" : "shared");
    any_shared = any_shared || t == IndexerType::kShared;
  }
  if (c.arch == ModelArch::kGlmMoeDsa) {
    j["rope_interleave"] = true;
    j["indexer_rope_interleave"] = c.indexer_rope_layout == RopeLayout::kInterleaved;
    j["indexer_types"] = indexer_types;
  } else {
    if (c.indexer_rope_layout == RopeLayout::kInterleaved) {
      // Not DeepSeek-V3.2's default (half-split): without the key the
      // config would read back half-split.
      j["indexer_rope_interleave"] = true;
    }
    // Without the key a DeepSeek-V3.2 config reads back with an indexer on
    // every layer (its default schedule), so shared layers (read from
    // indexer_types, index_topk_pattern or index_topk_freq) must be written.
    if (any_shared) j["indexer_types"] = indexer_types;
  }
  json rope;
  rope["rope_theta"] = c.rope.theta;
  if (c.rope.type == RopeType::kYarn) {
    rope["rope_type"] = "yarn";
    rope["factor"] = c.rope.factor;
    rope["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
    rope["beta_fast"] = c.rope.beta_fast;
    rope["beta_slow"] = c.rope.beta_slow;
    if (c.rope.mscale != 0) rope["mscale"] = c.rope.mscale;
    if (c.rope.mscale_all_dim != 0) rope["mscale_all_dim"] = c.rope.mscale_all_dim;
  } else {
    rope["rope_type"] = "default";
  }
  j["rope_parameters"] = rope;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = 1;
  std::vector<std::string> mlp;
  for (MlpType t : c.mlp_layer_types) mlp.push_back(t == MlpType::kDense ? "dense" : "sparse");
  j["mlp_layer_types"] = mlp;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["eos_token_id"] = c.eos_token_ids;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  j["dtype"] = "bfloat16";
  j["use_cache"] = true;
  if (c.quant.weight_format) {
    j["quantization_config"] = json::parse(c.quant.weight_format->config_json);
  } else if (c.quant.fp8) {
    json q;
    q["quant_method"] = "fp8";
    q["fmt"] = "e4m3";
    q["activation_scheme"] = "dynamic";
    q["weight_block_size"] = {c.quant.block_n, c.quant.block_k};
    if (c.quant.ue8m0_scales) q["scale_fmt"] = "ue8m0";
    q["modules_to_not_convert"] = c.quant.modules_to_not_convert;
    j["quantization_config"] = q;
  }
  return j.dump(2) + "\n";
}

}  // namespace spar
