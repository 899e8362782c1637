#include "engine/cpu/cpu_backend.h"

#include <chrono>
#include <utility>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "engine/random_selection.h"
#include "engine/weight_convert.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/fp8_block_ref.h"
#include "kernels/ref/gemm_ref.h"
#include "kernels/ref/indexer_ref.h"
#include "kernels/ref/moe_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "kernels/ref/sampling_ref.h"
#include "kernels/ref/sparse_mla_ref.h"
#include "kernels/ref/topk_ref.h"

namespace spar {
namespace {

// ---- weights ----

struct CpuMatrix : Weight {
  int64_t rows = 0, cols = 0;
  std::vector<float> w;  // [rows, cols] fp32 (dequantized)
};

struct CpuVector : Weight {
  std::vector<float> v;
};

struct CpuAbsorb : Weight {
  int heads = 0, nope = 0, v_dim = 0, rank = 0;
  std::vector<float> uk_t;  // [heads, rank, nope]: W_UKᵀ per head
  std::vector<float> uv;    // [heads, v_dim, rank]
};

struct CpuMlp : Weight {
  CpuMatrix gate, up, down;
};

struct CpuMoe : Weight {
  CpuMatrix router;
  std::vector<float> bias;
  int expert_begin = 0;
  std::vector<CpuMlp> experts;
  std::unique_ptr<CpuMlp> shared;
  ref::MoeRoutingParams routing;
};

absl::StatusOr<CpuMatrix> BuildMatrix(const std::vector<MatrixSource>& parts) {
  CpuMatrix m;
  for (const auto& p : parts) {
    if (m.cols != 0 && p.cols() != m.cols) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", p.weight.name, "\" has ", p.cols(),
                                                     " columns, expected ", m.cols));
    }
    m.cols = p.cols();
    SPAR_ASSIGN_OR_RETURN(std::vector<float> part, MatrixToFloat(p));
    m.w.insert(m.w.end(), part.begin(), part.end());
    m.rows += p.rows();
  }
  return m;
}

absl::StatusOr<CpuMlp> BuildMlp(const MlpSource& src) {
  CpuMlp mlp;
  SPAR_ASSIGN_OR_RETURN(mlp.gate, BuildMatrix({src.gate}));
  SPAR_ASSIGN_OR_RETURN(mlp.up, BuildMatrix({src.up}));
  SPAR_ASSIGN_OR_RETURN(mlp.down, BuildMatrix({src.down}));
  if (mlp.gate.rows != mlp.up.rows || mlp.down.cols != mlp.gate.rows || mlp.gate.cols != mlp.down.rows) {
    return absl::InvalidArgumentError(absl::StrCat("MLP \"", src.gate.weight.name, "\": inconsistent shapes"));
  }
  return mlp;
}

template <typename T>
const T& As(const Weight& w) {
  return static_cast<const T&>(w);
}

// ---- activations ----

Tensor NewTensor(int64_t rows, int64_t cols, DType dtype = DType::kF32) {
  const size_t bytes = static_cast<size_t>(rows * cols) * DTypeSize(dtype);
  std::shared_ptr<void> storage(::operator new(std::max<size_t>(bytes, 1)), [](void* p) { ::operator delete(p); });
  void* data = storage.get();
  return Tensor(dtype, rows, cols, std::move(storage), data, cols);
}

// y[rows, w.rows] = x · wᵀ.
Tensor MatMul(const Tensor& x, const CpuMatrix& w) {
  Tensor y = NewTensor(x.rows(), w.rows);
  ref::Gemm(x.as<float>(), x.ld(), x.rows(), w.cols, w.w.data(), w.rows, y.as<float>(), y.ld());
  return y;
}

