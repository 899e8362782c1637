// Checkpoint tensor names, spelled as the real GLM-5 / DeepSeek-V3.2
// checkpoints spell them (see dsa-spec.md §1.2).
#ifndef SPAR_ENGINE_WEIGHT_NAMES_H_
#define SPAR_ENGINE_WEIGHT_NAMES_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"

namespace spar::names {

inline std::string Layer(int layer, absl::string_view rest) { return absl::StrCat("model.layers.", layer, ".", rest); }
inline std::string Expert(int layer, int expert, absl::string_view proj) {
  return absl::StrCat("model.layers.", layer, ".mlp.experts.", expert, ".", proj, ".weight");
}
inline std::string ScaleOf(absl::string_view weight_name) {
  // "x.weight" -> "x.weight_scale_inv"
  return absl::StrCat(weight_name, "_scale_inv");
}

inline constexpr char kEmbed[] = "model.embed_tokens.weight";
inline constexpr char kFinalNorm[] = "model.norm.weight";
inline constexpr char kLmHead[] = "lm_head.weight";

inline constexpr char kInputNorm[] = "input_layernorm.weight";
inline constexpr char kPostAttnNorm[] = "post_attention_layernorm.weight";
inline constexpr char kQA[] = "self_attn.q_a_proj.weight";
inline constexpr char kQANorm[] = "self_attn.q_a_layernorm.weight";
inline constexpr char kQB[] = "self_attn.q_b_proj.weight";
inline constexpr char kKvA[] = "self_attn.kv_a_proj_with_mqa.weight";
inline constexpr char kKvANorm[] = "self_attn.kv_a_layernorm.weight";
inline constexpr char kKvB[] = "self_attn.kv_b_proj.weight";
inline constexpr char kO[] = "self_attn.o_proj.weight";
inline constexpr char kIdxWqB[] = "self_attn.indexer.wq_b.weight";
inline constexpr char kIdxWk[] = "self_attn.indexer.wk.weight";
inline constexpr char kIdxKNormW[] = "self_attn.indexer.k_norm.weight";
inline constexpr char kIdxKNormB[] = "self_attn.indexer.k_norm.bias";
inline constexpr char kIdxWeights[] = "self_attn.indexer.weights_proj.weight";
inline constexpr char kMlpGate[] = "mlp.gate_proj.weight";
inline constexpr char kMlpUp[] = "mlp.up_proj.weight";
inline constexpr char kMlpDown[] = "mlp.down_proj.weight";
inline constexpr char kRouter[] = "mlp.gate.weight";
inline constexpr char kRouterBias[] = "mlp.gate.e_score_correction_bias";
inline constexpr char kSharedGate[] = "mlp.shared_experts.gate_proj.weight";
inline constexpr char kSharedUp[] = "mlp.shared_experts.up_proj.weight";
inline constexpr char kSharedDown[] = "mlp.shared_experts.down_proj.weight";

// The multi-token-prediction layer, model.layers.{num_hidden_layers}.*: these
// plus a full decoder layer. DeepSeek's checkpoints also store the layer's
// own copies of the embedding and the head; GLM-5's share the main ones.
inline constexpr char kMtpEnorm[] = "enorm.weight";
inline constexpr char kMtpHnorm[] = "hnorm.weight";
inline constexpr char kMtpEhProj[] = "eh_proj.weight";
inline constexpr char kMtpHeadNorm[] = "shared_head.norm.weight";
inline constexpr char kMtpHead[] = "shared_head.head.weight";
inline constexpr char kMtpEmbed[] = "embed_tokens.weight";

}  // namespace spar::names

#endif  // SPAR_ENGINE_WEIGHT_NAMES_H_
