#include "kernels/ref/moe_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace spar::ref {

void MoeRoute(const float* router_logits, const float* bias, int64_t tokens, const MoeRoutingParams& p,
              int32_t* expert_ids, float* expert_weights) {
  const int e_total = p.num_experts;
  const int per_group = e_total / p.n_group;
  std::vector<float> score(e_total), choice(e_total), gscore(p.n_group);
  std::vector<int> order(e_total), gorder(p.n_group);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < e_total; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-router_logits[t * e_total + e]));
      choice[e] = score[e] + bias[e];
    }
    // Group-limited selection: keep the topk_group groups whose best two
    // biased scores sum highest.
    for (int g = 0; g < p.n_group; ++g) {
      float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
      for (int i = 0; i < per_group; ++i) {
        const float v = choice[g * per_group + i];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      gscore[g] = per_group >= 2 ? b1 + b2 : b1;
    }
    std::iota(gorder.begin(), gorder.end(), 0);
    std::stable_sort(gorder.begin(), gorder.end(), [&](int a, int b) { return gscore[a] > gscore[b]; });
    std::vector<bool> allowed(p.n_group, false);
    for (int i = 0; i < p.topk_group; ++i) allowed[gorder[i]] = true;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const bool aa = allowed[a / per_group], ab = allowed[b / per_group];
      if (aa != ab) return aa;
      return choice[a] > choice[b];
    });
    float sum = 0;
    for (int i = 0; i < p.top_k; ++i) sum += score[order[i]];
    for (int i = 0; i < p.top_k; ++i) {
      const int e = order[i];
      float w = score[e];
      if (p.renormalize) w = w / (sum + 1e-20f);
      expert_ids[t * p.top_k + i] = e;
      expert_weights[t * p.top_k + i] = w * p.routed_scaling;
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t ld_in, int64_t rows, int64_t dim, float* out, int64_t ld_out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const float g = gate[r * ld_in + i];
      out[r * ld_out + i] = g / (1.0f + std::exp(-g)) * up[r * ld_in + i];
    }
  }
}

}  // namespace spar::ref
