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

bool SameConfig(const spar::ModelConfig& a, const spar::ModelConfig& b) {
  return a.arch == b.arch && a.model_type == b.model_type && a.vocab_size == b.vocab_size &&
         a.hidden_size == b.hidden_size && a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads && a.q_lora_rank == b.q_lora_rank &&
         a.kv_lora_rank == b.kv_lora_rank && a.qk_nope_head_dim == b.qk_nope_head_dim &&
         a.qk_rope_head_dim == b.qk_rope_head_dim && a.v_head_dim == b.v_head_dim &&
         a.index_n_heads == b.index_n_heads && a.index_head_dim == b.index_head_dim &&
         a.index_topk == b.index_topk && a.indexer_types == b.indexer_types &&
         a.indexer_rope_layout == b.indexer_rope_layout && a.n_routed_experts == b.n_routed_experts &&
         a.num_experts_per_tok == b.num_experts_per_tok && a.n_group == b.n_group &&
         a.topk_group == b.topk_group && a.mlp_layer_types == b.mlp_layer_types &&
         a.max_position_embeddings == b.max_position_embeddings && a.eos_token_ids == b.eos_token_ids &&
         a.rope.type == b.rope.type && a.quant.fp8 == b.quant.fp8;
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
  SPAR_FUZZ_CHECK(SameConfig(c, *again));
  return 0;
}
