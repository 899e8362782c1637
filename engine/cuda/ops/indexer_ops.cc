#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/cuda/ops/ops.h"
#include "engine/decode_graph_key.h"
#include "engine/speculation_limits.h"
#include "kernels/cuda/indexer/indexer.h"

namespace spar::cuda_ops {
namespace {

// Logits [tokens, stride] of a step where some sequence brings several
// tokens (prefill, mixed steps): each sequence's keys [0, its last position]
// are gathered into one array and every token's row covers its sequence's
// keys up to its own position (ks/ke, on the device). Returns the logits;
// *row_start points at ks.
struct GatheredLogits {
  Tensor logits, keys, kscale, starts;
  const int32_t* row_start = nullptr;
  int64_t stride = 0;
};

absl::StatusOr<GatheredLogits> GatheredStepLogits(StepContext& ctx, int layer, const Tensor& q, const Tensor& wf,
                                                  const IndexerSpec& spec) {
  const StepMeta& m = ctx.meta;
  const StepPlan& plan = *m.plan;
  GatheredLogits g;
  std::vector<int32_t> seq_len(m.num_seqs), seq_off(m.num_seqs), ks(m.tokens), ke(m.tokens);
  int64_t total = 0;
  int max_len = 0;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const auto& q_s = plan.seqs[s];
    seq_len[s] = q_s.start_pos + static_cast<int32_t>(q_s.tokens.size());
    seq_off[s] = static_cast<int32_t>(total);
    total += seq_len[s];
    max_len = std::max(max_len, seq_len[s]);
  }
  for (int64_t t = 0; t < m.tokens; ++t) {
    ks[t] = seq_off[plan.token_seq[t]];
    ke[t] = ks[t] + plan.positions[t] + 1;
  }
  g.stride = (total + 3) / 4 * 4;
  std::vector<int32_t> meta;
  for (auto* v : {&seq_len, &seq_off, &ks, &ke}) meta.insert(meta.end(), v->begin(), v->end());
  // Stream-ordered, so it may die with this frame without a host sync.
  SPAR_ASSIGN_OR_RETURN(g.starts, ctx.Upload(meta.data(), static_cast<int64_t>(meta.size()), DType::kI32));
  const int32_t* d_len = g.starts.as<int32_t>();
  const int32_t* d_off = d_len + m.num_seqs;
  const int32_t* d_ks = d_off + m.num_seqs;
  const int32_t* d_ke = d_ks + m.tokens;
  g.row_start = d_ks;
  const IndexerFormat format = ctx.caches->spec().indexer_format;
  const bool fp8 = format == IndexerFormat::kFp8;
  SPAR_ASSIGN_OR_RETURN(g.keys, ctx.NewTensor(total, fp8 ? kIndexerHeadDim : 2 * kIndexerHeadDim, DType::kU8));
  SPAR_ASSIGN_OR_RETURN(g.kscale, ctx.NewTensor(1, total, DType::kF32));
  IndexerGatherParams gp;
  gp.num_seqs = static_cast<int>(m.num_seqs);
  gp.seq_lens = d_len;
  gp.out_offsets = d_off;
  gp.max_seq_len = max_len;
  gp.block_table = m.tables;
  gp.block_table_stride = m.table_stride;
  gp.format = format;
  gp.cache = ctx.caches->indexer(layer);
  gp.keys = g.keys.data();
  gp.k_scale = fp8 ? g.kscale.as<float>() : nullptr;
  SPAR_RETURN_IF_ERROR(LaunchIndexerGather(gp, ctx.stream));
  SPAR_ASSIGN_OR_RETURN(g.logits, ctx.NewTensor(m.tokens, g.stride, DType::kF32));
  IndexerLogitsParams lp;
  lp.rows = m.tokens;
  lp.heads = spec.heads;
  lp.q = q.as<__nv_bfloat16>();
  lp.q_stride = q.ld();
  lp.w = wf.as<float>();
  lp.w_stride = spec.heads;
  lp.format = format;
  lp.keys = g.keys.data();
  lp.k_scale = fp8 ? g.kscale.as<float>() : nullptr;
  lp.num_keys = total;
  lp.ks = d_ks;
  lp.ke = d_ke;
  lp.logits = g.logits.as<float>();
  lp.logits_stride = g.stride;
  SPAR_RETURN_IF_ERROR(LaunchIndexerLogits(lp, ctx.stream));
  return g;
}

IndexerKeyWriteParams KeyWriteParams(StepContext& ctx, int layer, const Tensor& k, const CudaVector& norm_w,
                                     const CudaVector& norm_b, float eps, const IndexerSpec& spec) {
  IndexerKeyWriteParams p;
  p.tokens = k.rows();
  p.x = k.as<__nv_bfloat16>();
  p.x_stride = k.ld();
  p.norm_weight = norm_w.f32.as<float>();
  p.norm_bias = norm_b.f32.as<float>();
  p.eps = eps;
  p.positions = ctx.meta.pos;
  p.rope = ctx.rope->ForIndexer(spec.rope_pairs);
  p.slots = ctx.meta.slots;
  p.format = ctx.caches->spec().indexer_format;
  p.cache = ctx.caches->indexer(layer);
  return p;
}

}  // namespace

