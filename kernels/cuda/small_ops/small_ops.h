// The small per-layer ops of the cuda backend, bf16 in and out with fp32
// math, each matching its kernels/ref counterpart:
//   RMSNorm, optionally fused with the residual add   (ref::RmsNorm)
//   LayerNorm with weight and bias                     (ref::LayerNorm)
//   RoPE, interleaved or half-split, on a column range (ref::ApplyRope)
//   embedding gather                                   (table lookup)
//   SiLU·mul                                           (ref::SiluMul)
// and the element-wise glue between the op families (elementwise.cu):
//   residual add, fp32 -> bf16 cast, row gather, and a GPU-side wait.
// Row strides are in elements. Vector widths: dims and strides multiples of 8
// and pointers 16-byte aligned unless a field says otherwise.
#ifndef SPAR_KERNELS_CUDA_SMALL_OPS_SMALL_OPS_H_
#define SPAR_KERNELS_CUDA_SMALL_OPS_SMALL_OPS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace spar {

// out[r] = w ⊙ x'[r] · rsqrt(mean(x'[r]²) + eps), where x' = x, or, when
// residual is set, residual[r] += x[r] (rounded to bf16 and stored back) and
// x' = the new residual row. out may alias x.
struct RmsNormParams {
  const __nv_bfloat16* x = nullptr;
  int64_t x_stride = 0;
  __nv_bfloat16* residual = nullptr;  // optional, [rows, dim]
  int64_t residual_stride = 0;
  const __nv_bfloat16* weight = nullptr;  // [dim]
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
  int dim = 0;  // multiple of 8, <= 32768
  float eps = 1e-6f;
};
bool RmsNormSupported(int dim);
// The launch's argument checks (LaunchRmsNorm runs them; so does a kernel
// that fuses an RMSNorm with another job).
absl::Status CheckRmsNormParams(const RmsNormParams& params);
absl::Status LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream);

// out[r] = (x[r] - mean) · rsqrt(var + eps) ⊙ w + b (biased variance).
struct LayerNormParams {
  const __nv_bfloat16* x = nullptr;
  int64_t x_stride = 0;
  const __nv_bfloat16* weight = nullptr;  // [dim]
  const __nv_bfloat16* bias = nullptr;    // [dim]
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
  int dim = 0;  // multiple of 8, <= 32768
  float eps = 1e-6f;
};
absl::Status LaunchLayerNorm(const LayerNormParams& params, cudaStream_t stream);

// Rotates in[r][in_offset .. + rotary_dim) and writes the result to
// out[r][out_offset .. + rotary_dim) (in place when out == in and the
// offsets match; other columns of out are left alone). Row r uses
// positions[r / rows_per_position] (the heads of one token share it).
// Angles: position · inv_freq[i] (device, rotary_dim / 2 floats from
// ref::RopeInvFreq, YaRN included); cos/sin times attention_factor.
// Element strides and offsets may be any values (2-byte accesses).
struct RopeApplyParams {
  const __nv_bfloat16* in = nullptr;
  int64_t in_stride = 0;
  int in_offset = 0;
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;
  int out_offset = 0;
  int64_t rows = 0;
  int rows_per_position = 1;
  // Elements between the first input rows of consecutive positions (a
  // token's heads inside a wider row, e.g. q beside the indexer's query
  // columns); 0: rows_per_position * in_stride (packed).
  int64_t in_position_stride = 0;
  const int32_t* positions = nullptr;
  int rotary_dim = 64;  // even
  const float* inv_freq = nullptr;
  float attention_factor = 1.0f;
  bool interleaved = true;  // false: half-split (NeoX) pairs (i, i + d/2)
};
// InvalidArgument naming the field, or OK (rows == 0 is a no-op).
absl::Status CheckRopeApplyParams(const RopeApplyParams& params);
absl::Status LaunchRopeApply(const RopeApplyParams& params, cudaStream_t stream);

// out[t] = table[ids[t]]; ids outside [0, vocab) give a zero row.
struct EmbeddingParams {
  const int32_t* ids = nullptr;
  int64_t tokens = 0;
  const __nv_bfloat16* table = nullptr;  // [vocab, dim] contiguous
  int64_t vocab = 0;
  int dim = 0;  // multiple of 8
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;
};
absl::Status LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

// out[r][i] = silu(gate[r][i]) · up[r][i]; gate and up rows at in_stride
// (e.g. both halves of one fused gate_up projection row).
struct SiluMulParams {
  const __nv_bfloat16* gate = nullptr;
  const __nv_bfloat16* up = nullptr;
  int64_t in_stride = 0;
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
  int dim = 0;  // multiple of 8
};
absl::Status LaunchSiluMul(const SiluMulParams& params, cudaStream_t stream);

// ---- element-wise glue (no vector-width requirements) ----

// acc[r][c] += x[r][c] for r < rows, c < cols (fp32 add, rounded to bf16).
absl::Status LaunchAddBf16(__nv_bfloat16* acc, int64_t ld_acc, const __nv_bfloat16* x, int64_t ldx, int64_t rows,
                           int64_t cols, cudaStream_t stream);

// out[i] = bf16(x[i]) for i < n (round to nearest even).
absl::Status LaunchCastF32ToBf16(const float* x, int64_t n, __nv_bfloat16* out, cudaStream_t stream);

// out row i = x row rows[i] (row strides in elements of elem_bytes: 2 or 4);
// every rows[i] must name a row of x.
absl::Status LaunchGatherRows(const void* x, int64_t ldx, const int32_t* rows, int64_t num_rows, int64_t cols,
                              int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream);

// Keeps the stream busy for about `ns` nanoseconds (one thread sleeping on
// %globaltimer): the op profile puts it before a step so that the host's
// enqueueing is hidden behind it.
absl::Status LaunchSpinWait(int64_t ns, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_SMALL_OPS_SMALL_OPS_H_
