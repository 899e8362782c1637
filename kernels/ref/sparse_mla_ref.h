// Sparse MLA attention in the absorbed (latent) form (dsa-spec.md §2.4, §2.6):
// every head's query is 576 wide (q_latent 512 ‖ rotated q_pe 64), every key
// is one latent cache row, the value is the first 512 lanes of that row.
#ifndef SPAR_KERNELS_REF_SPARSE_MLA_REF_H_
#define SPAR_KERNELS_REF_SPARSE_MLA_REF_H_

#include <cstdint>

#include "kernels/ref/cache_ref.h"

namespace spar::ref {

struct LatentCacheView {
  LatentFormat format = LatentFormat::kF32;
  const uint8_t* rows = nullptr;  // slot i at rows + i * LatentRowBytes(format)
  int64_t num_slots = 0;
};

// q: [tokens, heads, 576]; indices: [tokens, topk] cache slots, entries < 0
// or >= num_slots are skipped (duplicates count as many times as they occur).
// out: [tokens, heads, 512] = softmax(scale · q·K[idx]ᵀ) · K[idx][:, :512].
// lse (optional): [tokens, heads], natural log of Σ exp(scale · q·k); a row
// with no valid index gives out = 0 and lse = +inf.
void SparseMla(const float* q, int64_t tokens, int heads, const LatentCacheView& cache, const int32_t* indices,
               int topk, float scale, float* out, float* lse);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_SPARSE_MLA_REF_H_