absl::Status WriteIndexerCache(StepContext& ctx, int layer, const Tensor& k, const CudaVector& norm_w,
                               const CudaVector& norm_b, float eps, const IndexerSpec& spec) {
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  SPAR_RETURN_IF_ERROR(ctx.Mark("indexer.key_write"));
  return LaunchIndexerKeyWrite(KeyWriteParams(ctx, layer, k, norm_w, norm_b, eps, spec), ctx.stream);
}

absl::StatusOr<Tensor> RmsNormAndWriteIndexerCache(StepContext& ctx, const Tensor& x, const CudaVector& w, float eps,
                                                   int layer, const Tensor& k, const CudaVector& k_norm_w,
                                                   const CudaVector& k_norm_b, float k_eps, const IndexerSpec& spec) {
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  if (k.rows() != x.rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm + indexer key write: ", x.rows(), " rows to normalise but ", k.rows(), " keys"));
  }
  SPAR_RETURN_IF_ERROR(ctx.Mark("rms_norm+indexer.key_write"));
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(x.rows(), x.cols()));
  SPAR_RETURN_IF_ERROR(LaunchRmsNormAndIndexerKeyWrite(RmsNormParamsFor(x, nullptr, w, eps, out),
                                                       KeyWriteParams(ctx, layer, k, k_norm_w, k_norm_b, k_eps, spec),
                                                       ctx.stream));
  return out;
}

