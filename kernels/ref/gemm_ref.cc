#include "kernels/ref/gemm_ref.h"

#include <vector>

#include "base/checked_range.h"
#include "base/numeric.h"
#include "base/thread_pool.h"

namespace spar::ref {
namespace {

// Under ASan the loop runs unchecked; Dot checks its two ranges first
// (base/checked_range.h says why).
SPAR_UNCHECKED_LOOP inline float DotLoop(const float* a, const float* b, int64_t k) {
  // Eight independent partial sums: deterministic, and lets the compiler
  // vectorise without -ffast-math.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float tail = 0;
  for (; i < k; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

inline float Dot(const float* a, const float* b, int64_t k) {
  CheckReadable(a, static_cast<size_t>(k) * sizeof(float));
  CheckReadable(b, static_cast<size_t>(k) * sizeof(float));
  return DotLoop(a, b, k);
}

}  // namespace

void Gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* y, int64_t ldy) {
  const int64_t min_cols = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, k * m));
  ParallelFor(n, min_cols, [&](int64_t n0, int64_t n1) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * ldx;
      for (int64_t j = n0; j < n1; ++j) y[i * ldy + j] = Dot(xr, w + j * k, k);
    }
  });
}

void Fp8Gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const uint8_t* w8, const float* scales, int64_t n,
             float* y, int64_t ldy) {
  const int64_t scale_cols = (k + 127) / 128;
  ParallelFor(n, 8, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      const float* srow = scales + (j / 128) * scale_cols;
      for (int64_t c = 0; c < k; ++c) row[c] = E4m3ToFloat(w8[j * k + c]) * srow[c / 128];
      for (int64_t i = 0; i < m; ++i) y[i * ldy + j] = Dot(x + i * ldx, row.data(), k);
    }
  });
}

}  // namespace spar::ref
