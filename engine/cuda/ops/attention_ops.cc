#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "kernels/cuda/attention/absorb_gemm.h"
#include "kernels/cuda/attention/latent_widen.h"
#include "kernels/cuda/attention/mla_cache.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar::cuda_ops {

namespace {

MlaCacheWriteParams CacheWriteParams(StepContext& ctx, int layer, const Tensor& kv_a, const CudaVector& norm,
                                     float eps) {
  MlaCacheWriteParams p;
  p.kv = kv_a.as<__nv_bfloat16>();
  p.tokens = kv_a.rows();
  p.kv_stride = kv_a.ld();
  p.norm_weight = norm.bf16.as<__nv_bfloat16>();
  p.eps = eps;
  p.positions = ctx.meta.pos;
  p.inv_freq = ctx.rope->inv_freq();
  p.attention_factor = ctx.rope->attention_factor();
  p.interleaved = true;
  p.slot_mapping = ctx.meta.slots;
  p.format = ctx.caches->spec().latent_format;
  p.cache = ctx.caches->latent(layer);
  p.num_slots = ctx.caches->num_slots();
  return p;
}

// The absorbed query [T, H·576] of q [T, H·(Dn+Dr)] (its rows may be a
// wider row's first columns: q_b's GEMM also writes the indexer's query):
// its buffer, and the RoPE of each head's q_pe into the last 64 lanes (who
// runs it is the caller's choice).
struct AbsorbedQuery {
  Tensor out;
  int q_head_dim = 0;
  RopeApplyParams rope;
};

absl::StatusOr<AbsorbedQuery> NewAbsorbedQuery(StepContext& ctx, const Tensor& q, const CudaAbsorb& a) {
  const int heads = a.w.heads;
  AbsorbedQuery aq;
  aq.q_head_dim = static_cast<int>(q.cols() / heads);
  if (q.cols() != static_cast<int64_t>(heads) * aq.q_head_dim || aq.q_head_dim != a.w.nope_dim + kLatentRopeDim ||
      q.ld() % 8 != 0) {
    return absl::InvalidArgumentError("absorb: bad query layout");
  }
  SPAR_ASSIGN_OR_RETURN(aq.out, ctx.NewTensor(q.rows(), static_cast<int64_t>(heads) * kLatentDim));
  RopeApplyParams& r = aq.rope;
  r.in = q.as<__nv_bfloat16>();
  r.in_stride = aq.q_head_dim;
  r.in_offset = a.w.nope_dim;
  r.out = aq.out.as<__nv_bfloat16>();
  r.out_stride = kLatentDim;
  r.out_offset = kLatentNopeDim;
  r.rows = q.rows() * heads;
  r.rows_per_position = heads;
  // Packed rows keep the packed addressing; wider rows step by their ld.
  r.in_position_stride = q.ld() == q.cols() ? 0 : q.ld();
  r.positions = ctx.meta.pos;
  r.rotary_dim = kLatentRopeDim;
  r.inv_freq = ctx.rope->inv_freq();
  r.attention_factor = ctx.rope->attention_factor();
  r.interleaved = true;
  return aq;
}

absl::Status LaunchQueryAbsorption(StepContext& ctx, const Tensor& q, const CudaAbsorb& a, const AbsorbedQuery& aq) {
  const int heads = a.w.heads;
  BatchedGemmParams p = MlaQAbsorbGemm(a.w, q.as<__nv_bfloat16>(), q.rows(), aq.q_head_dim, aq.out.as<__nv_bfloat16>(),
                                       static_cast<int64_t>(heads) * kLatentDim, kLatentDim);
  p.lda = q.ld();
  return LaunchBatchedGemm(p, ctx.stream);
}

}  // namespace

absl::Status WriteLatentCache(StepContext& ctx, int layer, const Tensor& kv_a, const CudaVector& norm, float eps) {
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  SPAR_RETURN_IF_ERROR(ctx.Mark("latent_cache_write"));
  return LaunchMlaCacheWrite(CacheWriteParams(ctx, layer, kv_a, norm, eps), ctx.stream);
}

absl::StatusOr<Tensor> AbsorbQuery(StepContext& ctx, const Tensor& q, const CudaAbsorb& a) {
  SPAR_ASSIGN_OR_RETURN(AbsorbedQuery aq, NewAbsorbedQuery(ctx, q, a));
  SPAR_RETURN_IF_ERROR(ctx.Mark("absorb_query"));
  SPAR_RETURN_IF_ERROR(LaunchQueryAbsorption(ctx, q, a, aq));
  // The rope part of each head: RoPE(q_pe) after the absorbed 512 values.
  SPAR_RETURN_IF_ERROR(LaunchRopeApply(aq.rope, ctx.stream));
  return aq.out;
}

