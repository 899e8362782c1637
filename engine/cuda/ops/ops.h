// The cuda backend's op adapters, one file per op family: each turns one
// engine op (backend.h) into launches of the sm80 kernels of that family,
// reading only the step context and the device weights. Thin by design:
// shapes and pointers in, the kernel's params struct filled, launch, the
// output tensor back; all math is in kernels/cuda.
#ifndef SPAR_ENGINE_CUDA_OPS_OPS_H_
#define SPAR_ENGINE_CUDA_OPS_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/step_context.h"
#include "engine/tensor.h"

namespace spar::cuda_ops {

// ---- gemm_ops.cc: the W8A16 and W4A16 GEMMs and what is built on them ----
// y = x · [segments]ᵀ (n_out columns), or SiLU(x·gateᵀ) ⊙ x·upᵀ with `up`.
absl::StatusOr<Tensor> Gemm(StepContext& ctx, const Tensor& x, const std::vector<const GemmWeight*>& segments,
                            int64_t n_out, bool fp32_out, const GemmWeight* up = nullptr);
// y = x · Wᵀ for one matrix of any stored kind (4-bit: the W4A16 GEMM; a
// 4-bit SiLU pair gives SiLU(x·gateᵀ) ⊙ x·upᵀ).
absl::StatusOr<Tensor> MatrixGemm(StepContext& ctx, const Tensor& x, const CudaMatrix& w, bool fp32_out);
// An MLP's gate/up with the SiLU·mul epilogue (W8A16, or a 4-bit pair).
absl::StatusOr<Tensor> SiluMulGemm(StepContext& ctx, const Tensor& x, const CudaMlp& m);
absl::StatusOr<Tensor> Linear(StepContext& ctx, const Tensor& x, const CudaLinear& w);
// gate_up with the SiLU·mul epilogue, then down; fp32 out under TP (a
// partial sum for the all-reduce).
absl::StatusOr<Tensor> Mlp(StepContext& ctx, const Tensor& x, const CudaMlp& m);

// ---- moe_ops.cc: route, permute, grouped GEMMs, combine with the shared expert ----
absl::StatusOr<Tensor> Moe(StepContext& ctx, const Tensor& x, const CudaMoe& moe);

// ---- small_ops.cc: embedding, norms, residual add, row gather and zeroing ----
absl::StatusOr<Tensor> Embed(StepContext& ctx, const CudaEmbedding& e);
// The norm's launch arguments over x (and the residual, when set) into out.
RmsNormParams RmsNormParamsFor(const Tensor& x, Tensor* residual, const CudaVector& w, float eps, const Tensor& out);
// RMSNorm of x, or of residual += x when residual is set.
absl::StatusOr<Tensor> RmsNorm(StepContext& ctx, const Tensor& x, Tensor* residual, const CudaVector& w, float eps);
absl::Status AddInPlace(StepContext& ctx, Tensor* acc, const Tensor& x);
absl::StatusOr<Tensor> GatherRows(StepContext& ctx, const Tensor& x, const std::vector<int32_t>& rows);
// Zeroes whole rows of x (host row numbers: eager steps only).
absl::Status ZeroRows(StepContext& ctx, Tensor* x, const std::vector<int32_t>& rows);

// ---- attention_ops.cc: MLA's latent cache, absorption, sparse attention ----
absl::Status WriteLatentCache(StepContext& ctx, int layer, const Tensor& kv_a, const CudaVector& norm, float eps);
absl::StatusOr<Tensor> AbsorbQuery(StepContext& ctx, const Tensor& q, const CudaAbsorb& a);
// WriteLatentCache + AbsorbQuery with the query's RoPE in the cache write's launch.
absl::StatusOr<Tensor> WriteLatentCacheAndAbsorbQuery(StepContext& ctx, int layer, const Tensor& kv_a,
                                                      const CudaVector& norm, float eps, const Tensor& q,
                                                      const CudaAbsorb& a);
absl::StatusOr<Tensor> SparseMla(StepContext& ctx, int layer, const Tensor& q_abs, const Tensor& indices, float scale);
absl::StatusOr<Tensor> UnabsorbOutput(StepContext& ctx, const Tensor& o_lat, const CudaAbsorb& a);
// SparseMla + UnabsorbOutput; at decode sizes the split merge runs inside the
// un-absorption (LaunchMlaMergeUnabsorb), the same bits in one launch fewer.
absl::StatusOr<Tensor> AttendAndUnabsorb(StepContext& ctx, int layer, const Tensor& q_abs, const Tensor& indices,
                                         float scale, const CudaAbsorb& a);

// ---- indexer_ops.cc: the lightning indexer's key cache and top-k ----
absl::Status WriteIndexerCache(StepContext& ctx, int layer, const Tensor& k, const CudaVector& norm_w,
                               const CudaVector& norm_b, float eps, const IndexerSpec& spec);
// RmsNorm(x) (no residual) and WriteIndexerCache(k) in one launch.
absl::StatusOr<Tensor> RmsNormAndWriteIndexerCache(StepContext& ctx, const Tensor& x, const CudaVector& w, float eps,
                                                   int layer, const Tensor& k, const CudaVector& k_norm_w,
                                                   const CudaVector& k_norm_b, float k_eps, const IndexerSpec& spec);
absl::StatusOr<Tensor> IndexerTopK(StepContext& ctx, int layer, const Tensor& q, const Tensor& w,
                                   const IndexerSpec& spec);

// ---- sampling_ops.cc: one token per logits row on the GPU ----
absl::StatusOr<std::vector<SampleResult>> Sample(StepContext& ctx, const Tensor& logits,
                                                 const std::vector<SampleRequest>& requests);

}  // namespace spar::cuda_ops

#endif  // SPAR_ENGINE_CUDA_OPS_OPS_H_
