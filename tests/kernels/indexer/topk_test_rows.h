// Rows of logits for the top-k GPU tests: the distributions that stress a
// radix select (uniform, few distinct values, +0 / -0, one exponent, all
// equal, NaN / +-inf, all -inf, the indexer's real-like scores).
#ifndef SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_ROWS_H_
#define SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_ROWS_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/rng.h"

namespace spar::testing {

enum class Dist { kUniform, kTies, kZerosAndTies, kNarrow, kAllEqual, kSpecials, kAllNegInf, kRealLike };

inline std::vector<float> MakeRow(Dist d, int len, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(len);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < len; ++i) {
    switch (d) {
      case Dist::kUniform: v[i] = 10.0f * rng.Symmetric(); break;
      case Dist::kTies: v[i] = static_cast<float>(rng.Below(5)); break;  // 5 distinct values
      case Dist::kZerosAndTies:  // relu-like: many +0 and -0, a few tied positives
        v[i] = rng.Below(3) == 0 ? (rng.Below(2) ? 0.0f : -0.0f) : static_cast<float>(rng.Below(40)) * 0.25f;
        break;
      case Dist::kNarrow: v[i] = 1.0f + rng.Uniform(); break;  // one exponent: huge top-level buckets
      case Dist::kAllEqual: v[i] = 3.5f; break;
      case Dist::kSpecials: {
        const uint64_t r = rng.Below(16);
        v[i] = r == 0 ? ninf : r == 1 ? std::numeric_limits<float>::quiet_NaN()
                       : r == 2 ? std::numeric_limits<float>::infinity()
                                : 5.0f * rng.Symmetric();
        break;
      }
      case Dist::kAllNegInf: v[i] = ninf; break;
      case Dist::kRealLike: {
        // Sum of relu'd weighted dot products over 32 heads, as the indexer makes.
        float s = 0;
        for (int h = 0; h < 32; ++h) s += std::max(0.0f, rng.Symmetric() + 0.3f) * (0.02f + 0.01f * rng.Uniform());
        v[i] = s * (i % 997 == 0 ? 3.0f : 1.0f);
        break;
      }
    }
  }
  return v;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_ROWS_H_