absl::StatusOr<Tensor> WriteLatentCacheAndAbsorbQuery(StepContext& ctx, int layer, const Tensor& kv_a,
                                                      const CudaVector& norm, float eps, const Tensor& q,
                                                      const CudaAbsorb& a) {
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  SPAR_ASSIGN_OR_RETURN(AbsorbedQuery aq, NewAbsorbedQuery(ctx, q, a));
  SPAR_RETURN_IF_ERROR(ctx.Mark("latent_cache_write+query_rope"));
  MlaCacheWriteParams p = CacheWriteParams(ctx, layer, kv_a, norm, eps);
  p.query_rope = aq.rope;
  SPAR_RETURN_IF_ERROR(LaunchMlaCacheWrite(p, ctx.stream));
  SPAR_RETURN_IF_ERROR(ctx.Mark("absorb_query"));
  SPAR_RETURN_IF_ERROR(LaunchQueryAbsorption(ctx, q, a, aq));
  return aq.out;
}

namespace {

// FP8 rows that a prefill step reads many times (latent_widen.h): the step's
// context blocks (every sequence of the step) widened once into a bf16
// scratch, and the index lists pointed into it; nothing where the policy
// keeps the FP8 kernel (and never in a graph capture: the base offsets are a
// host upload). `active` false: read the cache as it is. (Not an
// std::optional: GCC 12 warns that a StatusOr<optional<...>> of shared_ptr
// holders may be used uninitialized, a known false positive.)
struct WidenedRows {
  bool active = false;
  Tensor rows, lists;
  int64_t num_slots = 0;
};

absl::StatusOr<WidenedRows> MaybeWidenLatent(StepContext& ctx, int layer, int heads, const Tensor& indices) {
  const StepPlan* plan = ctx.meta.plan;
  if (ctx.capturing || plan == nullptr || ctx.caches->spec().latent_format != LatentFormat::kFp8Ds) {
    return WidenedRows{};
  }
  std::vector<int32_t> base = {0};
  int64_t longest = 0;
  for (const SequenceStep& s : plan->seqs) {
    base.push_back(base.back() + static_cast<int32_t>(s.block_table.size()));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.block_table.size()));
  }
  const bool widen = ctx.widen_latent_rows.has_value()
                         ? *ctx.widen_latent_rows && base.back() > 0
                         : ShouldWidenLatentRows(true, indices.rows(), heads, static_cast<int>(indices.cols()), base.back());
  if (!widen) return WidenedRows{};
  SPAR_RETURN_IF_ERROR(ctx.Mark("sparse_mla.widen"));
  WidenedRows w;
  w.active = true;
  w.num_slots = static_cast<int64_t>(base.back()) * kCacheBlockTokens;
  SPAR_ASSIGN_OR_RETURN(Tensor dev_base, ctx.Upload(base.data(), static_cast<int64_t>(base.size()), DType::kI32));
  SPAR_ASSIGN_OR_RETURN(Tensor block_map, ctx.NewTensor(1, ctx.caches->spec().num_blocks, DType::kI32));
  // -1 everywhere first: a slot outside the widened blocks is dropped, not misread.
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(block_map.data(), 0xFF, block_map.cols() * sizeof(int32_t), ctx.stream));
  SPAR_ASSIGN_OR_RETURN(w.rows, ctx.NewTensor(w.num_slots, kLatentDim));
  LatentWidenParams p;
  p.cache = ctx.caches->latent(layer);
  p.num_slots = ctx.caches->num_slots();
  p.block_table = ctx.meta.tables;
  p.block_table_stride = ctx.meta.table_stride;
  p.num_seqs = ctx.meta.num_seqs;
  p.seq_block_base = dev_base.as<int32_t>();
  p.max_seq_blocks = longest;
  p.widened = w.rows.as<__nv_bfloat16>();
  p.block_map = block_map.as<int32_t>();
  SPAR_RETURN_IF_ERROR(LaunchWidenLatentBlocks(p, ctx.stream));
  SPAR_ASSIGN_OR_RETURN(w.lists, ctx.NewTensor(indices.rows(), indices.cols(), DType::kI32));
  SlotRemapParams m;
  m.indices = indices.as<int32_t>();
  m.tokens = indices.rows();
  m.list_len = static_cast<int>(indices.cols());
  m.in_stride = indices.ld();
  m.block_map = block_map.as<int32_t>();
  m.num_slots = ctx.caches->num_slots();
  m.out = w.lists.as<int32_t>();
  m.out_stride = w.lists.ld();
  SPAR_RETURN_IF_ERROR(LaunchRemapSlots(m, ctx.stream));
  return w;
}

