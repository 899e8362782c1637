#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar::cuda_ops {

absl::StatusOr<Tensor> Embed(StepContext& ctx, const CudaEmbedding& e) {
  SPAR_RETURN_IF_ERROR(ctx.Mark("embed"));
  SPAR_ASSIGN_OR_RETURN(Tensor x, ctx.NewTensor(ctx.meta.tokens, e.dim));
  EmbeddingParams p;
  p.ids = ctx.meta.ids;
  p.tokens = ctx.meta.tokens;
  p.table = e.table.as<__nv_bfloat16>();
  p.vocab = e.vocab;
  p.dim = static_cast<int>(e.dim);
  p.out = x.as<__nv_bfloat16>();
  p.out_stride = x.ld();
  SPAR_RETURN_IF_ERROR(LaunchEmbedding(p, ctx.stream));
  return x;
}

RmsNormParams RmsNormParamsFor(const Tensor& x, Tensor* residual, const CudaVector& w, float eps, const Tensor& out) {
  RmsNormParams p;
  p.x = x.as<__nv_bfloat16>();
  p.x_stride = x.ld();
  if (residual != nullptr) {
    p.residual = residual->as<__nv_bfloat16>();
    p.residual_stride = residual->ld();
  }
  p.weight = w.bf16.as<__nv_bfloat16>();
  p.out = out.as<__nv_bfloat16>();
  p.out_stride = out.ld();
  p.rows = x.rows();
  p.dim = static_cast<int>(x.cols());
  p.eps = eps;
  return p;
}

absl::StatusOr<Tensor> RmsNorm(StepContext& ctx, const Tensor& x, Tensor* residual, const CudaVector& w, float eps) {
  SPAR_RETURN_IF_ERROR(ctx.Mark(residual != nullptr ? "add_rms_norm" : "rms_norm"));
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(x.rows(), x.cols()));
  SPAR_RETURN_IF_ERROR(LaunchRmsNorm(RmsNormParamsFor(x, residual, w, eps, out), ctx.stream));
  return out;
}

absl::Status AddInPlace(StepContext& ctx, Tensor* acc, const Tensor& x) {
  if (acc->rows() != x.rows() || acc->cols() != x.cols()) return absl::InvalidArgumentError("add: shape mismatch");
  SPAR_RETURN_IF_ERROR(ctx.Mark("add"));
  return LaunchAddBf16(acc->as<__nv_bfloat16>(), acc->ld(), x.as<__nv_bfloat16>(), x.ld(), x.rows(), x.cols(),
                       ctx.stream);
}

absl::StatusOr<Tensor> GatherRows(StepContext& ctx, const Tensor& x, const std::vector<int32_t>& rows) {
  SPAR_RETURN_IF_ERROR(ctx.Mark("gather_rows"));
  SPAR_ASSIGN_OR_RETURN(Tensor y, ctx.NewTensor(static_cast<int64_t>(rows.size()), x.cols(), x.dtype()));
  const int32_t* d_rows = ctx.meta.logit_rows;
  Tensor tmp;  // stream-ordered: no host synchronisation for its lifetime
  if (ctx.meta.plan == nullptr || rows != ctx.meta.plan->logit_rows) {
    SPAR_ASSIGN_OR_RETURN(tmp, ctx.Upload(rows.data(), static_cast<int64_t>(rows.size()), DType::kI32));
    d_rows = tmp.as<int32_t>();
  }
  SPAR_RETURN_IF_ERROR(LaunchGatherRows(x.data(), x.ld(), d_rows, static_cast<int64_t>(rows.size()), x.cols(),
                                        static_cast<int>(DTypeSize(x.dtype())), y.data(), y.ld(), ctx.stream));
  return y;
}

absl::Status ZeroRows(StepContext& ctx, Tensor* x, const std::vector<int32_t>& rows) {
  SPAR_RETURN_IF_ERROR(ctx.Mark("zero_rows"));
  const size_t elem = DTypeSize(x->dtype());
  for (int32_t r : rows) {
    if (r < 0 || r >= x->rows()) return absl::InvalidArgumentError("zero rows: row out of range");
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(static_cast<uint8_t*>(x->data()) + static_cast<size_t>(r) * x->ld() * elem,
                                              0, static_cast<size_t>(x->cols()) * elem, ctx.stream));
  }
  return absl::OkStatus();
}

}  // namespace spar::cuda_ops
