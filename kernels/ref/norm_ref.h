// RMSNorm and LayerNorm references (fp32 math, as Hugging Face computes them).
#ifndef SPAR_KERNELS_REF_NORM_REF_H_
#define SPAR_KERNELS_REF_NORM_REF_H_

#include <cstdint>

namespace spar::ref {

// out[r] = w ⊙ x[r] · rsqrt(mean(x[r]²) + eps). Row strides ldx / ldo.
void RmsNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, float eps, float* out,
             int64_t ldo);

// out[r] = (x[r] - mean) · rsqrt(var + eps) ⊙ w + b   (biased variance).
void LayerNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* out, int64_t ldo);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_NORM_REF_H_
