#include "kernels/ref/topk_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace spar::ref {

void TopK(const float* logits, int64_t len, int k, int32_t* out) {
  std::vector<int32_t> cand;
  cand.reserve(static_cast<size_t>(len));
  for (int64_t s = 0; s < len; ++s) {
    if (std::isfinite(logits[s]) || (logits[s] > 0 && std::isinf(logits[s]))) cand.push_back(static_cast<int32_t>(s));
  }
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int take = static_cast<int>(std::min<int64_t>(k, static_cast<int64_t>(cand.size())));
  if (take < static_cast<int64_t>(cand.size())) {
    std::nth_element(cand.begin(), cand.begin() + take, cand.end(), better);
    cand.resize(take);
  }
  std::sort(cand.begin(), cand.end());
  for (int i = 0; i < k; ++i) out[i] = i < take ? cand[i] : -1;
}

}  // namespace spar::ref
