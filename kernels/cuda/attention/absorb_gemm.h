// MLA weight absorption GEMMs (dsa-spec.md §2.4), bf16 tensor cores with
// fp32 accumulation, one GEMM per head batched in one launch:
//   q absorption:    q_latent[t, h, :512] = q_nope[t, h, :Dn] · W_UK[h]   (W_UK[h]: Dn x 512)
//   un-absorption:   o[t, h, :Dv]         = o_latent[t, h, :512] · W_UV[h]ᵀ (W_UV[h]: Dv x 512)
// with W_UK / W_UV the two row ranges of the dequantized kv_b_proj weight
// viewed [H, Dn + Dv, 512] (the engine dequantizes kv_b to bf16 once at
// load; GLM-5's 448 rows per head straddle FP8 blocks).
#ifndef SPAR_KERNELS_CUDA_ATTENTION_ABSORB_GEMM_H_
#define SPAR_KERNELS_CUDA_ATTENTION_ABSORB_GEMM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace spar {

// C[i][m][n] = Σ_k A[i][m][k] · B[i](k, n) for i < batch, bf16 out.
//   A[i][m][k] at a[i * a_batch_stride + m * lda + k]
//   B[i](k, n) at b[i * b_batch_stride + k * ldb + n] when b_kn (K x N rows),
//              at b[i * b_batch_stride + n * ldb + k] otherwise (N x K rows)
//   C[i][m][n] at c[i * c_batch_stride + m * ldc + n]
// n multiple of 64, k multiple of 32; strides multiples of 8 elements and
// pointers 16-byte aligned; any m.
struct BatchedGemmParams {
  const __nv_bfloat16* a = nullptr;
  int64_t lda = 0;
  int64_t a_batch_stride = 0;
  const __nv_bfloat16* b = nullptr;
  int64_t ldb = 0;
  int64_t b_batch_stride = 0;
  bool b_kn = true;
  __nv_bfloat16* c = nullptr;
  int64_t ldc = 0;
  int64_t c_batch_stride = 0;
  int64_t m = 0;
  int n = 0;
  int k = 0;
  int batch = 1;
  // Rows per CTA tile: 0 chooses (16 up to 16 rows, 128 from 256 rows, else
  // 64); 16, 64 or 128 forces one (tests and benchmarks). All give the same
  // bits.
  int tile_rows = 0;
};
bool BatchedGemmSupported(int n, int k);
absl::Status LaunchBatchedGemm(const BatchedGemmParams& params, cudaStream_t stream);

// kv_b: bf16 [heads, nope_dim + v_dim, 512] contiguous (this rank's heads).
struct MlaAbsorbWeights {
  const __nv_bfloat16* kv_b = nullptr;
  int heads = 0;
  int nope_dim = 0;  // 192 GLM-5, 128 DeepSeek-V3.2 (multiple of 32)
  int v_dim = 0;     // 256 GLM-5, 128 DeepSeek-V3.2 (multiple of 64)
};

// q_latent = q_nope · W_UK. q: [tokens, heads, q_head_dim] with q_nope the
// first nope_dim values of each head (q_head_dim = nope_dim + 64);
// q_latent written to q_out[t * q_out_token_stride + h * q_out_head_stride
// + 0..511] (e.g. the 576-wide attention query buffer).
absl::Status LaunchMlaQAbsorb(const MlaAbsorbWeights& w, const __nv_bfloat16* q, int64_t tokens, int q_head_dim,
                              __nv_bfloat16* q_out, int64_t q_out_token_stride, int64_t q_out_head_stride,
                              cudaStream_t stream);

// o = o_latent · W_UVᵀ. o_latent: [tokens, heads, 512] at
// o_lat[t * o_lat_token_stride + h * o_lat_head_stride]; out: [tokens,
// heads * v_dim] contiguous per token (the o_proj input).
absl::Status LaunchMlaOutUnabsorb(const MlaAbsorbWeights& w, const __nv_bfloat16* o_lat, int64_t tokens,
                                  int64_t o_lat_token_stride, int64_t o_lat_head_stride, __nv_bfloat16* out,
                                  cudaStream_t stream);

// The sparse MLA's split partials (SparseMlaParams::defer_merge): split s
// of row t * heads + h at o[(s * tokens * heads + t * heads + h) * 512], its
// log-sum-exp at lse[s * tokens * heads + t * heads + h] (SparseMlaPartials).
struct MlaSplitPartials {
  const float* o = nullptr;
  const float* lse = nullptr;
  int splits = 0;
};

// The split merge and the un-absorption in one launch at decode sizes:
// o[t, h] = merge_s(partials[s, t, h]) · W_UV[h]ᵀ, bit for bit what
// LaunchSparseMla's merge followed by LaunchMlaOutUnabsorb writes. Each
// head's CTAs merge its rows themselves, so it fits few tokens x splits
// only (MlaMergeUnabsorbFits: 1..16 tokens, tokens x splits <= 64).
bool MlaMergeUnabsorbFits(int64_t tokens, int splits);
absl::Status LaunchMlaMergeUnabsorb(const MlaAbsorbWeights& w, const MlaSplitPartials& parts, int64_t tokens,
                                    __nv_bfloat16* out, cudaStream_t stream);

// The batched GEMMs the q absorption and un-absorption launchers run (after checking w), for a
// caller that sets more of them (benchmarks force BatchedGemmParams::tile_rows).
BatchedGemmParams MlaQAbsorbGemm(const MlaAbsorbWeights& w, const __nv_bfloat16* q, int64_t tokens, int q_head_dim,
                                 __nv_bfloat16* q_out, int64_t q_out_token_stride, int64_t q_out_head_stride);
BatchedGemmParams MlaOutUnabsorbGemm(const MlaAbsorbWeights& w, const __nv_bfloat16* o_lat, int64_t tokens,
                                     int64_t o_lat_token_stride, int64_t o_lat_head_stride, __nv_bfloat16* out);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_ATTENTION_ABSORB_GEMM_H_