Tensor RunMlp(const Tensor& x, const CpuMlp& mlp) {
  Tensor g = MatMul(x, mlp.gate);
  Tensor u = MatMul(x, mlp.up);
  ref::SiluMul(g.as<float>(), u.as<float>(), g.ld(), g.rows(), g.cols(), g.as<float>(), g.ld());
  return MatMul(g, mlp.down);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() = default;
  CpuBackend(TpRank tp, std::shared_ptr<CpuGroup> group) : tp_(tp), group_(std::move(group)) {}

  std::string name() const override { return "cpu"; }
  TpRank tp() const override { return tp_; }

  absl::StatusOr<double> TimeWork(const std::function<absl::Status()>& work) override {
    const auto start = std::chrono::steady_clock::now();
    SPAR_RETURN_IF_ERROR(work());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  absl::Status AllReduceSum(Tensor* x) override {
    if (tp_.size == 1) return absl::OkStatus();
    if (!x->contiguous() || x->dtype() != DType::kF32) {
      return absl::InvalidArgumentError("all-reduce needs a contiguous fp32 tensor");
    }
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = group_->AllReduceSum(tp_.rank, x->as<float>(), static_cast<size_t>(x->rows() * x->cols()));
    // Wall time including the wait for the other ranks, as NCCL's figure.
    allreduce_seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return s;
  }
  std::vector<double> TakeCollectiveDurations() override { return std::exchange(allreduce_seconds_, {}); }

  absl::Status RejoinGroup(const TpRendezvous& group) override {
    if (tp_.size == 1) return absl::FailedPreconditionError("rejoin: this backend is not tensor-parallel");
    if (group.cpu_group == nullptr) return absl::InvalidArgumentError("rejoin: no cpu group");
    // The old group was broken by its owner (a blocked all-reduce failed);
    // this backend's only state tied to it is the pointer.
    group_ = group.cpu_group;
    allreduce_seconds_.clear();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateLinear(const LinearSource& src) override {
    SPAR_ASSIGN_OR_RETURN(CpuMatrix m, BuildMatrix(src.parts));
    return std::unique_ptr<Weight>(new CpuMatrix(std::move(m)));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateVector(const TensorView& src) override {
    auto v = std::make_unique<CpuVector>();
    SPAR_ASSIGN_OR_RETURN(v->v, TensorToFloat(src));
    return std::unique_ptr<Weight>(std::move(v));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateEmbedding(const TensorView& src) override {
    MatrixSource m;
    m.weight = src;
    SPAR_ASSIGN_OR_RETURN(CpuMatrix table, BuildMatrix({m}));
    return std::unique_ptr<Weight>(new CpuMatrix(std::move(table)));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateAbsorb(const AbsorbSource& src) override {
    SPAR_ASSIGN_OR_RETURN(CpuMatrix kv_b, BuildMatrix({src.kv_b}));
    const int per_head = src.nope_dim + src.v_dim;
    if (kv_b.cols != src.kv_lora_rank || kv_b.rows < static_cast<int64_t>(src.head_begin + src.heads) * per_head) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", src.kv_b.weight.name, "\" does not match ",
                                                     src.heads, " heads of ", per_head, " rows x ", src.kv_lora_rank));
    }
    auto a = std::make_unique<CpuAbsorb>();
    a->heads = src.heads;
    a->nope = src.nope_dim;
    a->v_dim = src.v_dim;
    a->rank = src.kv_lora_rank;
    a->uk_t.resize(static_cast<size_t>(a->heads) * a->rank * a->nope);
    a->uv.resize(static_cast<size_t>(a->heads) * a->v_dim * a->rank);
    for (int h = 0; h < a->heads; ++h) {
      const float* head = kv_b.w.data() + static_cast<size_t>(src.head_begin + h) * per_head * a->rank;
      for (int i = 0; i < a->nope; ++i) {
        for (int j = 0; j < a->rank; ++j) {
          a->uk_t[(static_cast<size_t>(h) * a->rank + j) * a->nope + i] = head[i * a->rank + j];
        }
      }
      std::memcpy(a->uv.data() + static_cast<size_t>(h) * a->v_dim * a->rank, head + a->nope * a->rank,
                  sizeof(float) * a->v_dim * a->rank);
    }
    return std::unique_ptr<Weight>(std::move(a));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateMlp(const MlpSource& src) override {
    SPAR_ASSIGN_OR_RETURN(CpuMlp mlp, BuildMlp(src));
    return std::unique_ptr<Weight>(new CpuMlp(std::move(mlp)));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateMoe(const MoeSource& src) override {
    auto moe = std::make_unique<CpuMoe>();
    MatrixSource router;
    router.weight = src.router;
    SPAR_ASSIGN_OR_RETURN(moe->router, BuildMatrix({router}));
    SPAR_ASSIGN_OR_RETURN(moe->bias, TensorToFloat(src.correction_bias));
    if (moe->router.rows != src.num_experts || static_cast<int>(moe->bias.size()) != src.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat("router \"", src.router.name, "\" does not have ",
                                                     src.num_experts, " experts"));
    }
    moe->expert_begin = src.expert_begin;
    for (const auto& e : src.experts) {
      SPAR_ASSIGN_OR_RETURN(CpuMlp mlp, BuildMlp(e));
      moe->experts.push_back(std::move(mlp));
    }
    if (src.shared) {
      SPAR_ASSIGN_OR_RETURN(CpuMlp mlp, BuildMlp(*src.shared));
      moe->shared = std::make_unique<CpuMlp>(std::move(mlp));
    }
    moe->routing = ref::MoeRoutingParams{src.num_experts, src.top_k,      src.n_group,
                                         src.topk_group,  src.renormalize, src.routed_scaling};
    return std::unique_ptr<Weight>(std::move(moe));
  }

  absl::Status SetRope(const ref::RopeParams& params, int64_t /*max_positions: computed per position*/) override {
    rope_ = params;
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> AllocateCaches(const CacheSpec& spec) override {
    // Host memory: the block count is always explicit here.
    if (spec.num_layers <= 0 || spec.num_blocks <= 0) {
      return absl::InvalidArgumentError("cache needs at least one layer and one block");
    }
    spec_ = spec;
    const size_t latent_bytes = static_cast<size_t>(spec.num_blocks) * kCacheBlockTokens * LatentRowBytes(spec.latent_format);
    const size_t indexer_bytes = static_cast<size_t>(spec.num_blocks) * IndexerPageBytes(spec.indexer_format);
    latent_.assign(spec.num_layers, std::vector<uint8_t>(latent_bytes, 0));
    indexer_.assign(spec.num_layers, std::vector<uint8_t>(indexer_bytes, 0));
    return spec.num_blocks;
  }

  absl::StatusOr<std::vector<uint8_t>> ReadCacheBlock(CacheKind kind, int layer, int64_t block) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    if (block < 0 || block >= spec_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("block ", block, " is outside the cache (", spec_.num_blocks,
                                                     " blocks)"));
    }
    const size_t bytes = kind == CacheKind::kLatent ? kCacheBlockTokens * LatentRowBytes(spec_.latent_format)
                                                    : IndexerPageBytes(spec_.indexer_format);
    const uint8_t* begin = (kind == CacheKind::kLatent ? latent_ : indexer_)[layer].data() + block * bytes;
    return std::vector<uint8_t>(begin, begin + bytes);
  }

  absl::Status BeginStep(const StepPlan& plan) override {
    plan_ = &plan;
    for (const auto& q : plan.seqs) {
      for (int32_t b : q.block_table) {
        if (b < 0 || b >= spec_.num_blocks) {
          return absl::InvalidArgumentError(absl::StrCat("block ", b, " is outside the cache (", spec_.num_blocks,
                                                         " blocks)"));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Embed(const Weight& table) override {
    const auto& t = As<CpuMatrix>(table);
    Tensor x = NewTensor(plan_->num_tokens(), t.cols);
    for (int64_t i = 0; i < plan_->num_tokens(); ++i) {
      const int32_t id = plan_->token_ids[i];
      if (id < 0 || id >= t.rows) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " out of range"));
      std::memcpy(x.as<float>() + i * x.ld(), t.w.data() + static_cast<size_t>(id) * t.cols, sizeof(float) * t.cols);
    }
    return x;
  }

  absl::StatusOr<Tensor> Linear(const Tensor& x, const Weight& w) override {
    const auto& m = As<CpuMatrix>(w);
    if (x.cols() != m.cols) {
      return absl::InvalidArgumentError(absl::StrCat("linear: input has ", x.cols(), " columns, weight ", m.cols));
    }
    return MatMul(x, m);
  }

  absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Weight& w, float eps) override {
    const auto& v = As<CpuVector>(w);
    Tensor y = NewTensor(x.rows(), x.cols());
    ref::RmsNorm(x.as<float>(), x.ld(), x.rows(), x.cols(), v.v.data(), eps, y.as<float>(), y.ld());
    return y;
  }

  absl::StatusOr<Tensor> AddRmsNorm(Tensor* residual, const Tensor& x, const Weight& w, float eps) override {
    if (residual->empty()) {
      *residual = NewTensor(x.rows(), x.cols());
      for (int64_t r = 0; r < x.rows(); ++r) {
        std::memcpy(residual->as<float>() + r * residual->ld(), x.as<float>() + r * x.ld(), sizeof(float) * x.cols());
      }
    } else {
      SPAR_RETURN_IF_ERROR(AddInPlace(residual, x));
    }
    return RmsNorm(*residual, w, eps);
  }

  absl::Status AddInPlace(Tensor* acc, const Tensor& x) override {
    if (acc->rows() != x.rows() || acc->cols() != x.cols()) return absl::InvalidArgumentError("add: shape mismatch");
    for (int64_t r = 0; r < x.rows(); ++r) {
      float* a = acc->as<float>() + r * acc->ld();
      const float* b = x.as<float>() + r * x.ld();
      for (int64_t c = 0; c < x.cols(); ++c) a[c] += b[c];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Mlp(const Tensor& x, const Weight& mlp) override { return RunMlp(x, As<CpuMlp>(mlp)); }

  absl::StatusOr<Tensor> Moe(const Tensor& x, const Weight& w) override {
    const auto& moe = As<CpuMoe>(w);
    const int64_t t_count = x.rows();
    const int k = moe.routing.top_k;
    Tensor logits = MatMul(x, moe.router);
    std::vector<int32_t> ids(t_count * k);
    std::vector<float> wts(t_count * k);
    ref::MoeRoute(logits.as<float>(), moe.bias.data(), t_count, moe.routing, ids.data(), wts.data());
    Tensor y = moe.shared ? RunMlp(x, *moe.shared) : NewTensor(t_count, x.cols());
    if (!moe.shared) std::memset(y.as<float>(), 0, sizeof(float) * t_count * x.cols());
    // Group tokens by local expert, run each expert once over its tokens.
    std::vector<std::vector<std::pair<int64_t, float>>> per_expert(moe.experts.size());
    for (int64_t t = 0; t < t_count; ++t) {
      for (int j = 0; j < k; ++j) {
        const int local = ids[t * k + j] - moe.expert_begin;
        if (local >= 0 && local < static_cast<int>(moe.experts.size())) per_expert[local].push_back({t, wts[t * k + j]});
      }
    }
    for (size_t e = 0; e < moe.experts.size(); ++e) {
      if (per_expert[e].empty()) continue;
      Tensor xe = NewTensor(static_cast<int64_t>(per_expert[e].size()), x.cols());
      for (size_t i = 0; i < per_expert[e].size(); ++i) {
        std::memcpy(xe.as<float>() + i * xe.ld(), x.as<float>() + per_expert[e][i].first * x.ld(),
                    sizeof(float) * x.cols());
      }
      Tensor ye = RunMlp(xe, moe.experts[e]);
      for (size_t i = 0; i < per_expert[e].size(); ++i) {
        float* dst = y.as<float>() + per_expert[e][i].first * y.ld();
        const float* src = ye.as<float>() + i * ye.ld();
        for (int64_t c = 0; c < x.cols(); ++c) dst[c] += per_expert[e][i].second * src[c];
      }
    }
    return y;
  }

  absl::StatusOr<Tensor> GatherRows(const Tensor& x, const std::vector<int32_t>& rows) override {
    Tensor y = NewTensor(static_cast<int64_t>(rows.size()), x.cols());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= x.rows()) return absl::InvalidArgumentError("gather: row out of range");
      std::memcpy(y.as<float>() + i * y.ld(), x.as<float>() + rows[i] * x.ld(), sizeof(float) * x.cols());
    }
    return y;
  }

  absl::Status ZeroRows(Tensor* x, const std::vector<int32_t>& rows) override {
    for (int32_t r : rows) {
      if (r < 0 || r >= x->rows()) return absl::InvalidArgumentError("zero rows: row out of range");
      std::memset(x->as<float>() + r * x->ld(), 0, sizeof(float) * x->cols());
    }
    return absl::OkStatus();
  }

  absl::Status WriteLatentCache(int layer, const Tensor& kv_a, const Weight& kv_a_norm, float eps) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    const auto& w = As<CpuVector>(kv_a_norm);
    const int nope = kLatentNopeDim;
    if (kv_a.cols() != kLatentDim) return absl::InvalidArgumentError("kv_a must have 576 columns");
    Tensor row = NewTensor(kv_a.rows(), kLatentDim);
    ref::RmsNorm(kv_a.as<float>(), kv_a.ld(), kv_a.rows(), nope, w.v.data(), eps, row.as<float>(), row.ld());
    for (int64_t t = 0; t < kv_a.rows(); ++t) {
      std::memcpy(row.as<float>() + t * row.ld() + nope, kv_a.as<float>() + t * kv_a.ld() + nope,
                  sizeof(float) * kLatentRopeDim);
    }
    ref::ApplyRope(row.as<float>(), row.ld(), row.rows(), 1, plan_->positions.data(), nope,
                   ref::RopePairs::kInterleaved, rope_);
    const size_t rb = LatentRowBytes(spec_.latent_format);
    for (int64_t t = 0; t < kv_a.rows(); ++t) {
      ref::EncodeLatentRow(spec_.latent_format, row.as<float>() + t * row.ld(),
                           latent_[layer].data() + static_cast<size_t>(plan_->slots[t]) * rb);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> AbsorbQuery(const Tensor& q, const Weight& w) override {
    const auto& a = As<CpuAbsorb>(w);
    const int per_head = static_cast<int>(q.cols() / a.heads);
    const int rope_dim = per_head - a.nope;
    if (rope_dim != kLatentRopeDim || a.rank != kLatentNopeDim) {
      return absl::InvalidArgumentError("absorb: query heads must be [nope ‖ 64 rope] over a 512 latent");
    }
    Tensor qr = NewTensor(q.rows(), q.cols());
    for (int64_t t = 0; t < q.rows(); ++t) {
      std::memcpy(qr.as<float>() + t * qr.ld(), q.as<float>() + t * q.ld(), sizeof(float) * q.cols());
    }
    ref::ApplyRope(qr.as<float>(), per_head, q.rows() * a.heads, a.heads, plan_->positions.data(), a.nope,
                   ref::RopePairs::kInterleaved, rope_);
    Tensor out = NewTensor(q.rows(), static_cast<int64_t>(a.heads) * kLatentDim);
    for (int h = 0; h < a.heads; ++h) {
      // q_latent[t] = q_nope[t] · W_UK  (as x · (W_UKᵀ)ᵀ)
      ref::Gemm(qr.as<float>() + h * per_head, qr.ld(), q.rows(), a.nope,
                a.uk_t.data() + static_cast<size_t>(h) * a.rank * a.nope, a.rank,
                out.as<float>() + h * kLatentDim, out.ld());
      for (int64_t t = 0; t < q.rows(); ++t) {
        std::memcpy(out.as<float>() + t * out.ld() + h * kLatentDim + a.rank,
                    qr.as<float>() + t * qr.ld() + h * per_head + a.nope, sizeof(float) * rope_dim);
      }
    }
    return out;
  }

  absl::Status WriteIndexerCache(int layer, const Tensor& k, const Weight& norm_w, const Weight& norm_b, float eps,
                                 const IndexerSpec& spec) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    if (k.cols() != kIndexerHeadDim) return absl::InvalidArgumentError("indexer keys must have 128 columns");
    Tensor kn = NewTensor(k.rows(), k.cols());
    ref::LayerNorm(k.as<float>(), k.ld(), k.rows(), k.cols(), As<CpuVector>(norm_w).v.data(),
                   As<CpuVector>(norm_b).v.data(), eps, kn.as<float>(), kn.ld());
    ref::ApplyRope(kn.as<float>(), kn.ld(), kn.rows(), 1, plan_->positions.data(), 0, spec.rope_pairs, rope_);
    const size_t page = IndexerPageBytes(spec_.indexer_format);
    for (int64_t t = 0; t < k.rows(); ++t) {
      const int32_t slot = plan_->slots[t];
      ref::EncodeIndexerKey(spec_.indexer_format, kn.as<float>() + t * kn.ld(),
                            indexer_[layer].data() + static_cast<size_t>(slot / kCacheBlockTokens) * page, slot % kCacheBlockTokens);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> IndexerTopK(int layer, const Tensor& q, const Tensor& w, const IndexerSpec& spec) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    const int64_t t_count = q.rows();
    const int heads = spec.heads;
    if (q.cols() != static_cast<int64_t>(heads) * kIndexerHeadDim || w.cols() != heads) {
      return absl::InvalidArgumentError("indexer: q must be [T, heads*128] and w [T, heads]");
    }
    Tensor qr = NewTensor(t_count, q.cols());
    Tensor wr = NewTensor(t_count, heads);
    for (int64_t t = 0; t < t_count; ++t) {
      std::memcpy(qr.as<float>() + t * qr.ld(), q.as<float>() + t * q.ld(), sizeof(float) * q.cols());
      for (int h = 0; h < heads; ++h) wr.as<float>()[t * heads + h] = w.as<float>()[t * w.ld() + h] * spec.weight_scale;
    }
    ref::ApplyRope(qr.as<float>(), kIndexerHeadDim, t_count * heads, heads, plan_->positions.data(), 0,
                   spec.rope_pairs, rope_);
    Tensor out = NewTensor(t_count, spec.topk, DType::kI32);
    int32_t* idx = out.as<int32_t>();
    const ref::IndexerCacheView cache{spec_.indexer_format, indexer_[layer].data()};
    ParallelFor(t_count, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> logits;
      std::vector<int32_t> chosen(spec.topk);
      for (int64_t t = t0; t < t1; ++t) {
        const SequenceStep& seq = plan_->seqs[plan_->token_seq[t]];
        const int32_t ctx = plan_->positions[t] + 1;  // causal: keys [0, pos]
        if (ctx <= spec.topk) {
          // Every visible key is selected: skip the scores (same set, same order).
          for (int i = 0; i < spec.topk; ++i) chosen[i] = i < ctx ? i : -1;
        } else if (spec.random_selection_seed.has_value()) {
          RandomCausalSelection(*spec.random_selection_seed, layer, plan_->positions[t], ctx, spec.topk,
                                chosen.data());
        } else {
          logits.resize(ctx);
          const int32_t* table = seq.block_table.data();
          ref::IndexerLogitsPaged(qr.as<float>() + t * qr.ld(), wr.as<float>() + t * heads, 1, heads, cache, &table,
                                  &ctx, logits.data(), ctx);
          ref::TopK(logits.data(), ctx, spec.topk, chosen.data());
        }
        for (int i = 0; i < spec.topk; ++i) {
          const int32_t pos = chosen[i];
          idx[t * spec.topk + i] =
              pos < 0 ? -1 : seq.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens;
        }
      }
    });
    return out;
  }

  absl::StatusOr<Tensor> SparseMla(int layer, const Tensor& q_abs, const Tensor& indices, float scale) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    const int heads = static_cast<int>(q_abs.cols() / kLatentDim);
    if (!q_abs.contiguous() || !indices.contiguous()) return absl::InvalidArgumentError("sparse mla: strided input");
    Tensor out = NewTensor(q_abs.rows(), static_cast<int64_t>(heads) * kLatentNopeDim);
    const ref::LatentCacheView cache{spec_.latent_format, latent_[layer].data(), spec_.num_blocks * kCacheBlockTokens};
    ref::SparseMla(q_abs.as<float>(), q_abs.rows(), heads, cache, indices.as<int32_t>(),
                   static_cast<int>(indices.cols()), scale, out.as<float>(), nullptr);
    return out;
  }

  absl::StatusOr<Tensor> UnabsorbOutput(const Tensor& o_lat, const Weight& w) override {
    const auto& a = As<CpuAbsorb>(w);
    Tensor out = NewTensor(o_lat.rows(), static_cast<int64_t>(a.heads) * a.v_dim);
    for (int h = 0; h < a.heads; ++h) {
      ref::Gemm(o_lat.as<float>() + h * a.rank, o_lat.ld(), o_lat.rows(), a.rank,
                a.uv.data() + static_cast<size_t>(h) * a.v_dim * a.rank, a.v_dim, out.as<float>() + h * a.v_dim,
                out.ld());
    }
    return out;
  }

  absl::StatusOr<std::vector<SampleResult>> Sample(const Tensor& logits,
                                                   const std::vector<SampleRequest>& requests) override {
    if (static_cast<int64_t>(requests.size()) != logits.rows()) {
      return absl::InvalidArgumentError("sample: one request per logits row");
    }
    std::vector<SampleResult> out(requests.size());
    static const TokenHistory kEmpty;
    std::vector<float> masked;
    for (size_t i = 0; i < requests.size(); ++i) {
      const float* row = logits.as<float>() + i * logits.ld();
      const int vocab = static_cast<int>(logits.cols());
      const auto& r = requests[i];
      if (r.token_mask != nullptr) {  // -inf before everything, logprobs included
        masked.assign(row, row + vocab);
        ref::ApplyTokenMask(masked.data(), vocab, r.token_mask);
        row = masked.data();
      }
      out[i].token = ref::SampleToken(row, vocab, r.params, r.history ? *r.history : kEmpty, r.step);
      out[i].logprob = ref::TokenLogprob(row, vocab, out[i].token);
      if (r.top_logprobs > 0) out[i].top = ref::TopLogprobs(row, vocab, r.top_logprobs);
    }
    return out;
  }

  absl::StatusOr<std::vector<float>> ToHost(const Tensor& x) override {
    std::vector<float> out(static_cast<size_t>(x.rows() * x.cols()));
    if (x.dtype() == DType::kI32) {
      for (int64_t r = 0; r < x.rows(); ++r) {
        for (int64_t c = 0; c < x.cols(); ++c) out[r * x.cols() + c] = static_cast<float>(x.as<int32_t>()[r * x.ld() + c]);
      }
      return out;
    }
    for (int64_t r = 0; r < x.rows(); ++r) {
      std::memcpy(out.data() + r * x.cols(), x.as<float>() + r * x.ld(), sizeof(float) * x.cols());
    }
    return out;
  }

  absl::StatusOr<Tensor> FromHost(const std::vector<float>& data, int64_t rows, int64_t cols) override {
    if (static_cast<int64_t>(data.size()) != rows * cols) return absl::InvalidArgumentError("from host: size mismatch");
    Tensor x = NewTensor(rows, cols);
    std::memcpy(x.as<float>(), data.data(), sizeof(float) * data.size());
    return x;
  }

  // fp32 activations: a hop carries them as they are.
  absl::StatusOr<HostActivations> ToHostActivations(const Tensor& x) override {
    if (x.dtype() != DType::kF32) return absl::InvalidArgumentError("activations: the cpu backend computes fp32");
    SPAR_ASSIGN_OR_RETURN(std::vector<float> values, ToHost(x));
    return HostActivations::FromFloats(values, x.rows(), x.cols());
  }

  absl::StatusOr<Tensor> FromHostActivations(const HostActivations& x) override {
    SPAR_RETURN_IF_ERROR(x.Check());
    return FromHost(x.ToFloats(), x.rows, x.cols);
  }

 private:
  absl::Status CheckLayer(int layer) const {
    if (layer < 0 || layer >= spec_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " has no cache (", spec_.num_layers, " layers)"));
    }
    return absl::OkStatus();
  }

  TpRank tp_;
  std::shared_ptr<CpuGroup> group_;
  std::vector<double> allreduce_seconds_;  // since the last TakeCollectiveDurations
  ref::RopeParams rope_;
  CacheSpec spec_;
  std::vector<std::vector<uint8_t>> latent_, indexer_;
  const StepPlan* plan_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(TpRank tp, std::shared_ptr<CpuGroup> group) {
  SPAR_RETURN_IF_ERROR(ValidateTpRank(tp));
  if (tp.size > 1 && (group == nullptr || group->size() != tp.size)) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: tensor-parallel size ", tp.size,
                                                   " needs an all-reduce group of that size"));
  }
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(tp, std::move(group)));
}

}  // namespace spar
