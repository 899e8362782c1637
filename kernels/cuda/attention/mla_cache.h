// MLA latent cache writes (dsa-spec.md §2.4; layouts kernels/ref/cache_ref.h).
//
// One fused kernel per layer and step: from the kv_a projection output row
// [c_kv 512 ‖ k_pe 64] of each token it computes
//   c   = RMSNorm(c_kv) · w            (kv_a_layernorm, fp32 math)
//   k_r = RoPE(k_pe, position)         (interleaved for MLA; half-split too)
// and stores [c ‖ k_r] at the token's cache slot: 1152 B of bf16, or the
// 656-byte FP8 row (512 e4m3 with one fp32 scale max(amax, 1e-4)/448 per 128
// values, then 64 bf16 rope values), exactly as ref::EncodeLatentRow encodes
// the fp32 row. The same launch may rope the step's queries too
// (MlaCacheWriteParams::query_rope).
#ifndef SPAR_KERNELS_CUDA_ATTENTION_MLA_CACHE_H_
#define SPAR_KERNELS_CUDA_ATTENTION_MLA_CACHE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "kernels/ref/cache_ref.h"

namespace spar {

struct MlaCacheWriteParams {
  // [tokens, 576] rows at kv + t * kv_stride (elements; multiple of 8).
  const __nv_bfloat16* kv = nullptr;
  int64_t tokens = 0;
  int64_t kv_stride = 0;
  // kv_a_layernorm weight [512]; null: the first 512 values are stored as
  // given (already normalised).
  const __nv_bfloat16* norm_weight = nullptr;
  float eps = 1e-5f;
  // RoPE of the last 64 values: position of each token, inv_freq [32] on the
  // device (ref::RopeInvFreq, YaRN included), cos/sin multiplied by
  // attention_factor. inv_freq null: stored as given (already rotated).
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  float attention_factor = 1.0f;
  bool interleaved = true;  // MLA rope of GLM-5 and DeepSeek-V3.2
  // Destination: slot_mapping[t] = block * 64 + offset; < 0 skips the token.
  const int32_t* slot_mapping = nullptr;
  LatentFormat format = LatentFormat::kBF16;  // kBF16 or kFp8Ds
  uint8_t* cache = nullptr;
  int64_t num_slots = 0;

  // Optional, in the same launch: LaunchRopeApply's work (small_ops.h) on
  // other rows, here the queries' rope lanes of the step, so the decode
  // step's query branch has one launch fewer. Same bits as LaunchRopeApply
  // (one device function); rows == 0: none.
  RopeApplyParams query_rope;
};

bool MlaCacheWriteSupported(LatentFormat format);

absl::Status LaunchMlaCacheWrite(const MlaCacheWriteParams& params, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_ATTENTION_MLA_CACHE_H_
