// Weights on the GPU and their upload: each checkpoint matrix as the GEMM
// takes it (block-FP8 kept as stored, or bf16), the fused multi-part linear
// layers, norms, the embedding, MLA's absorption matrices, dense MLPs and MoE
// layers with their experts packed [E, n, k] for the grouped GEMM. The load
// time rewrites of a weight (FP8 slices, padding, expert packing) happen here
// and nowhere else.
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
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar {

struct CudaMatrix {
  GemmWeight gemm;  // pointers into the buffers below
  int64_t cols = 0;
  DeviceBuffer values, scales;
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

struct CudaMlp : Weight {
  CudaMatrix gate, up, down;
  int64_t inter = 0;  // the (padded) intermediate size
};

// Local experts' projections packed [E, n, k] (+ scales [E, n/128, k/128]).
struct PackedExperts {
  DeviceBuffer values, scales;
  GemmWeight first;  // expert 0
  int64_t weight_stride = 0, scale_stride = 0;
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

absl::StatusOr<std::unique_ptr<Weight>> UploadLinear(const LinearSource& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadVector(const TensorView& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadEmbedding(const TensorView& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadAbsorb(const AbsorbSource& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadMlp(const MlpSource& src);
absl::StatusOr<std::unique_ptr<Weight>> UploadMoe(const MoeSource& src);

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_DEVICE_WEIGHTS_H_
