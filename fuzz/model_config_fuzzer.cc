// Fuzzes the config.json parser (engine/model_config.h): a model directory
// is input the operator did not write. Parsing must end in a status naming
// the field, never a crash, overflow or hang.
//
// Properties: an accepted config passes ValidateModelConfig, its per-layer
// lists cover every layer, its derived scales are finite, and it survives a
// round trip through ModelConfigToJson (what make-tiny writes) unchanged.
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/model_config.h"
#include "fuzz/fuzz_check.h"

namespace {

// The first field that differs (empty when none).
std::string FirstDifference(const spar::ModelConfig& a, const spar::ModelConfig& b) {
#define SPAR_SAME(field) \
  if (!(a.field == b.field)) return #field
  SPAR_SAME(arch);
  SPAR_SAME(model_type);
  SPAR_SAME(vocab_size);
  SPAR_SAME(hidden_size);
  SPAR_SAME(intermediate_size);
  SPAR_SAME(moe_intermediate_size);
  SPAR_SAME(num_hidden_layers);
  SPAR_SAME(num_attention_heads);
  SPAR_SAME(q_lora_rank);
  SPAR_SAME(kv_lora_rank);
  SPAR_SAME(qk_nope_head_dim);
  SPAR_SAME(qk_rope_head_dim);
  SPAR_SAME(v_head_dim);
  SPAR_SAME(mla_rope_layout);
  SPAR_SAME(index_n_heads);
  SPAR_SAME(index_head_dim);
  SPAR_SAME(index_topk);
  SPAR_SAME(indexer_rope_layout);
  SPAR_SAME(indexer_types);
  SPAR_SAME(n_routed_experts);
  SPAR_SAME(n_shared_experts);
  SPAR_SAME(num_experts_per_tok);
  SPAR_SAME(n_group);
  SPAR_SAME(topk_group);
  SPAR_SAME(routed_scaling_factor);
  SPAR_SAME(norm_topk_prob);
  SPAR_SAME(first_k_dense_replace);
  SPAR_SAME(mlp_layer_types);
  SPAR_SAME(rms_norm_eps);
  SPAR_SAME(max_position_embeddings);
  SPAR_SAME(eos_token_ids);
  SPAR_SAME(rope.type);
  SPAR_SAME(rope.theta);
  SPAR_SAME(rope.factor);
  SPAR_SAME(rope.original_max_position_embeddings);
  SPAR_SAME(rope.mscale);
  SPAR_SAME(rope.mscale_all_dim);
  SPAR_SAME(quant.fp8);
  SPAR_SAME(quant.weight_format.has_value());
  if (a.quant.weight_format) {
    SPAR_SAME(quant.weight_format->layout);
    SPAR_SAME(quant.weight_format->config_json);
    SPAR_SAME(quant.weight_format->not_converted.patterns);
    SPAR_SAME(quant.weight_format->groups.size());
  }
#undef SPAR_SAME
  return "";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = spar::ParseModelConfig(text);
  if (!config.ok()) {
    SPAR_FUZZ_CHECK(!config.status().message().empty());
    return 0;
  }
  const spar::ModelConfig& c = *config;
  SPAR_FUZZ_CHECK(spar::ValidateModelConfig(c).ok());
  SPAR_FUZZ_CHECK(c.num_hidden_layers > 0);
  SPAR_FUZZ_CHECK(static_cast<int>(c.mlp_layer_types.size()) == c.num_hidden_layers);
  SPAR_FUZZ_CHECK(static_cast<int>(c.indexer_types.size()) == c.num_hidden_layers);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) (void)c.is_moe_layer(layer);
  SPAR_FUZZ_CHECK(std::isfinite(c.softmax_scale()) && c.softmax_scale() > 0);
  SPAR_FUZZ_CHECK(std::isfinite(c.indexer_weight_scale()) && c.indexer_weight_scale() > 0);
  SPAR_FUZZ_CHECK(c.latent_dim() > 0 && c.qk_head_dim() > 0);
  auto again = spar::ParseModelConfig(spar::ModelConfigToJson(c));
  if (!again.ok()) {
    std::fprintf(stderr, "round trip failed: %s\n", std::string(again.status().message()).c_str());
  }
  SPAR_FUZZ_CHECK(again.ok());
  const std::string differs = FirstDifference(c, *again);
  if (!differs.empty()) std::fprintf(stderr, "round trip changed %s\n", differs.c_str());
  SPAR_FUZZ_CHECK(differs.empty());
  return 0;
}
