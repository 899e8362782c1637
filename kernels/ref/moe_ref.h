// MoE routing (noaux_tc, dsa-spec.md §2.7) and the SwiGLU activation.
#ifndef SPAR_KERNELS_REF_MOE_REF_H_
#define SPAR_KERNELS_REF_MOE_REF_H_

#include <cstdint>

namespace spar::ref {

struct MoeRoutingParams {
  int num_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  bool renormalize = true;
  float routed_scaling = 1.0f;
};

// router_logits: [tokens, num_experts] fp32; bias: e_score_correction_bias.
// Scores are sigmoid(logit); selection uses score + bias, restricted to the
// topk_group groups with the largest sum of their two best biased scores;
// weights are the unbiased scores of the chosen experts, renormalised, times
// routed_scaling. Outputs are ordered by biased score, best first; ties go to
// the lower index.
void MoeRoute(const float* router_logits, const float* bias, int64_t tokens, const MoeRoutingParams& p,
              int32_t* expert_ids, float* expert_weights);

// out[r][i] = silu(gate[r][i]) · up[r][i], with gate/up at row stride ld_in.
void SiluMul(const float* gate, const float* up, int64_t ld_in, int64_t rows, int64_t dim, float* out, int64_t ld_out);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_MOE_REF_H_
