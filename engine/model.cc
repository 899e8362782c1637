#include "engine/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/matrix_source.h"
#include "engine/memory_budget.h"
#include "engine/speculation_limits.h"
#include "engine/weight_names.h"
#include "kernels/ref/rope_ref.h"

namespace spar {

struct Model::Layer {
  bool moe = false;
  bool full_indexer = true;
  std::unique_ptr<Weight> input_norm, post_norm, q_a_norm, kv_a_norm;
  std::unique_ptr<Weight> fused_a;  // q_a ‖ kv_a (‖ indexer wk ‖ indexer weights_proj)
  // q_b: this rank's heads' query rows (‖ the indexer's wq_b rows with
  // IndexerQueryGemm::kWithQb; else idx_wq_b holds them).
  std::unique_ptr<Weight> q_b, absorb, o_proj;
  std::unique_ptr<Weight> idx_wq_b, idx_norm_w, idx_norm_b;
  int64_t fused_index_query_cols = 0;  // the indexer's columns at the end of q_b's output
  std::unique_ptr<Weight> ffn;  // Mlp or Moe
};

// The multi-token-prediction layer (dsa-spec.md §2.8): its own norms and
// eh_proj over [embedding ‖ hidden], a full decoder layer (with its own
// caches: the last cache layer) and shared_head.norm; the embedding and the
// head are the main model's unless the checkpoint stores its own (DeepSeek).
struct Model::Mtp {
  std::unique_ptr<Weight> enorm, hnorm, head_norm;
  std::unique_ptr<Weight> eh_embed, eh_hidden;  // eh_proj's columns [0, h) and [h, 2h)
  std::unique_ptr<Weight> embedding, head;      // own copies, or null: the main ones
  std::unique_ptr<Layer> block;
};

Model::~Model() = default;

namespace {

absl::Status CheckShape(const TensorView& t, const std::vector<int64_t>& shape) {
  if (t.shape != shape) {
    TensorView want;
    want.shape = shape;
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", t.name, "\" has shape ", t.ShapeString(), ", expected ", want.ShapeString()));
  }
  return absl::OkStatus();
}

// A linear layer's tensors in any stored form (engine/matrix_source.h).
absl::StatusOr<MatrixSource> Matrix(const Checkpoint& ck, const QuantConfig& quant, const std::string& name,
                                    int64_t rows, int64_t cols, MatrixKind kind = MatrixKind::kLinear) {
  return LoadMatrixSource(ck, quant, name, rows, cols, kind);
}

absl::StatusOr<TensorView> Vector(const Checkpoint& ck, const std::string& name, int64_t n) {
  SPAR_ASSIGN_OR_RETURN(TensorView t, ck.Get(name));
  SPAR_RETURN_IF_ERROR(CheckShape(t, {n}));
  return t;
}

// An MLP whose intermediate columns [part.begin, part.end) this rank holds
// (gate/up rows, down columns); the whole MLP when part is empty.
absl::StatusOr<MlpSource> MlpFrom(const Checkpoint& ck, const QuantConfig& q, const std::string& gate,
                                  const std::string& up, const std::string& down, int64_t hidden, int64_t inter,
                                  Slice part = {}) {
  MlpSource m;
  SPAR_ASSIGN_OR_RETURN(m.gate, Matrix(ck, q, gate, inter, hidden));
  SPAR_ASSIGN_OR_RETURN(m.up, Matrix(ck, q, up, inter, hidden));
  SPAR_ASSIGN_OR_RETURN(m.down, Matrix(ck, q, down, hidden, inter));
  if (part.size() > 0 && part.size() != inter) {
    m.gate.row_begin = m.up.row_begin = m.down.col_begin = part.begin;
    m.gate.row_end = m.up.row_end = m.down.col_end = part.end;
  }
  return m;
}

// `filter` plus the MTP layer and the embedding it shares (last stage).
TensorFilter WithMtpLayer(TensorFilter filter, const ModelConfig& c) {
  const int mtp = c.num_hidden_layers;
  return [filter = std::move(filter), mtp](const std::string& name) {
    return filter(name) || LayerOfTensor(name) == mtp || name == names::kEmbed;
  };
}

