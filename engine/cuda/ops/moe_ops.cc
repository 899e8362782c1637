#include <algorithm>
#include <cstdint>

#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"

namespace spar::cuda_ops {
namespace {

// One grouped GEMM over the permuted rows: out[row] = in[row_index[row]] ·
// expert(row)ᵀ (with the SiLU·mul epilogue when `up` is set).
struct GroupedGemm {
  StepContext& ctx;
  const CudaMoe& moe;
  const Tensor& offsets;
  const Tensor& workspace;
  size_t workspace_bytes;
  int64_t rows;

  // The FP8 / bf16 launch's parameters but the activations and the output.
  MoeGroupedGemmParams Params(int64_t k, const PackedExperts& weight, const PackedExperts* up) const {
    MoeGroupedGemmParams g;
    g.num_experts = moe.num_local;
    g.expert_offsets = offsets.as<int32_t>();
    g.max_rows = rows;
    g.expected_rows_per_expert = std::max<int64_t>(1, rows / std::max(1, moe.route.num_experts));
    g.k = k;
    g.weight = weight.first;
    g.expert_weight_stride = weight.weight_stride;
    g.expert_scale_stride = weight.scale_stride;
    if (up != nullptr) {
      g.epilogue = GemmEpilogue::kSiluMul;
      g.up = up->first;
    }
    g.workspace = workspace.data();
    g.workspace_bytes = workspace_bytes;
    g.num_sms = ctx.device.sm_count;
    return g;
  }
  // The 4-bit launch's parameters but the activations and the output (a
  // 4-bit gate/up pair carries its own SiLU·mul).
  W4MoeGroupedGemmParams W4Params(int64_t k, const PackedExperts& weight) const {
    W4MoeGroupedGemmParams g;
    g.num_experts = moe.num_local;
    g.expert_offsets = offsets.as<int32_t>();
    g.max_rows = rows;
    g.expected_rows_per_expert = std::max<int64_t>(1, rows / std::max(1, moe.route.num_experts));
    g.max_rows_per_expert = rows / std::max(1, moe.route.top_k);  // a token's experts are distinct
    g.k = k;
    g.weight = weight.w4.w;
    g.values_stride = weight.w4_values_stride;
    g.scales_stride = weight.w4_scales_stride;
    g.zeros_stride = weight.w4_zeros_stride;
    g.fp4_scales_stride = weight.w4_fp4_stride;
    g.workspace = workspace.data();
    g.workspace_bytes = workspace_bytes;
    g.num_sms = ctx.device.sm_count;
    return g;
  }
  // Rows per work entry of the launch Run will make: the height of the list
  // the permutation is to write for it (0: none, a height the permutation's
  // lists have no room for).
  int BlockTokens(int64_t k, const PackedExperts& weight, const PackedExperts* up) const {
    const int bt = weight.four_bit ? W4MoeGroupedGemmBlockTokens(W4Params(k, weight))
                                   : MoeGroupedGemmBlockTokens(Params(k, weight, up));
    return bt >= kMinWorkListBlockTokens ? bt : 0;
  }

  // work / work_block_tokens: the list the permutation wrote for this
  // launch's tile height (null / 0: the launch builds its own).
  absl::StatusOr<Tensor> Run(const Tensor& in, const int32_t* row_index, const PackedExperts& weight,
                             const PackedExperts* up, int64_t n_out, const void* work, int work_block_tokens) const {
    SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(rows, n_out));
    if (weight.four_bit) {
      W4MoeGroupedGemmParams g = W4Params(in.cols(), weight);
      g.x = in.as<__nv_bfloat16>();
      g.ldx = in.ld();
      g.x_row_index = row_index;
      g.y = out.data();
      g.ldy = out.ld();
      g.work = work;
      g.work_block_tokens = work_block_tokens;
      SPAR_RETURN_IF_ERROR(LaunchW4MoeGroupedGemm(g, ctx.stream));
      return out;
    }
    MoeGroupedGemmParams g = Params(in.cols(), weight, up);
    g.x = in.as<__nv_bfloat16>();
    g.ldx = in.ld();
    g.x_row_index = row_index;
    g.y = out.data();
    g.ldy = out.ld();
    g.work = work;
    g.work_block_tokens = work_block_tokens;
    SPAR_RETURN_IF_ERROR(LaunchMoeGroupedGemm(g, ctx.stream));
    return out;
  }
};

}  // namespace