absl::StatusOr<Tensor> IndexerTopK(StepContext& ctx, int layer, const Tensor& q, const Tensor& w,
                                   const IndexerSpec& spec) {
  SPAR_RETURN_IF_ERROR(ctx.caches->CheckLayer(layer));
  const StepMeta& m = ctx.meta;
  SPAR_ASSIGN_OR_RETURN(Tensor out, ctx.NewTensor(m.tokens, spec.topk, DType::kI32));
  if (m.max_ctx <= spec.topk) {
    SPAR_RETURN_IF_ERROR(ctx.Mark("indexer.dense_slots"));
    // Every token sees at most topk keys: all of them are selected, in
    // ascending order (what the top-k would return), without scoring.
    SPAR_RETURN_IF_ERROR(LaunchDenseSlots(out.as<int32_t>(), m.tokens, spec.topk, m.kv_len, m.seq, m.tables,
                                          m.table_stride, ctx.stream));
    return out;
  }
  // Logits [tokens, stride]; rows are either per-sequence paged (decode
  // steps, and verify steps: next_n = 1 + drafts query rows per sequence,
  // each causal up to its own position) or over each sequence's gathered
  // keys (prefill and mixed steps).
  Tensor logits;
  GatheredLogits gathered;
  const int32_t* row_start = nullptr;  // the paged rows start at 0
  int64_t stride = (m.max_ctx + 3) / 4 * 4;
  const int64_t next_n = m.tokens_per_seq;
  const IndexerFormat format = ctx.caches->spec().indexer_format;
  const bool paged = next_n >= 1 && next_n <= 1 + kMaxSpeculativeTokens && next_n * spec.heads <= kMaxPagedQueryRows;
  // The paged kernel preps the query itself where its tile fits a pipeline
  // slot (decode: one launch fewer on the indexer's branch, the longer of
  // the layer's two); otherwise q is roped in place and w scaled into fp32.
  const bool prep_in_logits = paged && next_n * spec.heads <= IndexerLogitsPagedPrepMaxRows(format);
  Tensor wf;
  if (!prep_in_logits) {
    SPAR_RETURN_IF_ERROR(ctx.Mark("indexer.query_prep"));
    SPAR_ASSIGN_OR_RETURN(wf, ctx.NewTensor(m.tokens, spec.heads, DType::kF32));
    IndexerQueryPrepParams qp;
    qp.tokens = m.tokens;
    qp.heads = spec.heads;
    qp.q = q.as<__nv_bfloat16>();
    qp.q_stride = q.ld();
    qp.q_out = q.as<__nv_bfloat16>();
    qp.q_out_stride = q.ld();
    qp.positions = m.pos;
    qp.rope = ctx.rope->ForIndexer(spec.rope_pairs);
    qp.w_in_bf16 = w.as<__nv_bfloat16>();
    qp.w_in_stride = w.ld();
    qp.weight_scale = spec.weight_scale;
    qp.w_out = wf.as<float>();
    SPAR_RETURN_IF_ERROR(LaunchIndexerQueryPrep(qp, ctx.stream));
  }
  SPAR_RETURN_IF_ERROR(ctx.Mark(prep_in_logits ? "indexer.query_prep+logits" : "indexer.logits"));
  if (paged) {
    SPAR_ASSIGN_OR_RETURN(logits, ctx.NewTensor(m.tokens, stride, DType::kF32));
    IndexerLogitsPagedParams lp;
    lp.num_seqs = static_cast<int>(m.num_seqs);
    lp.next_n = static_cast<int>(next_n);
    lp.heads = spec.heads;
    lp.q = q.as<__nv_bfloat16>();
    lp.q_stride = q.ld();
    if (prep_in_logits) {
      lp.prep_positions = m.pos;
      lp.prep_rope = ctx.rope->ForIndexer(spec.rope_pairs);
      lp.w_bf16 = w.as<__nv_bfloat16>();
      lp.w_stride = w.ld();
      lp.weight_scale = spec.weight_scale;
    } else {
      lp.w = wf.as<float>();
      lp.w_stride = spec.heads;
    }
    lp.context_lens = m.kv_len;
    lp.max_context_len = static_cast<int>(m.max_ctx);
    lp.block_table = m.tables;
    lp.block_table_stride = m.table_stride;
    lp.format = format;
    lp.cache = ctx.caches->indexer(layer);
    lp.logits = logits.as<float>();
    lp.logits_stride = stride;
    SPAR_RETURN_IF_ERROR(LaunchIndexerLogitsPaged(lp, ctx.stream));
  } else {
    SPAR_ASSIGN_OR_RETURN(gathered, GatheredStepLogits(ctx, layer, q, wf, spec));
    logits = gathered.logits;
    row_start = gathered.row_start;
    stride = gathered.stride;
  }
  SPAR_RETURN_IF_ERROR(ctx.Mark("indexer.topk"));
  TopKParams tp;
  tp.rows = m.tokens;
  tp.k = spec.topk;
  tp.logits = logits.as<float>();
  tp.logits_stride = stride;
  tp.row_start = row_start;
  tp.row_len = m.kv_len;
  tp.num_cols = stride;
  tp.out = out.as<int32_t>();
  tp.out_stride = spec.topk;
  // Written as cache slots (what sparse MLA reads) by the top-k itself.
  tp.block_table = m.tables;
  tp.block_table_stride = m.table_stride;
  tp.token_seq = m.seq;
  tp.plan = &ctx.TopKPlanFor(tp.rows, tp.num_cols);
  tp.row_counters = ctx.topk_row_counters;
  tp.row_counters_capacity = ctx.topk_row_counters != nullptr ? kTopKMaxRowCounters : 0;
  // Few long rows (decode) split each row over several CTAs, which needs scratch.
  Tensor topk_ws;
  if (const size_t ws = TopKWorkspaceBytes(tp); ws > 0) {
    SPAR_ASSIGN_OR_RETURN(topk_ws, ctx.NewTensor(1, static_cast<int64_t>(ws), DType::kU8));
    tp.workspace = topk_ws.data();
    tp.workspace_bytes = ws;
  }
  SPAR_RETURN_IF_ERROR(LaunchTopK(tp, ctx.stream));
  return out;
}

}  // namespace spar::cuda_ops
