// The typed model configuration: everything the forward pass needs, parsed
// from a Hugging Face config.json of model_type "glm_moe_dsa" (GLM-5) or
// "deepseek_v32" (DeepSeek-V3.2). Math and values: shared/reference/dsa-spec.md.
#ifndef SPAR_ENGINE_MODEL_CONFIG_H_
#define SPAR_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weight_format.h"

namespace spar {

enum class ModelArch { kGlmMoeDsa, kDeepseekV32 };

// Interleaved: rotate pairs (x[2i], x[2i+1]) (GPT-J). HalfSplit: rotate
// (x[i], x[i+d/2]) (NeoX). GLM-5 uses interleaved for MLA and the indexer;
// DeepSeek-V3.2 interleaved for MLA and half-split for the indexer.
enum class RopeLayout { kInterleaved, kHalfSplit };

enum class RopeType { kDefault, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // YaRN only.
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  bool truncate = true;
  // Multiplier on cos/sin (Hugging Face "attention_factor"): 1 for the DSA
  // models because mscale == mscale_all_dim.
  double attention_factor = 1.0;
};

enum class MlpType { kDense, kMoe };
// kFull runs the layer's indexer; kShared reuses the previous full layer's
// top-k (GLM-5.2 style cross-layer sharing).
enum class IndexerType { kFull, kShared };

struct QuantConfig {
  bool fp8 = false;  // block-FP8 e4m3 weights with fp32 weight_scale_inv
  int block_n = 128;
  int block_k = 128;
  bool ue8m0_scales = false;  // informational: scales are powers of two
  std::vector<std::string> modules_to_not_convert;
  // 4-bit weights (AWQ, GPTQ, compressed-tensors int4, NVFP4): the format
  // descriptor (engine/weight_format.h). Exclusive with fp8.
  std::optional<WeightFormat> weight_format;
};

struct ModelConfig {
  ModelArch arch = ModelArch::kGlmMoeDsa;
  std::string model_type;
  std::vector<std::string> architectures;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int num_nextn_predict_layers = 0;

  // MLA
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  RopeLayout mla_rope_layout = RopeLayout::kInterleaved;
  RopeConfig rope;

  // Lightning indexer
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  RopeLayout indexer_rope_layout = RopeLayout::kInterleaved;
  std::vector<IndexerType> indexer_types;

  // MoE
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  int first_k_dense_replace = 0;
  std::vector<MlpType> mlp_layer_types;

  // Norms. Hugging Face keeps q_a_layernorm/kv_a_layernorm at 1e-6 whatever
  // rms_norm_eps says, and the indexer's k_norm LayerNorm at 1e-6.
  double rms_norm_eps = 1e-6;
  double latent_norm_eps = 1e-6;
  double indexer_norm_eps = 1e-6;

  int64_t max_position_embeddings = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  bool tie_word_embeddings = false;

  QuantConfig quant;

  // Derived quantities.
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Latent cache width per token: c_kv followed by the rotated k_pe.
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // MLA softmax scale: qk_head_dim^-0.5, times mscale^2 under YaRN.
  double softmax_scale() const;
  // Folded indexer weight scale: index_n_heads^-0.5 * index_head_dim^-0.5.
  double indexer_weight_scale() const;
  bool is_moe_layer(int layer) const { return mlp_layer_types[layer] == MlpType::kMoe; }
};

// Parses and validates. Errors name the offending field.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);
// Reads config.json and, when the directory holds one, ModelOpt's
// hf_quant_config.json (NVFP4 checkpoints describe their weights there; when
// config.json describes them too, the two must agree).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Serialises to a Hugging Face style config.json (used by make-tiny).
std::string ModelConfigToJson(const ModelConfig& config);

// The checks ParseModelConfig runs, for configs built in code.
absl::Status ValidateModelConfig(const ModelConfig& config);

absl::string_view ModelArchName(ModelArch arch);

}  // namespace spar

#endif  // SPAR_ENGINE_MODEL_CONFIG_H_