absl::StatusOr<Tensor> Moe(StepContext& ctx, const Tensor& x, const CudaMoe& moe) {
  const int64_t t_count = x.rows();
  const int k = moe.route.top_k;
  const int64_t rows = t_count * k;
  // The shared expert beside the routed ones (ctx.Concurrently): it needs
  // neither the routing nor the permuted rows, and at decode sizes the
  // routing kernels are latency-bound.
  Tensor shared;
  auto shared_expert = [&]() -> absl::Status {
    const auto& sh = *moe.shared;
    SPAR_ASSIGN_OR_RETURN(Tensor hs, SiluMulGemm(ctx, x, sh));
    SPAR_ASSIGN_OR_RETURN(shared, MatrixGemm(ctx, hs, sh.down, false));
    return absl::OkStatus();
  };
  Tensor wts, slot, yd;  // what the combine reads of the routed experts
  auto routed_experts = [&]() -> absl::Status {
    // One token (decode at batch 1): the router's GEMV joins the routing
    // launch (LaunchMoeRouterRoutePermute); otherwise the W8A16 GEMM.
    const GemmWeight& rw = moe.router.gemm;
    const int num_experts = moe.route.num_experts;
    Tensor logits;
    MoeRouterParams router;
    bool router_gemv = false;
    if (t_count == 1 && rw.type == GemmWeightType::kBf16 && rw.n == num_experts) {
      SPAR_ASSIGN_OR_RETURN(logits, ctx.NewTensor(1, num_experts, DType::kF32));
      router.x = x.as<__nv_bfloat16>();
      router.weight = static_cast<const __nv_bfloat16*>(rw.data);
      router.ld = rw.ld;
      router.hidden = x.cols();
      router.logits = logits.as<float>();
      MoeRouteParams shape;
      shape.tokens = 1;
      shape.num_experts = num_experts;
      shape.logits = logits.as<float>();
      shape.ld_logits = logits.ld();
      router_gemv = MoeRouterRoutePermuteSupported(router, shape);
    }
    if (!router_gemv) {
      SPAR_ASSIGN_OR_RETURN(logits, Gemm(ctx, x, {&rw}, num_experts, /*fp32_out=*/true));
    }
    SPAR_ASSIGN_OR_RETURN(Tensor ids, ctx.NewTensor(t_count, k, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(wts, ctx.NewTensor(t_count, k, DType::kF32));
    MoeRouteParams route = moe.route;
    route.tokens = t_count;
    route.logits = logits.as<float>();
    route.ld_logits = logits.ld();
    route.bias = moe.bias.as<float>();
    route.expert_ids = ids.as<int32_t>();
    route.expert_weights = wts.as<float>();
    SPAR_ASSIGN_OR_RETURN(Tensor offsets, ctx.NewTensor(1, moe.num_local + 1, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(Tensor sorted, ctx.NewTensor(1, rows, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(slot, ctx.NewTensor(t_count, k, DType::kI32));
    MoePermuteParams perm;
    perm.tokens = t_count;
    perm.top_k = k;
    perm.expert_ids = ids.as<int32_t>();
    perm.expert_begin = moe.expert_begin;
    perm.expert_end = moe.expert_begin + moe.num_local;
    perm.expert_offsets = offsets.as<int32_t>();
    perm.sorted_token = sorted.as<int32_t>();
    perm.slot = slot.as<int32_t>();
    const size_t ws_bytes = MoeGroupedGemmWorkspaceBytes(rows, moe.num_local);
    SPAR_ASSIGN_OR_RETURN(Tensor ws, ctx.NewTensor(1, static_cast<int64_t>(ws_bytes) + 16, DType::kU8));
    GroupedGemm grouped{ctx, moe, offsets, ws, ws_bytes, rows};
    // The permutation writes the two GEMMs' work lists (one if their tiles
    // agree): two launches fewer per layer. Each GEMM's tile height is
    // planned once here and its list handed to its launch.
    SPAR_ASSIGN_OR_RETURN(Tensor lists,
                          ctx.NewTensor(1, kMaxPermuteWorkLists * static_cast<int64_t>(ws_bytes), DType::kU8));
    const int gate_up_bt = grouped.BlockTokens(x.cols(), moe.gate, &moe.up);
    const int down_bt = grouped.BlockTokens(moe.inter, moe.down, nullptr);
    const void* gate_up_list = RequestPermuteWorkList(&perm, gate_up_bt, lists.data(), ws_bytes);
    const void* down_list = RequestPermuteWorkList(&perm, down_bt, lists.data(), ws_bytes);
    if (router_gemv) {
      SPAR_RETURN_IF_ERROR(ctx.Mark("moe.router_route_permute"));
      SPAR_RETURN_IF_ERROR(LaunchMoeRouterRoutePermute(router, route, perm, ctx.moe_done_counter, ctx.stream));
    } else {
      SPAR_RETURN_IF_ERROR(ctx.Mark("moe.route_permute"));
      SPAR_RETURN_IF_ERROR(LaunchMoeRoutePermute(route, perm, ctx.moe_done_counter, ctx.stream));
    }
    SPAR_RETURN_IF_ERROR(ctx.Mark("moe.experts_gate_up"));
    SPAR_ASSIGN_OR_RETURN(Tensor h, grouped.Run(x, sorted.as<int32_t>(), moe.gate, &moe.up, moe.inter, gate_up_list, gate_up_bt));
    SPAR_RETURN_IF_ERROR(ctx.Mark("moe.experts_down"));
    SPAR_ASSIGN_OR_RETURN(yd, grouped.Run(h, nullptr, moe.down, nullptr, moe.hidden, down_list, down_bt));
    return absl::OkStatus();
  };
  // The routing is latency-bound: where the side stream outranks the main
  // one (CudaBackendOptions::urgent_branch_priority) the routed experts take
  // it.
  const bool routed_on_side = ctx.branches != nullptr && ctx.branches->side_urgent();
  if (!moe.shared) {
    SPAR_RETURN_IF_ERROR(routed_experts());
  } else if (routed_on_side) {
    SPAR_RETURN_IF_ERROR(ctx.Concurrently(routed_experts, shared_expert));
  } else {
    SPAR_RETURN_IF_ERROR(ctx.Concurrently(shared_expert, routed_experts));
  }
  const bool partial = ctx.tp_size > 1;  // fp32 partial sum for the all-reduce
  SPAR_RETURN_IF_ERROR(ctx.Mark("moe.combine"));
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(t_count, moe.hidden, partial ? DType::kF32 : DType::kBF16));
  MoeCombineParams c;
  c.tokens = t_count;
  c.top_k = k;
  c.hidden = moe.hidden;
  c.expert_out = yd.as<__nv_bfloat16>();
  c.ld_expert = yd.ld();
  c.slot = slot.as<int32_t>();
  c.weights = wts.as<float>();
  if (!shared.empty()) {
    c.shared = shared.as<__nv_bfloat16>();
    c.ld_shared = shared.ld();
  }
  if (partial) {
    c.out_f32 = out.as<float>();
  } else {
    c.out = out.as<__nv_bfloat16>();
  }
  c.ld_out = out.ld();
  SPAR_RETURN_IF_ERROR(LaunchMoeCombine(c, ctx.stream));
  return out;
}

}  // namespace spar::cuda_ops
