// Weights on the GPU and their upload: each checkpoint matrix as the GEMM
// takes it (block-FP8 kept as stored, 4-bit repacked into the W4A16 kernel's
// layout, or bf16), the fused multi-part linear layers, norms, the
// embedding, MLA's absorption matrices, dense MLPs and MoE layers with their
// experts packed [E, n, k] for the grouped GEMM. The load time rewrites of a
// weight (FP8 slices, 4-bit repacking, SiLU pairing and the stacking of a
// fused linear's 4-bit parts, padding, the W8A16 GEMM's tiles, expert
// packing) happen here and nowhere else.
#ifndef SPAR_ENGINE_CUDA_DEVICE_WEIGHTS_H_
#define SPAR_ENGINE_CUDA_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/device_buffer.h"
#include "kernels/cuda/attention/absorb_gemm.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar {

// The device buffers of a 4-bit matrix (w4_layout.h) and its kernel view.
struct W4Buffers {
  W4GemmWeight w;  // pointers into the buffers below
  DeviceBuffer values, scales, zeros, fp4_scales, global;
};

struct CudaMatrix {
  GemmWeight gemm;  // pointers into the buffers below (unused when four_bit)
  int64_t cols = 0;
  DeviceBuffer values, scales;
  // 4-bit in the W4A16 kernel's layout (else bf16 / FP8 in `gemm`). A SiLU
  // pair holds gate and up together (CudaMlp::gate, with up unused).
  bool four_bit = false;
  W4Buffers w4;
  int64_t n() const { return four_bit ? w4.w.n : gemm.n; }
};

// y = x · Wᵀ over up to kMaxGemmSegments parts stacked along the output.
struct CudaLinear : Weight {
  std::vector<std::unique_ptr<CudaMatrix>> parts;
  int64_t n_total = 0, k = 0;
  bool fp32_out = false;  // logits
};

// A norm weight (or bias) in bf16 and fp32: kernels take one or the other.
struct CudaVector : Weight {
  DeviceBuffer bf16, f32;
  int64_t n = 0;
};

struct CudaEmbedding : Weight {
  DeviceBuffer table;  // bf16 [vocab, dim]
  int64_t vocab = 0, dim = 0;
};

struct CudaAbsorb : Weight {
  DeviceBuffer kv_b;  // bf16 [heads, nope + v, 512]
  MlaAbsorbWeights w;
};

// 4-bit gate and up are one SiLU pair in `gate` (gate.four_bit with
// w4.w.silu_pair; `up` unused).
struct CudaMlp : Weight {
  CudaMatrix gate, up, down;
  int64_t inter = 0;  // the (padded) intermediate size
  bool silu_pair() const { return gate.four_bit && gate.w4.w.silu_pair; }
};

// Local experts' projections packed [E, n, k] (+ scales [E, n/128, k/128]),
// or 4-bit: every expert's W4A16 layout back to back (gate: SiLU pairs).
struct PackedExperts {
  DeviceBuffer values, scales;
  GemmWeight first;  // expert 0
  int64_t weight_stride = 0, scale_stride = 0;
  bool four_bit = false;
  W4Buffers w4;  // expert 0's view; strides below
  int64_t w4_values_stride = 0, w4_scales_stride = 0, w4_zeros_stride = 0, w4_fp4_stride = 0;
};

struct CudaMoe : Weight {
  CudaMatrix router;  // bf16 [E, hidden]
  DeviceBuffer bias;  // f32 [E]
  PackedExperts gate, up, down;
  int num_local = 0, expert_begin = 0;
  int64_t inter = 0, hidden = 0;
  std::unique_ptr<CudaMlp> shared;
  MoeRouteParams route;  // shapes and routing constants
};

template <typename T>
const T& As(const Weight& w) {
  return static_cast<const T&>(w);
}

// `layout`: how the FP8 / bf16 matrices the W8A16 GEMM reads are stored
// (GemmWeightLayout, w8a16_tiles.h). The MoE router stays row-major either
// way (its one-token GEMV reads rows).
absl::StatusOr<std::unique_ptr<Weight>> UploadLinear(const LinearSource& src, GemmWeightLayout layout);
absl::StatusOr<std::unique_ptr<Weight>> UploadVector(const TensorView& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadEmbedding(const TensorView& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadAbsorb(const AbsorbSource& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadMlp(const MlpSource& src, GemmWeightLayout layout);
absl::StatusOr<std::unique_ptr<Weight>> UploadMoe(const MoeSource& src, GemmWeightLayout layout);

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_DEVICE_WEIGHTS_H_