// The sparse MLA over the step's index lists. With `absorb` (the fused
// tail): where the plan splits and LaunchMlaMergeUnabsorb takes the shape,
// the partials are left in the workspace and merged by the un-absorption,
// which then returns [T, H·Dv]; otherwise the merged [T, H·512] o_lat comes
// back and *fused stays false.
absl::StatusOr<Tensor> LaunchAttention(StepContext& ctx, int layer, const Tensor& q_abs, const Tensor& indices,
                                       float scale, const CudaAbsorb* absorb, bool* fused) {
  *fused = false;
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  const int heads = static_cast<int>(q_abs.cols() / kLatentDim);
  SPAR_ASSIGN_OR_RETURN(const WidenedRows widened, MaybeWidenLatent(ctx, layer, heads, indices));
  SparseMlaParams p;
  p.q = q_abs.as<__nv_bfloat16>();
  p.tokens = q_abs.rows();
  p.heads = heads;
  p.q_token_stride = q_abs.ld();
  p.q_head_stride = kLatentDim;
  p.format = widened.active ? LatentFormat::kBF16 : ctx.caches->spec().latent_format;
  p.cache = widened.active ? widened.rows.as<uint8_t>() : ctx.caches->latent(layer);
  p.num_slots = widened.active ? widened.num_slots : ctx.caches->num_slots();
  p.indices = widened.active ? widened.lists.as<int32_t>() : indices.as<int32_t>();
  p.indices_stride = widened.active ? widened.lists.ld() : indices.ld();
  p.list_len = static_cast<int>(indices.cols());
  p.scale = scale;
  p.plan = ctx.SparseMlaPlanFor(p.tokens, heads, p.list_len, p.format);
  p.defer_merge = absorb != nullptr && absorb->w.heads == heads && p.plan.num_splits > 1 &&
                  MlaMergeUnabsorbFits(p.tokens, p.plan.num_splits);
  const size_t ws = SparseMlaWorkspaceBytes(p.plan, p.tokens, heads);
  Tensor workspace;
  if (ws > 0) {
    SPAR_ASSIGN_OR_RETURN(workspace, ctx.NewTensor(1, static_cast<int64_t>(ws), DType::kU8));
    p.workspace = workspace.data();
    p.workspace_bytes = ws;
  }
  SPAR_RETURN_IF_ERROR(ctx.Mark("sparse_mla"));
  if (!p.defer_merge) {
    SPAR_ASSIGN_OR_RETURN(Tensor o_lat, ctx.NewTensor(p.tokens, static_cast<int64_t>(heads) * kLatentNopeDim));
    p.out = o_lat.as<__nv_bfloat16>();
    p.out_token_stride = o_lat.ld();
    p.out_head_stride = kLatentNopeDim;
    SPAR_RETURN_IF_ERROR(LaunchSparseMla(p, ctx.stream));
    return o_lat;
  }
  SPAR_RETURN_IF_ERROR(LaunchSparseMla(p, ctx.stream));
  SPAR_RETURN_IF_ERROR(ctx.Mark("merge_unabsorb_output"));
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(p.tokens, static_cast<int64_t>(heads) * absorb->w.v_dim));
  const SparseMlaPartialsView view = SparseMlaPartials(p.plan, p.tokens, heads, p.workspace);
  MlaSplitPartials parts;
  parts.o = view.o;
  parts.lse = view.lse;
  parts.splits = p.plan.num_splits;
  SPAR_RETURN_IF_ERROR(LaunchMlaMergeUnabsorb(absorb->w, parts, p.tokens, out.as<__nv_bfloat16>(), ctx.stream));
  *fused = true;
  return out;
}

}  // namespace

absl::StatusOr<Tensor> SparseMla(StepContext& ctx, int layer, const Tensor& q_abs, const Tensor& indices,
                                 float scale) {
  bool fused = false;
  return LaunchAttention(ctx, layer, q_abs, indices, scale, nullptr, &fused);
}

absl::StatusOr<Tensor> UnabsorbOutput(StepContext& ctx, const Tensor& o_lat, const CudaAbsorb& a) {
  SPAR_RETURN_IF_ERROR(ctx.Mark("unabsorb_output"));
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(o_lat.rows(), static_cast<int64_t>(a.w.heads) * a.w.v_dim));
  SPAR_RETURN_IF_ERROR(LaunchMlaOutUnabsorb(a.w, o_lat.as<__nv_bfloat16>(), o_lat.rows(), o_lat.ld(), kLatentNopeDim,
                                            out.as<__nv_bfloat16>(), ctx.stream));
  return out;
}

absl::StatusOr<Tensor> AttendAndUnabsorb(StepContext& ctx, int layer, const Tensor& q_abs, const Tensor& indices,
                                         float scale, const CudaAbsorb& a) {
  bool fused = false;
  SPAR_ASSIGN_OR_RETURN(Tensor t, LaunchAttention(ctx, layer, q_abs, indices, scale, &a, &fused));
  if (fused) return t;
  return UnabsorbOutput(ctx, t, a);
}

}  // namespace spar::cuda_ops
