#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar::cuda_ops {
namespace {

// The W8A16 GEMM over `segments` into y (a column range of a wider tensor
// when ldy says so).
absl::Status W8A16Into(StepContext& ctx, const Tensor& x, const std::vector<const GemmWeight*>& segments, void* y,
                       int64_t ldy, bool fp32_out, const GemmWeight* up) {
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
  p.y = y;
  p.ldy = ldy;
  p.y_fp32 = fp32_out;
  p.workspace = ctx.gemm_workspace;
  p.workspace_bytes = ctx.gemm_workspace_bytes;
  p.num_sms = ctx.device.sm_count;
  return LaunchW8A16Gemm(p, ctx.stream);
}

// The W4A16 GEMM of one 4-bit matrix (a SiLU pair applies SiLU·mul) into y.
absl::Status W4A16Into(StepContext& ctx, const Tensor& x, const W4GemmWeight& w, void* y, int64_t ldy, bool fp32_out) {
  if (ctx.profiling()) SPAR_RETURN_IF_ERROR(ctx.Mark(absl::StrCat("gemm w4 ", w.silu_pair ? "gate_up " : "", w.n, "x", x.cols())));
  W4A16GemmParams p;
  p.m = x.rows();
  p.k = x.cols();
  p.x = x.as<__nv_bfloat16>();
  p.ldx = x.ld();
  p.w = w;
  p.y = y;
  p.ldy = ldy;
  p.y_fp32 = fp32_out;
  p.workspace = ctx.gemm_workspace;
  p.workspace_bytes = ctx.gemm_workspace_bytes;
  p.num_sms = ctx.device.sm_count;
  return LaunchW4A16Gemm(p, ctx.stream);
}

char* ColumnOf(const Tensor& y, int64_t col) { return static_cast<char*>(y.data()) + col * DTypeSize(y.dtype()); }

}  // namespace

absl::StatusOr<Tensor> Gemm(StepContext& ctx, const Tensor& x, const std::vector<const GemmWeight*>& segments,
                            int64_t n_out, bool fp32_out, const GemmWeight* up) {
  // The label is built only while profiling: Gemm is on every step's path.
  if (ctx.profiling()) {
    SPAR_RETURN_IF_ERROR(ctx.Mark(absl::StrCat("gemm ", up != nullptr ? "gate_up " : "", n_out, "x", x.cols())));
  }
  SPAR_ASSIGN_OR_RETURN(Tensor y, ctx.NewTensor(x.rows(), n_out, fp32_out ? DType::kF32 : DType::kBF16));
  SPAR_RETURN_IF_ERROR(W8A16Into(ctx, x, segments, y.data(), y.ld(), fp32_out, up));
  return y;
}

absl::StatusOr<Tensor> MatrixGemm(StepContext& ctx, const Tensor& x, const CudaMatrix& w, bool fp32_out) {
  if (!w.four_bit) return Gemm(ctx, x, {&w.gemm}, w.gemm.n, fp32_out);
  SPAR_ASSIGN_OR_RETURN(Tensor y, ctx.NewTensor(x.rows(), w.w4.w.n, fp32_out ? DType::kF32 : DType::kBF16));
  SPAR_RETURN_IF_ERROR(W4A16Into(ctx, x, w.w4.w, y.data(), y.ld(), fp32_out));
  return y;
}

absl::StatusOr<Tensor> Linear(StepContext& ctx, const Tensor& x, const CudaLinear& w) {
  if (x.cols() != w.k) {
    return absl::InvalidArgumentError(absl::StrCat("linear: input has ", x.cols(), " columns, weight ", w.k));
  }
  bool any_four_bit = false;
  for (const auto& part : w.parts) any_four_bit |= part->four_bit;
  std::vector<const GemmWeight*> segs;
  if (!any_four_bit) {
    for (const auto& part : w.parts) segs.push_back(&part->gemm);
    return Gemm(ctx, x, segs, w.n_total, w.fp32_out);
  }
  // Mixed parts (the fused A projection: 4-bit q_a ‖ kv_a next to bf16
  // indexer weights): each run of same-kind parts writes its columns, the
  // 4-bit runs on the step's stream and the others beside them on the
  // branch stream (ctx.Concurrently: serial when the step does not overlap),
  // so the small bf16 GEMM's launch ramp hides under the 4-bit one.
  if (ctx.profiling()) SPAR_RETURN_IF_ERROR(ctx.Mark(absl::StrCat("gemm mixed ", w.n_total, "x", x.cols())));
  SPAR_ASSIGN_OR_RETURN(Tensor y, ctx.NewTensor(x.rows(), w.n_total, w.fp32_out ? DType::kF32 : DType::kBF16));
  struct Run {
    int64_t col;
    std::vector<const GemmWeight*> segments;
  };
  std::vector<Run> stored_runs;
  std::vector<std::pair<int64_t, const W4GemmWeight*>> four_bit_parts;
  int64_t col = 0;
  bool in_run = false;
  for (const auto& part : w.parts) {
    if (part->four_bit) {
      four_bit_parts.emplace_back(col, &part->w4.w);
      in_run = false;
    } else {
      if (!in_run) stored_runs.push_back({col, {}});
      stored_runs.back().segments.push_back(&part->gemm);
      in_run = true;
    }
    col += part->n();
  }
  auto stored = [&]() -> absl::Status {
    for (const Run& r : stored_runs) {
      SPAR_RETURN_IF_ERROR(W8A16Into(ctx, x, r.segments, ColumnOf(y, r.col), y.ld(), w.fp32_out, nullptr));
    }
    return absl::OkStatus();
  };
  auto four_bit = [&]() -> absl::Status {
    for (const auto& [c, w4] : four_bit_parts) {
      SPAR_RETURN_IF_ERROR(W4A16Into(ctx, x, *w4, ColumnOf(y, c), y.ld(), w.fp32_out));
    }
    return absl::OkStatus();
  };
  // A linear of 4-bit parts only (o_proj, q_b) has nothing to put beside them.
  SPAR_RETURN_IF_ERROR(stored_runs.empty() ? four_bit() : ctx.Concurrently(stored, four_bit));
  return y;
}

absl::StatusOr<Tensor> SiluMulGemm(StepContext& ctx, const Tensor& x, const CudaMlp& m) {
  if (!m.silu_pair()) return Gemm(ctx, x, {&m.gate.gemm}, m.inter, false, &m.up.gemm);
  return MatrixGemm(ctx, x, m.gate, /*fp32_out=*/false);
}

absl::StatusOr<Tensor> Mlp(StepContext& ctx, const Tensor& x, const CudaMlp& m) {
  SPAR_ASSIGN_OR_RETURN(Tensor h, SiluMulGemm(ctx, x, m));
  // Under TP the output is a partial sum: keep it fp32 for the all-reduce.
  return MatrixGemm(ctx, h, m.down, /*fp32_out=*/ctx.tp_size > 1);
}

}  // namespace spar::cuda_ops
