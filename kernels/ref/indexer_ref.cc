#include "kernels/ref/indexer_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/thread_pool.h"

namespace spar::ref {
namespace {

inline float ScoreOne(const float* q, const float* w, int heads, int dim, const float* key, float key_scale) {
  float total = 0;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    float dot = 0;
    for (int i = 0; i < dim; ++i) dot += qh[i] * key[i];
    if (dot > 0) total += w[h] * dot;
  }
  return total * key_scale;
}

}  // namespace

void IndexerLogits(const float* q, const float* w, int64_t rows, int heads, int dim, const float* k,
                   const float* k_scale, int64_t num_keys, const int32_t* ks, const int32_t* ke, float* logits) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      float* out = logits + t * num_keys;
      for (int64_t s = 0; s < num_keys; ++s) {
        if (s < ks[t] || s >= ke[t]) {
          out[s] = neg_inf;
          continue;
        }
        out[s] = ScoreOne(q + t * heads * dim, w + t * heads, heads, dim, k + s * dim, k_scale ? k_scale[s] : 1.0f);
      }
    }
  });
}

void IndexerLogitsPaged(const float* q, const float* w, int64_t rows, int heads, const IndexerCacheView& cache,
                        const int32_t* const* row_block_tables, const int32_t* context_len, float* logits,
                        int64_t logits_stride) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const size_t page_bytes = IndexerPageBytes(cache.format);
  ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> key(kIndexerHeadDim);
    for (int64_t r = r0; r < r1; ++r) {
      float* out = logits + r * logits_stride;
      const int32_t n = context_len[r];
      for (int64_t s = 0; s < logits_stride; ++s) {
        if (s >= n) {
          out[s] = neg_inf;
          continue;
        }
        const uint8_t* page = cache.pages + static_cast<size_t>(row_block_tables[r][s / kCacheBlockTokens]) * page_bytes;
        float scale;
        DecodeIndexerKey(cache.format, page, static_cast<int>(s % kCacheBlockTokens), key.data(), &scale);
        out[s] = ScoreOne(q + r * heads * kIndexerHeadDim, w + r * heads, heads, kIndexerHeadDim, key.data(), scale);
      }
    }
  });
}

}  // namespace spar::ref