ref::RopeParams RopeParamsFor(const ModelConfig& c) {
  ref::RopeParams p;
  p.rotary_dim = c.qk_rope_head_dim;
  p.theta = c.rope.theta;
  p.yarn = c.rope.type == RopeType::kYarn;
  p.yarn_factor = c.rope.factor;
  p.yarn_original_max_positions = c.rope.original_max_position_embeddings;
  p.yarn_beta_fast = c.rope.beta_fast;
  p.yarn_beta_slow = c.rope.beta_slow;
  p.yarn_truncate = c.rope.truncate;
  p.attention_factor = c.rope.attention_factor;
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, Backend* backend,
                                                   const ModelOptions& options) {
  SPAR_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir + "/config.json"));
  const int last = options.last_layer < 0 ? config.num_hidden_layers : options.last_layer;
  TensorFilter filter =
      LayerRangeFilter(options.first_layer, last, options.first_layer == 0, last == config.num_hidden_layers);
  if (options.load_mtp && last == config.num_hidden_layers) filter = WithMtpLayer(std::move(filter), config);
  SPAR_ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(dir, filter));
  return Load(config, *ck, backend, options);
}

absl::string_view IndexerQueryGemmName(IndexerQueryGemm placement) {
  switch (placement) {
    case IndexerQueryGemm::kWithQb: return "with-qb";
    case IndexerQueryGemm::kBeforeFork: return "before-fork";
    case IndexerQueryGemm::kOnBranch: return "on-branch";
  }
  return "?";
}

absl::StatusOr<IndexerQueryGemm> ParseIndexerQueryGemm(absl::string_view name) {
  for (IndexerQueryGemm p : {IndexerQueryGemm::kWithQb, IndexerQueryGemm::kBeforeFork, IndexerQueryGemm::kOnBranch}) {
    if (name == IndexerQueryGemmName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown indexer query placement \"", name, "\" (with-qb, before-fork or on-branch)"));
}

absl::Status CheckEngineCanServe(const ModelConfig& c) {
  if (c.kv_lora_rank != kLatentNopeDim || c.qk_rope_head_dim != kLatentRopeDim ||
      c.index_head_dim != kIndexerHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("spar needs kv_lora_rank 512, qk_rope_head_dim 64 and ",
                                                   "index_head_dim 128 (the DSA cache layouts); got ",
                                                   c.kv_lora_rank, ", ", c.qk_rope_head_dim, ", ", c.index_head_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelConfig& config, const Checkpoint& ck, Backend* backend,
                                                   const ModelOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->config_ = config;
  m->options_ = options;
  m->backend_ = backend;
  m->first_layer_ = options.first_layer;
  m->last_layer_ = options.last_layer < 0 ? config.num_hidden_layers : options.last_layer;
  if (m->first_layer_ < 0 || m->first_layer_ >= m->last_layer_ || m->last_layer_ > config.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", m->first_layer_, ", ", m->last_layer_,
                                                   ") is not inside [0, ", config.num_hidden_layers, ")"));
  }
  if (config.indexer_types[m->first_layer_] == IndexerType::kShared) {
    return absl::InvalidArgumentError(absl::StrCat("a stage cannot start at layer ", m->first_layer_,
                                                   ": it shares the top-k of a layer on the previous stage"));
  }
  if (options.index_topk_override > 0) m->config_.index_topk = options.index_topk_override;
  if (options.max_model_len > 0) {
    if (options.max_model_len > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("max model len ", options.max_model_len,
                                                     " exceeds the model's max_position_embeddings ",
                                                     config.max_position_embeddings));
    }
    m->config_.max_position_embeddings = options.max_model_len;
  }
  const ModelConfig& c = m->config_;
  m->indexer_.heads = c.index_n_heads;
  m->indexer_.topk = c.index_topk;
  m->indexer_.weight_scale = static_cast<float>(c.indexer_weight_scale());
  if (options.random_topk_seed.has_value()) {
    if (backend->name() != "cpu") {
      return absl::UnimplementedError(absl::StrCat("the random top-k control runs on the cpu backend only, not ",
                                                   backend->name()));
    }
    m->indexer_.random_selection_seed = options.random_topk_seed;
  }
  m->indexer_.rope_pairs =
      c.indexer_rope_layout == RopeLayout::kInterleaved ? ref::RopePairs::kInterleaved : ref::RopePairs::kHalfSplit;
  SPAR_RETURN_IF_ERROR(CheckEngineCanServe(c));
  SPAR_RETURN_IF_ERROR(backend->SetRope(RopeParamsFor(c), c.max_position_embeddings));
  if (m->is_first_stage()) {
    SPAR_ASSIGN_OR_RETURN(auto emb, Matrix(ck, c.quant, names::kEmbed, c.vocab_size, c.hidden_size, MatrixKind::kPlainOnly));
    SPAR_ASSIGN_OR_RETURN(m->embedding_, backend->CreateEmbedding(emb.weight));
  }
  for (int l = m->first_layer_; l < m->last_layer_; ++l) SPAR_RETURN_IF_ERROR(m->LoadLayer(ck, l));
  if (m->is_last_stage()) {
    SPAR_ASSIGN_OR_RETURN(auto norm, Vector(ck, names::kFinalNorm, c.hidden_size));
    SPAR_ASSIGN_OR_RETURN(m->final_norm_, backend->CreateVector(norm));
    LinearSource head;
    SPAR_ASSIGN_OR_RETURN(auto head_m, Matrix(ck, c.quant, names::kLmHead, c.vocab_size, c.hidden_size));
    head.parts.push_back(head_m);
    head.fp32_output = true;
    SPAR_ASSIGN_OR_RETURN(m->lm_head_, backend->CreateLinear(head));
  }
  if (options.load_mtp && m->is_last_stage()) SPAR_RETURN_IF_ERROR(m->LoadMtp(ck));
  CacheSpec cache;
  // The MTP layer's caches are one more layer, after this stage's own.
  cache.num_layers = m->last_layer_ - m->first_layer_ + (m->has_mtp() ? 1 : 0);
  cache.num_blocks = options.num_blocks;
  cache.latent_format = options.latent_format;
  cache.indexer_format = options.indexer_format;
  cache.memory_utilization = options.gpu_memory_utilization;
  cache.activation_reserve_bytes = ActivationReserveBytes(m->config_.max_position_embeddings);
  SPAR_ASSIGN_OR_RETURN(m->options_.num_blocks, backend->AllocateCaches(cache));
  const int64_t need = (m->config_.max_position_embeddings + kCacheBlockTokens - 1) / kCacheBlockTokens;
  if (options.max_model_len > 0 && m->options_.num_blocks < need) {
    return absl::ResourceExhaustedError(absl::StrCat("the KV cache holds ", m->options_.num_blocks * kCacheBlockTokens,
                                                     " tokens, less than one sequence of max model len ",
                                                     options.max_model_len));
  }
  return m;
}

