// Row-wise top-k selection for the DSA indexer.
#ifndef SPAR_KERNELS_REF_TOPK_REF_H_
#define SPAR_KERNELS_REF_TOPK_REF_H_

#include <cstdint>

namespace spar::ref {

// Picks the k largest finite values of logits[0, len) and writes their
// positions to out[0, k) in ascending position order; -inf and NaN entries
// are never picked; unfilled slots are -1. Ties go to the lower position, so
// the selected set is a pure function of the values.
void TopK(const float* logits, int64_t len, int k, int32_t* out);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_TOPK_REF_H_
