#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar::cuda_ops {

absl::StatusOr<Tensor> Gemm(StepContext& ctx, const Tensor& x, const std::vector<const GemmWeight*>& segments,
                            int64_t n_out, bool fp32_out, const GemmWeight* up) {
  // The label is built only while profiling: Gemm is on every step's path.
  if (ctx.profiling()) {
    SPAR_RETURN_IF_ERROR(ctx.Mark(absl::StrCat("gemm ", up != nullptr ? "gate_up " : "", n_out, "x", x.cols())));
  }
  SPAR_ASSIGN_OR_RETURN(Tensor y, ctx.NewTensor(x.rows(), n_out, fp32_out ? DType::kF32 : DType::kBF16));
  W8A16GemmParams p;
  p.m = x.rows();
  p.k = x.cols();
  p.x = x.as<__nv_bfloat16>();
  p.ldx = x.ld();
  p.num_segments = static_cast<int>(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) p.segments[i] = *segments[i];
  if (up != nullptr) {
    p.epilogue = GemmEpilogue::kSiluMul;
    p.up = *up;
  }
  p.y = y.data();
  p.ldy = y.ld();
  p.y_fp32 = fp32_out;
  p.workspace = ctx.gemm_workspace;
  p.workspace_bytes = ctx.gemm_workspace_bytes;
  p.num_sms = ctx.device.sm_count;
  SPAR_RETURN_IF_ERROR(LaunchW8A16Gemm(p, ctx.stream));
  return y;
}

absl::StatusOr<Tensor> Linear(StepContext& ctx, const Tensor& x, const CudaLinear& w) {
  if (x.cols() != w.k) {
    return absl::InvalidArgumentError(absl::StrCat("linear: input has ", x.cols(), " columns, weight ", w.k));
  }
  std::vector<const GemmWeight*> segs;
  for (const auto& part : w.parts) segs.push_back(&part->gemm);
  return Gemm(ctx, x, segs, w.n_total, w.fp32_out);
}

absl::StatusOr<Tensor> Mlp(StepContext& ctx, const Tensor& x, const CudaMlp& m) {
  SPAR_ASSIGN_OR_RETURN(Tensor h, Gemm(ctx, x, {&m.gate.gemm}, m.inter, false, &m.up.gemm));
  // Under TP the output is a partial sum: keep it fp32 for the all-reduce.
  return Gemm(ctx, h, {&m.down.gemm}, m.down.gemm.n, /*fp32_out=*/ctx.tp_size > 1);
}

}  // namespace spar::cuda_ops
