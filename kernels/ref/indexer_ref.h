// Lightning-indexer logits (dsa-spec.md §2.5):
//   I[t, s] = Σ_h w[t, h] · relu(q[t, h, :] · k[s, :]) · k_scale[s]
// where w already carries index_n_heads^-0.5 · index_head_dim^-0.5.
#ifndef SPAR_KERNELS_REF_INDEXER_REF_H_
#define SPAR_KERNELS_REF_INDEXER_REF_H_

#include <cstdint>

#include "kernels/ref/cache_ref.h"

namespace spar::ref {

// Ragged prefill form: keys k [num_keys, dim] (contiguous) with optional
// per-key scales; row t is computed for s in [ks[t], ke[t]) and is -inf for
// the other s < num_keys. logits: [rows, num_keys].
void IndexerLogits(const float* q, const float* w, int64_t rows, int heads, int dim, const float* k,
                   const float* k_scale, int64_t num_keys, const int32_t* ks, const int32_t* ke, float* logits);

// Paged form: the keys of one sequence live in cache pages named by
// block_table; row r scores keys [0, context_len[r]) of its sequence and
// writes logits[r * logits_stride + s]; entries up to logits_stride beyond
// the context are -inf.
struct IndexerCacheView {
  IndexerFormat format = IndexerFormat::kF32;
  const uint8_t* pages = nullptr;  // page b at pages + b * IndexerPageBytes(format)
};
void IndexerLogitsPaged(const float* q, const float* w, int64_t rows, int heads, const IndexerCacheView& cache,
                        const int32_t* const* row_block_tables, const int32_t* context_len, float* logits,
                        int64_t logits_stride);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_INDEXER_REF_H_
