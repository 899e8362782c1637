// Rotary position embedding: frequency tables (plain and YaRN, computed as
// Hugging Face transformers computes them) and the two pair layouts.
#ifndef SPAR_KERNELS_REF_ROPE_REF_H_
#define SPAR_KERNELS_REF_ROPE_REF_H_

#include <cstdint>
#include <vector>

namespace spar::ref {

enum class RopePairs { kInterleaved, kHalfSplit };

struct RopeParams {
  int rotary_dim = 64;
  double theta = 10000.0;
  bool yarn = false;
  double yarn_factor = 1.0;
  int64_t yarn_original_max_positions = 4096;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool yarn_truncate = true;
  double attention_factor = 1.0;  // multiplies cos and sin
};

// inv_freq[i], i < rotary_dim / 2, in float32 as transformers computes it.
std::vector<float> RopeInvFreq(const RopeParams& p);

// cos/sin of position * inv_freq[i] (times attention_factor), float32.
void RopeCosSin(const std::vector<float>& inv_freq, int64_t position, float attention_factor, float* cos_out,
                float* sin_out);

// Rotates x[r][offset .. offset + rotary_dim) of `rows` rows in place, row r
// at position positions[r / rows_per_position] (so heads of one token share a
// position). Row stride ld.
//   kInterleaved: pairs (x[2i], x[2i+1]); kHalfSplit: pairs (x[i], x[i + d/2]).
void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t rows_per_position, const int32_t* positions, int offset,
               RopePairs pairs, const RopeParams& params);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_ROPE_REF_H_
