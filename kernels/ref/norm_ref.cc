#include "kernels/ref/norm_ref.h"

#include <cmath>

namespace spar::ref {

void RmsNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, float eps, float* out,
             int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    float* o = out + r * ldo;
    for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * inv);
  }
}

void LayerNorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* out, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    double mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= dim;
    double var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= dim;
    const float inv = 1.0f / std::sqrt(static_cast<float>(var) + eps);
    float* o = out + r * ldo;
    for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] - static_cast<float>(mean)) * inv * w[i] + b[i];
  }
}

}  // namespace spar::ref
