#include "kernels/ref/rope_ref.h"

#include <algorithm>
#include <cmath>

namespace spar::ref {

std::vector<float> RopeInvFreq(const RopeParams& p) {
  const int half = p.rotary_dim / 2;
  std::vector<float> inv(half);
  const float base = static_cast<float>(p.theta);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
    const float pos_freq = std::pow(base, exponent);
    inv[i] = 1.0f / pos_freq;
  }
  if (!p.yarn) return inv;
  // YaRN: blend interpolated (inv / factor) and extrapolated (inv)
  // frequencies with a linear ramp over the correction range.
  const double dim = p.rotary_dim;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(p.yarn_original_max_positions) / (rotations * 2 * M_PI)) /
           (2 * std::log(p.theta));
  };
  double low = correction_dim(p.yarn_beta_fast), high = correction_dim(p.yarn_beta_slow);
  if (p.yarn_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(p.yarn_factor);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
    const float pos_freq = std::pow(base, exponent);
    const float extrap = 1.0f / pos_freq;
    const float interp = 1.0f / (factor * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    const float extrap_factor = 1.0f - ramp;
    inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return inv;
}

void RopeCosSin(const std::vector<float>& inv_freq, int64_t position, float attention_factor, float* cos_out,
                float* sin_out) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
  }
}

void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t rows_per_position, const int32_t* positions, int offset,
               RopePairs pairs, const RopeParams& params) {
  const std::vector<float> inv = RopeInvFreq(params);
  const int half = params.rotary_dim / 2;
  std::vector<float> cs(half), sn(half);
  int64_t cached_pos = -1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = positions[r / rows_per_position];
    if (pos != cached_pos) {
      RopeCosSin(inv, pos, static_cast<float>(params.attention_factor), cs.data(), sn.data());
      cached_pos = pos;
    }
    float* v = x + r * ld + offset;
    for (int i = 0; i < half; ++i) {
      const int a = pairs == RopePairs::kInterleaved ? 2 * i : i;
      const int b = pairs == RopePairs::kInterleaved ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b] = x1 * cs[i] + x0 * sn[i];
    }
  }
}

}  // namespace spar::ref