absl::Status Model::LoadLayer(const Checkpoint& ck, int l) {
  using names::Layer;
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const int heads = c.num_attention_heads;
  auto layer = std::make_unique<Model::Layer>();
  // Layer num_hidden_layers is the MTP layer: MoE, with its own indexer.
  layer->moe = l < c.num_hidden_layers ? c.is_moe_layer(l) : l >= c.first_k_dense_replace;
  layer->full_indexer = l >= c.num_hidden_layers || c.indexer_types[l] == IndexerType::kFull;
  auto vec = [&](const char* name, int64_t n, std::unique_ptr<Weight>* out) -> absl::Status {
    SPAR_ASSIGN_OR_RETURN(TensorView v, Vector(ck, Layer(l, name), n));
    SPAR_ASSIGN_OR_RETURN(*out, backend_->CreateVector(v));
    return absl::OkStatus();
  };
  auto linear = [&](std::vector<std::pair<std::string, int64_t>> parts, int64_t cols,
                    std::unique_ptr<Weight>* out) -> absl::Status {
    LinearSource src;
    for (const auto& [name, rows] : parts) {
      SPAR_ASSIGN_OR_RETURN(auto mat, Matrix(ck, c.quant, Layer(l, name), rows, cols));
      src.parts.push_back(mat);
    }
    SPAR_ASSIGN_OR_RETURN(*out, backend_->CreateLinear(src));
    return absl::OkStatus();
  };
  SPAR_RETURN_IF_ERROR(vec(names::kInputNorm, h, &layer->input_norm));
  SPAR_RETURN_IF_ERROR(vec(names::kPostAttnNorm, h, &layer->post_norm));
  SPAR_RETURN_IF_ERROR(vec(names::kQANorm, c.q_lora_rank, &layer->q_a_norm));
  SPAR_RETURN_IF_ERROR(vec(names::kKvANorm, c.kv_lora_rank, &layer->kv_a_norm));
  // The A projections all read the same normed hidden state: one GEMM.
  std::vector<std::pair<std::string, int64_t>> fused = {{names::kQA, c.q_lora_rank},
                                                        {names::kKvA, c.latent_dim()}};
  if (layer->full_indexer) {
    fused.push_back({names::kIdxWk, c.index_head_dim});
    fused.push_back({names::kIdxWeights, c.index_n_heads});
  }
  SPAR_RETURN_IF_ERROR(linear(fused, h, &layer->fused_a));
  // Tensor parallel (DESIGN §3): a rank holds a slice of the heads (q_b
  // rows, W_UK/W_UV, o_proj columns); the A projections and the indexer are
  // replicated, so every rank writes the same full caches.
  const TpRank tp = backend_->tp();
  SPAR_ASSIGN_OR_RETURN(Slice hs, EvenSlice(heads, tp, "attention heads"));
  const int64_t index_q_rows = static_cast<int64_t>(c.index_n_heads) * c.index_head_dim;
  {
    LinearSource q_b;
    SPAR_ASSIGN_OR_RETURN(MatrixSource m, Matrix(ck, c.quant, Layer(l, names::kQB), heads * c.qk_head_dim(), c.q_lora_rank));
    m.row_begin = hs.begin * c.qk_head_dim();
    m.row_end = hs.end * c.qk_head_dim();
    q_b.parts.push_back(m);
    // wq_b is replicated on every rank, like the A projections.
    if (layer->full_indexer && options_.indexer_query == IndexerQueryGemm::kWithQb) {
      SPAR_ASSIGN_OR_RETURN(MatrixSource wq, Matrix(ck, c.quant, Layer(l, names::kIdxWqB), index_q_rows, c.q_lora_rank));
      // Stored unlike q_b (AWQ checkpoints keep the indexer bf16 beside int4
      // q_b) the stack is two GEMMs, both before the fork: the indexer's own
      // GEMM on its branch is faster there (session 32, AWQ layer on an H100).
      if (SameWeightFormat(m, wq)) {
        q_b.parts.push_back(wq);
        layer->fused_index_query_cols = index_q_rows;
      }
    }
    SPAR_ASSIGN_OR_RETURN(layer->q_b, backend_->CreateLinear(q_b));
  }
  {
    LinearSource o;
    SPAR_ASSIGN_OR_RETURN(MatrixSource m, Matrix(ck, c.quant, Layer(l, names::kO), h, heads * c.v_head_dim));
    m.col_begin = hs.begin * c.v_head_dim;
    m.col_end = hs.end * c.v_head_dim;
    o.parts.push_back(m);
    // A rank's o_proj output is a partial sum: fp32 until the all-reduce.
    o.fp32_output = tp.size > 1;
    SPAR_ASSIGN_OR_RETURN(layer->o_proj, backend_->CreateLinear(o));
  }
  AbsorbSource absorb;
  SPAR_ASSIGN_OR_RETURN(absorb.kv_b, Matrix(ck, c.quant, Layer(l, names::kKvB),
                                            static_cast<int64_t>(heads) * (c.qk_nope_head_dim + c.v_head_dim),
                                            c.kv_lora_rank));
  absorb.heads = static_cast<int>(hs.size());
  absorb.head_begin = static_cast<int>(hs.begin);
  absorb.nope_dim = c.qk_nope_head_dim;
  absorb.v_dim = c.v_head_dim;
  absorb.kv_lora_rank = c.kv_lora_rank;
  SPAR_ASSIGN_OR_RETURN(layer->absorb, backend_->CreateAbsorb(absorb));
  if (layer->full_indexer) {
    if (layer->fused_index_query_cols == 0) {
      SPAR_RETURN_IF_ERROR(linear({{names::kIdxWqB, index_q_rows}}, c.q_lora_rank, &layer->idx_wq_b));
    }
    SPAR_RETURN_IF_ERROR(vec(names::kIdxKNormW, c.index_head_dim, &layer->idx_norm_w));
    SPAR_RETURN_IF_ERROR(vec(names::kIdxKNormB, c.index_head_dim, &layer->idx_norm_b));
  }
  if (!layer->moe) {
    SPAR_ASSIGN_OR_RETURN(Slice part, EvenSlice(c.intermediate_size, tp, "MLP intermediate columns"));
    SPAR_ASSIGN_OR_RETURN(MlpSource mlp, MlpFrom(ck, c.quant, Layer(l, names::kMlpGate), Layer(l, names::kMlpUp),
                                                 Layer(l, names::kMlpDown), h, c.intermediate_size, part));
    SPAR_ASSIGN_OR_RETURN(layer->ffn, backend_->CreateMlp(mlp));
  } else {
    MoeSource moe;
    SPAR_ASSIGN_OR_RETURN(auto router, Matrix(ck, c.quant, Layer(l, names::kRouter), c.n_routed_experts, h, MatrixKind::kPlainOnly));
    moe.router = router.weight;
    SPAR_ASSIGN_OR_RETURN(moe.correction_bias, Vector(ck, Layer(l, names::kRouterBias), c.n_routed_experts));
    // Expert parallel: a rank runs its own routed experts for every token
    // (routing is replicated) and a column slice of the shared expert.
    SPAR_ASSIGN_OR_RETURN(Slice experts, EvenSlice(c.n_routed_experts, tp, "routed experts"));
    moe.expert_begin = static_cast<int>(experts.begin);
    for (int e = static_cast<int>(experts.begin); e < experts.end; ++e) {
      SPAR_ASSIGN_OR_RETURN(MlpSource ex, MlpFrom(ck, c.quant, names::Expert(l, e, "gate_proj"), names::Expert(l, e, "up_proj"),
                                                  names::Expert(l, e, "down_proj"), h, c.moe_intermediate_size));
      moe.experts.push_back(ex);
    }
    if (c.n_shared_experts > 0) {
      const int64_t inter = static_cast<int64_t>(c.moe_intermediate_size) * c.n_shared_experts;
      SPAR_ASSIGN_OR_RETURN(Slice part, EvenSlice(inter, tp, "shared expert intermediate columns"));
      SPAR_ASSIGN_OR_RETURN(MlpSource sh, MlpFrom(ck, c.quant, Layer(l, names::kSharedGate), Layer(l, names::kSharedUp),
                                                  Layer(l, names::kSharedDown), h, inter, part));
      moe.shared = sh;
    }
    moe.num_experts = c.n_routed_experts;
    moe.top_k = c.num_experts_per_tok;
    moe.n_group = c.n_group;
    moe.topk_group = c.topk_group;
    moe.renormalize = c.norm_topk_prob;
    moe.routed_scaling = static_cast<float>(c.routed_scaling_factor);
    SPAR_ASSIGN_OR_RETURN(layer->ffn, backend_->CreateMoe(moe));
  }
  layers_.push_back(std::move(layer));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Model::Attention(int local, const Layer& layer, const Tensor& h, Tensor* shared_topk,
                                        ForwardTrace* trace) {
  const ModelConfig& c = config_;
  const int64_t r = c.q_lora_rank, lat = c.latent_dim();
  SPAR_ASSIGN_OR_RETURN(Tensor a, backend_->Linear(h, *layer.fused_a));
  const int64_t k0 = r + lat, w0 = k0 + c.index_head_dim;  // the indexer's key, then its head weights
  // The indexer keys are written with the q_a norm (one launch on cuda):
  // only the logits read them, and the selection is the longer branch.
  Tensor qr;
  if (layer.full_indexer) {
    SPAR_ASSIGN_OR_RETURN(qr, backend_->RmsNormAndWriteIndexerCache(a.Cols(0, r), *layer.q_a_norm, c.latent_norm_eps,
                                                                    local, a.Cols(k0, w0), *layer.idx_norm_w,
                                                                    *layer.idx_norm_b, c.indexer_norm_eps, indexer_));
  } else {
    SPAR_ASSIGN_OR_RETURN(qr, backend_->RmsNorm(a.Cols(0, r), *layer.q_a_norm, c.latent_norm_eps));
  }
  // IndexerQueryGemm: the heads' queries ‖ the indexer's query from one GEMM
  // before the fork (kWithQb), or the indexer's query alone before it
  // (kBeforeFork), or each on its own branch (kOnBranch).
  const bool fused_queries = layer.fused_index_query_cols > 0;
  Tensor queries, index_query;
  if (fused_queries) {
    SPAR_ASSIGN_OR_RETURN(queries, backend_->Linear(qr, *layer.q_b));
  } else if (layer.full_indexer && options_.indexer_query == IndexerQueryGemm::kBeforeFork) {
    SPAR_ASSIGN_OR_RETURN(index_query, backend_->Linear(qr, *layer.idx_wq_b));
  }
  const int64_t q_cols = queries.cols() - layer.fused_index_query_cols;
  // The query and the latent cache on one side, the indexer's selection on
  // the other: neither reads the other's results until SparseMla.
  Tensor q_abs;
  auto query = [&]() -> absl::Status {
    Tensor q;
    if (fused_queries) {
      q = queries.Cols(0, q_cols);
    } else {
      SPAR_ASSIGN_OR_RETURN(q, backend_->Linear(qr, *layer.q_b));
    }
    SPAR_ASSIGN_OR_RETURN(q_abs, backend_->WriteLatentCacheAndAbsorbQuery(local, a.Cols(r, r + lat), *layer.kv_a_norm,
                                                                         c.latent_norm_eps, q, *layer.absorb));
    return absl::OkStatus();
  };
  auto select = [&]() -> absl::Status {
    Tensor qi = index_query;
    if (fused_queries) {
      qi = queries.Cols(q_cols, queries.cols());
    } else if (qi.empty()) {
      SPAR_ASSIGN_OR_RETURN(qi, backend_->Linear(qr, *layer.idx_wq_b));
    }
    SPAR_ASSIGN_OR_RETURN(*shared_topk, backend_->IndexerTopK(local, qi, a.Cols(w0, w0 + c.index_n_heads), indexer_));
    return absl::OkStatus();
  };
  SPAR_RETURN_IF_ERROR(layer.full_indexer ? backend_->RunConcurrently(select, query) : query());
  if (trace != nullptr) {
    // ToHost returns floats: slot ids are exact below 2^24 only.
    if (options_.num_blocks * kCacheBlockTokens > (int64_t{1} << 24)) {
      return absl::FailedPreconditionError("a forward trace needs a cache of at most 2^24 slots (262144 blocks)");
    }
    trace->topk = indexer_.topk;
    const int64_t n = shared_topk->rows() * shared_topk->cols();
    std::vector<int32_t>& out = trace->topk_slots[first_layer_ + local];
    out.resize(n);
    // Indices are int32; ToHost returns floats, exact for |v| < 2^24.
    SPAR_ASSIGN_OR_RETURN(std::vector<float> host, backend_->ToHost(*shared_topk));
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(host[i]);
  }
  SPAR_ASSIGN_OR_RETURN(Tensor o, backend_->AttendAndUnabsorb(local, q_abs, *shared_topk,
                                                              static_cast<float>(c.softmax_scale()), *layer.absorb));
  SPAR_ASSIGN_OR_RETURN(Tensor out, backend_->Linear(o, *layer.o_proj));
  // Each rank's o_proj saw only its heads: the partial sums add up.
  SPAR_RETURN_IF_ERROR(backend_->AllReduceSum(&out));
  return out;
}

absl::StatusOr<Tensor> Model::Forward(const StepPlan& plan, const Tensor* input, ForwardTrace* trace) {
  return RunForward(plan, input, trace, StepOutput::kLogits);
}

absl::StatusOr<Tensor> Model::RunForward(const StepPlan& plan, const Tensor* input, ForwardTrace* trace,
                                         StepOutput output) {
  if (!is_first_stage() &&
      (input == nullptr || input->rows() != plan.num_tokens() || input->cols() != config_.hidden_size)) {
    return absl::InvalidArgumentError("stage input must be [tokens, hidden]");
  }
  Backend::StepOptions options;
  // A trace reads tensors back mid-step and the random-selection control
  // draws its positions on the host: neither can be replayed.
  options.replayable = trace == nullptr && !indexer_.random_selection_seed.has_value();
  options.indexer_topk = indexer_.topk;
  options.indexer_heads = indexer_.heads;
  options.graph_variant = static_cast<int>(output);
  // Speculative decoding's verify steps bring 1 + drafts tokens for every
  // sequence, through every stage (short prefill chunks of that shape are
  // replayed too).
  options.max_tokens_per_seq = 1 + kMaxSpeculativeTokens;
  return backend_->RunStep(
      plan, is_first_stage() ? nullptr : input,
      [&](const Tensor* in) { return ForwardOps(plan, in, trace, output); }, options);
}

absl::Status Model::DecoderLayerOps(int local, const Layer& layer, Tensor* x, Tensor* residual, Tensor* topk,
                                    ForwardTrace* trace) {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  SPAR_ASSIGN_OR_RETURN(Tensor h, backend_->AddRmsNorm(residual, *x, *layer.input_norm, eps));
  SPAR_ASSIGN_OR_RETURN(Tensor attn, Attention(local, layer, h, topk, trace));
  SPAR_ASSIGN_OR_RETURN(h, backend_->AddRmsNorm(residual, attn, *layer.post_norm, eps));
  if (layer.moe) {
    SPAR_ASSIGN_OR_RETURN(*x, backend_->Moe(h, *layer.ffn));
  } else {
    SPAR_ASSIGN_OR_RETURN(*x, backend_->Mlp(h, *layer.ffn));
  }
  return backend_->AllReduceSum(x);
}

absl::StatusOr<Tensor> Model::ForwardOps(const StepPlan& plan, const Tensor* input, ForwardTrace* trace,
                                         StepOutput output) {
  Tensor x;
  if (is_first_stage()) {
    SPAR_ASSIGN_OR_RETURN(x, backend_->Embed(*embedding_));
  } else {
    x = *input;
  }
  Tensor residual, topk;
  for (size_t i = 0; i < layers_.size(); ++i) {
    SPAR_RETURN_IF_ERROR(DecoderLayerOps(static_cast<int>(i), *layers_[i], &x, &residual, &topk, trace));
  }
  SPAR_RETURN_IF_ERROR(backend_->AddInPlace(&residual, x));
  if (!is_last_stage()) return residual;
  if (output == StepOutput::kNormedHidden) {
    return backend_->RmsNorm(residual, *final_norm_, static_cast<float>(config_.rms_norm_eps));
  }
  if (plan.logit_rows.empty()) return Tensor();
  SPAR_ASSIGN_OR_RETURN(Tensor last, backend_->GatherRows(residual, plan.logit_rows));
  SPAR_ASSIGN_OR_RETURN(Tensor normed, backend_->RmsNorm(last, *final_norm_, static_cast<float>(config_.rms_norm_eps)));
  return backend_->Linear(normed, *lm_head_);
}

// ---- speculative decoding: the MTP layer and the steps that feed it ----

namespace {
// Graph variants of the MTP layer's step (Backend::StepOptions): after the
// main model's StepOutput values.
constexpr int kMtpGraphVariant = 2;
}  // namespace

absl::Status Model::LoadMtp(const Checkpoint& ck) {
  using names::Layer;
  const ModelConfig& c = config_;
  if (c.num_nextn_predict_layers < 1) {
    return absl::InvalidArgumentError(
        "speculative decoding needs the model's multi-token-prediction layer, but config.json has "
        "num_nextn_predict_layers 0");
  }
  if (!is_last_stage()) return absl::InvalidArgumentError("the MTP layer is loaded on the last stage only");
  const int l = c.num_hidden_layers;
  const int64_t h = c.hidden_size;
  if (!ck.Has(Layer(l, names::kMtpEhProj))) {
    return absl::InvalidArgumentError(absl::StrCat("config.json has num_nextn_predict_layers ",
                                                   c.num_nextn_predict_layers, " but the checkpoint has no ",
                                                   Layer(l, names::kMtpEhProj)));
  }
  auto mtp = std::make_unique<Mtp>();
  SPAR_RETURN_IF_ERROR(LoadLayer(ck, l));  // appends to layers_; moved out below
  mtp->block = std::move(layers_.back());
  layers_.pop_back();
  auto vec = [&](const char* name, std::unique_ptr<Weight>* out) -> absl::Status {
    SPAR_ASSIGN_OR_RETURN(TensorView v, Vector(ck, Layer(l, name), h));
    SPAR_ASSIGN_OR_RETURN(*out, backend_->CreateVector(v));
    return absl::OkStatus();
  };
  SPAR_RETURN_IF_ERROR(vec(names::kMtpEnorm, &mtp->enorm));
  SPAR_RETURN_IF_ERROR(vec(names::kMtpHnorm, &mtp->hnorm));
  SPAR_RETURN_IF_ERROR(vec(names::kMtpHeadNorm, &mtp->head_norm));
  // eh_proj · [e ‖ g] = eh_proj[:, :h] · e + eh_proj[:, h:] · g: two GEMMs
  // instead of a concatenation the op interface does not have.
  SPAR_ASSIGN_OR_RETURN(MatrixSource eh, Matrix(ck, c.quant, Layer(l, names::kMtpEhProj), h, 2 * h));
  for (int half = 0; half < 2; ++half) {
    LinearSource src;
    src.parts.push_back(eh);
    src.parts[0].col_begin = half * h;
    src.parts[0].col_end = (half + 1) * h;
    std::unique_ptr<Weight>& out = half == 0 ? mtp->eh_embed : mtp->eh_hidden;
    SPAR_ASSIGN_OR_RETURN(out, backend_->CreateLinear(src));
  }
  if (ck.Has(Layer(l, names::kMtpEmbed))) {
    SPAR_ASSIGN_OR_RETURN(auto emb, Matrix(ck, c.quant, Layer(l, names::kMtpEmbed), c.vocab_size, h, MatrixKind::kPlainOnly));
    SPAR_ASSIGN_OR_RETURN(mtp->embedding, backend_->CreateEmbedding(emb.weight));
  } else if (embedding_ == nullptr) {
    // A last stage that is not the first: the main embedding, for this layer.
    SPAR_ASSIGN_OR_RETURN(auto emb, Matrix(ck, c.quant, names::kEmbed, c.vocab_size, h, MatrixKind::kPlainOnly));
    SPAR_ASSIGN_OR_RETURN(embedding_, backend_->CreateEmbedding(emb.weight));
  }
  if (ck.Has(Layer(l, names::kMtpHead))) {
    LinearSource head;
    SPAR_ASSIGN_OR_RETURN(auto m, Matrix(ck, c.quant, Layer(l, names::kMtpHead), c.vocab_size, h));
    head.parts.push_back(m);
    head.fp32_output = true;
    SPAR_ASSIGN_OR_RETURN(mtp->head, backend_->CreateLinear(head));
  }
  mtp_ = std::move(mtp);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Model::ForwardNormed(const StepPlan& plan, const Tensor* input) {
  if (!is_last_stage()) return absl::FailedPreconditionError("normed hidden states come from the last stage");
  return RunForward(plan, input, nullptr, StepOutput::kNormedHidden);
}

absl::StatusOr<Tensor> Model::HeadLogits(const Tensor& normed) {
  if (!is_last_stage()) return absl::FailedPreconditionError("the lm_head is on the last stage");
  return backend_->Linear(normed, *lm_head_);
}

absl::StatusOr<Tensor> Model::MtpForward(const StepPlan& plan, const Tensor& hidden) {
  if (!has_mtp()) return absl::FailedPreconditionError("the MTP layer is not loaded");
  if (hidden.rows() != plan.num_tokens() || hidden.cols() != config_.hidden_size) {
    return absl::InvalidArgumentError("MTP input must be [tokens, hidden]");
  }
  Backend::StepOptions options;
  // Position 0's embedding is zeroed by host row numbers (MtpOps).
  const bool has_position_zero =
      std::find(plan.positions.begin(), plan.positions.end(), 0) != plan.positions.end();
  options.replayable = !has_position_zero && !indexer_.random_selection_seed.has_value();
  options.indexer_topk = indexer_.topk;
  options.indexer_heads = indexer_.heads;
  options.graph_variant = kMtpGraphVariant;
  options.max_tokens_per_seq = 1 + kMaxSpeculativeTokens;
  return backend_->RunStep(
      plan, &hidden, [&](const Tensor* in) { return MtpOps(plan, *in); }, options);
}

absl::StatusOr<Tensor> Model::MtpOps(const StepPlan& plan, const Tensor& hidden) {
  const Mtp& mtp = *mtp_;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  SPAR_ASSIGN_OR_RETURN(Tensor e, backend_->Embed(mtp.embedding ? *mtp.embedding : *embedding_));
  // As vLLM's MTP layer: no token embedding at position 0.
  std::vector<int32_t> first_rows;
  for (int64_t t = 0; t < plan.num_tokens(); ++t) {
    if (plan.positions[t] == 0) first_rows.push_back(static_cast<int32_t>(t));
  }
  if (!first_rows.empty()) SPAR_RETURN_IF_ERROR(backend_->ZeroRows(&e, first_rows));
  SPAR_ASSIGN_OR_RETURN(Tensor en, backend_->RmsNorm(e, *mtp.enorm, eps));
  SPAR_ASSIGN_OR_RETURN(Tensor hn, backend_->RmsNorm(hidden, *mtp.hnorm, eps));
  SPAR_ASSIGN_OR_RETURN(Tensor x, backend_->Linear(en, *mtp.eh_embed));
  SPAR_ASSIGN_OR_RETURN(Tensor xh, backend_->Linear(hn, *mtp.eh_hidden));
  SPAR_RETURN_IF_ERROR(backend_->AddInPlace(&x, xh));
  Tensor residual, topk;
  // The MTP layer's caches are the last cache layer.
  SPAR_RETURN_IF_ERROR(
      DecoderLayerOps(static_cast<int>(layers_.size()), *mtp.block, &x, &residual, &topk, nullptr));
  SPAR_RETURN_IF_ERROR(backend_->AddInPlace(&residual, x));
  if (plan.logit_rows.empty()) return Tensor();
  return backend_->GatherRows(residual, plan.logit_rows);
}

absl::StatusOr<Tensor> Model::MtpLogits(const Tensor& mtp_hidden) {
  if (!has_mtp()) return absl::FailedPreconditionError("the MTP layer is not loaded");
  SPAR_ASSIGN_OR_RETURN(Tensor normed,
                        backend_->RmsNorm(mtp_hidden, *mtp_->head_norm, static_cast<float>(config_.rms_norm_eps)));
  return backend_->Linear(normed, mtp_->head ? *mtp_->head : *lm_head_);
}

}  // namespace spar
