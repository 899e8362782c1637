#include "kernels/ref/sparse_mla_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/thread_pool.h"

namespace spar::ref {

void SparseMla(const float* q, int64_t tokens, int heads, const LatentCacheView& cache, const int32_t* indices,
               int topk, float scale, float* out, float* lse) {
  const size_t row_bytes = LatentRowBytes(cache.format);
  ParallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> keys, scores;
    for (int64_t t = t0; t < t1; ++t) {
      // Gather the valid rows once; every head reuses them.
      keys.clear();
      for (int j = 0; j < topk; ++j) {
        const int32_t slot = indices[t * topk + j];
        if (slot < 0 || slot >= cache.num_slots) continue;
        keys.resize(keys.size() + kLatentDim);
        DecodeLatentRow(cache.format, cache.rows + static_cast<size_t>(slot) * row_bytes,
                        keys.data() + keys.size() - kLatentDim);
      }
      const int64_t n = static_cast<int64_t>(keys.size() / kLatentDim);
      for (int h = 0; h < heads; ++h) {
        const float* qh = q + (t * heads + h) * kLatentDim;
        float* o = out + (t * heads + h) * kLatentNopeDim;
        if (n == 0) {
          for (int i = 0; i < kLatentNopeDim; ++i) o[i] = 0.0f;
          if (lse) lse[t * heads + h] = std::numeric_limits<float>::infinity();
          continue;
        }
        scores.assign(n, 0.0f);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          const float* k = keys.data() + j * kLatentDim;
          float dot = 0;
          for (int i = 0; i < kLatentDim; ++i) dot += qh[i] * k[i];
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          scores[j] = std::exp(scores[j] - mx);
          sum += scores[j];
        }
        for (int i = 0; i < kLatentNopeDim; ++i) o[i] = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float p = static_cast<float>(scores[j] / sum);
          const float* k = keys.data() + j * kLatentDim;
          for (int i = 0; i < kLatentNopeDim; ++i) o[i] += p * k[i];
        }
        if (lse) lse[t * heads + h] = mx + static_cast<float>(std::log(sum));
      }
    }
  });
}

}  // namespace spar::ref
