#include "services/common/capacity_plan.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cache_formats.h"
#include "base/status_macros.h"
#include "engine/memory_budget.h"
#include "engine/step_plan.h"
#include "engine/tensor_parallel.h"
#include "kernels/cuda/gemm/w4_layout.h"

namespace spar {
namespace {

// One linear weight as the cuda backend stores it (UploadMatrix): FP8 values
// plus an fp32 scale per 128x128 block, or bf16.
int64_t LinearBytes(int64_t rows, int64_t cols, bool fp8) {
  if (!fp8) return rows * cols * 2;
  return rows * cols + ((rows + 127) / 128) * ((cols + 127) / 128) * 4;
}

// Norm weights and biases: a bf16 and an fp32 copy (CreateVector).
int64_t VectorBytes(int64_t n) { return n * 6; }

// How one rank stores each linear slice, by module name: block-FP8 as
// stored (every projection but the router, weights_proj, embedding and
// head), or with a 4-bit config the W4A16 kernel's layout
// (kernels/cuda/gemm/w4_layout.h) where the config converts the module and
// the slice keeps whole groups of a kernel-supported size, else bf16 (what
// UploadMatrix falls back to).
class LinearStorage {
 public:
  explicit LinearStorage(const ModelConfig& c) : c_(c) {}

  // `full_cols`: the module's input width before a column (row-parallel) slice.
  absl::StatusOr<int64_t> Bytes(const std::string& module, int64_t rows, int64_t cols, int64_t full_cols,
                                bool fp8_eligible = true) const {
    if (!c_.quant.weight_format) return LinearBytes(rows, cols, c_.quant.fp8 && fp8_eligible);
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBit> f, FourBitLayout(module, cols, full_cols));
    return f ? gemm::W4PackedBytes(rows, cols, f->group, f->fp4) : rows * cols * 2;
  }

  // A dense MLP with `inter` intermediate columns on this rank (UploadMlp):
  // as stored, unless a slice is not a multiple of 64, which is padded to
  // one in bf16. 4-bit gate and up are packed as one SiLU pair; when only
  // one of them would be 4-bit, both are bf16.
  absl::StatusOr<int64_t> Mlp(const std::string& prefix, int64_t hidden, int64_t inter, int64_t full_inter) const {
    if (inter % 64 != 0) return 3 * hidden * ((inter + 63) / 64 * 64) * 2;
    SPAR_ASSIGN_OR_RETURN(int64_t down, Bytes(prefix + "down_proj", hidden, inter, full_inter));
    if (!c_.quant.weight_format) {
      SPAR_ASSIGN_OR_RETURN(int64_t gate, Bytes(prefix + "gate_proj", inter, hidden, hidden));
      return 2 * gate + down;
    }
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBit> gate, FourBitLayout(prefix + "gate_proj", hidden, hidden));
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBit> up, FourBitLayout(prefix + "up_proj", hidden, hidden));
    if (gate && up && gate->group == up->group && gate->fp4 == up->fp4) {
      return gemm::W4PackedBytes(2 * inter, hidden, gate->group, gate->fp4) + down;
    }
    return 2 * inter * hidden * 2 + down;
  }

 private:
  struct FourBit {
    int64_t group;
    bool fp4;
  };
  // The kernel layout of a module the config converts, or nullopt (bf16).
  absl::StatusOr<std::optional<FourBit>> FourBitLayout(const std::string& module, int64_t cols, int64_t full_cols) const {
    SPAR_ASSIGN_OR_RETURN(std::optional<QuantScheme> scheme, c_.quant.weight_format->SchemeFor(module));
    if (!scheme) return std::optional<FourBit>();
    const bool fp4 = scheme->layout == QuantLayout::kNvfp4;
    const int64_t group = fp4 ? 16 : scheme->GroupFor(full_cols);
    // A per-channel group follows the slice; other groups must not be split.
    const int64_t slice_group = group == full_cols ? cols : group;
    if (cols % slice_group != 0 || !gemm::W4LayoutSupports(cols, slice_group, fp4)) return std::optional<FourBit>();
    return std::optional<FourBit>(FourBit{slice_group, fp4});
  }

  const ModelConfig& c_;
};

absl::Status AddLayer(const ModelConfig& c, int l, TpRank tp, StageWeights* w) {
  const int64_t h = c.hidden_size;
  const LinearStorage store(c);
  auto module = [l](const char* name) { return absl::StrCat("model.layers.", l, ".", name); };
  auto add = [&](int64_t* field, absl::StatusOr<int64_t> bytes) -> absl::Status {
    if (!bytes.ok()) return bytes.status();
    *field += *bytes;
    return absl::OkStatus();
  };
  SPAR_ASSIGN_OR_RETURN(Slice heads, EvenSlice(c.num_attention_heads, tp, "attention heads"));
  const int64_t o_cols = static_cast<int64_t>(c.num_attention_heads) * c.v_head_dim;
  w->attention += VectorBytes(h) * 2 + VectorBytes(c.q_lora_rank) + VectorBytes(c.kv_lora_rank);
  SPAR_RETURN_IF_ERROR(add(&w->attention, store.Bytes(module("self_attn.q_a_proj"), c.q_lora_rank, h, h)));
  SPAR_RETURN_IF_ERROR(add(&w->attention, store.Bytes(module("self_attn.kv_a_proj_with_mqa"), c.latent_dim(), h, h)));
  SPAR_RETURN_IF_ERROR(add(&w->attention, store.Bytes(module("self_attn.q_b_proj"), heads.size() * c.qk_head_dim(),
                                                      c.q_lora_rank, c.q_lora_rank)));
  w->attention += heads.size() * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank * 2;  // kv_b, bf16
  SPAR_RETURN_IF_ERROR(add(&w->attention, store.Bytes(module("self_attn.o_proj"), h, heads.size() * c.v_head_dim, o_cols)));
  if (c.indexer_types[l] == IndexerType::kFull) {
    SPAR_RETURN_IF_ERROR(add(&w->indexer, store.Bytes(module("self_attn.indexer.wk"), c.index_head_dim, h, h)));
    SPAR_RETURN_IF_ERROR(add(&w->indexer, store.Bytes(module("self_attn.indexer.weights_proj"), c.index_n_heads, h, h,
                                                      /*fp8_eligible=*/false)));
    SPAR_RETURN_IF_ERROR(add(&w->indexer, store.Bytes(module("self_attn.indexer.wq_b"),
                                                      static_cast<int64_t>(c.index_n_heads) * c.index_head_dim,
                                                      c.q_lora_rank, c.q_lora_rank)));
    w->indexer += 2 * VectorBytes(c.index_head_dim);
  }
  if (!c.is_moe_layer(l)) {
    SPAR_ASSIGN_OR_RETURN(Slice part, EvenSlice(c.intermediate_size, tp, "MLP intermediate columns"));
    return add(&w->dense_mlp, store.Mlp(module("mlp."), h, part.size(), c.intermediate_size));
  }
  w->router += LinearBytes(c.n_routed_experts, h, /*fp8=*/false) + int64_t{4} * c.n_routed_experts;
  SPAR_ASSIGN_OR_RETURN(Slice experts, EvenSlice(c.n_routed_experts, tp, "routed experts"));
  // Packed [E, n, k] (PackExperts): no padding. Every expert is stored
  // alike (the backend packs them into one allocation), so expert 0 stands
  // for all.
  SPAR_ASSIGN_OR_RETURN(int64_t expert, store.Mlp(absl::StrCat("model.layers.", l, ".mlp.experts.0."), h,
                                                  c.moe_intermediate_size, c.moe_intermediate_size));
  w->routed_experts += experts.size() * expert;
  if (c.n_shared_experts > 0) {
    const int64_t inter = static_cast<int64_t>(c.moe_intermediate_size) * c.n_shared_experts;
    SPAR_ASSIGN_OR_RETURN(Slice part, EvenSlice(inter, tp, "shared expert intermediate columns"));
    SPAR_RETURN_IF_ERROR(add(&w->dense_mlp, store.Mlp(module("mlp.shared_experts."), h, part.size(), inter)));
  }
  return absl::OkStatus();
}

std::string Gib(int64_t bytes) { return absl::StrFormat("%.1f", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

int64_t CapacityPlan::cache_tokens() const {
  int64_t t = -1;
  for (const StageCapacity& s : stages) t = t < 0 ? s.cache_tokens() : std::min(t, s.cache_tokens());
  return std::max<int64_t>(t, 0);
}

int64_t CapacityPlan::SequencesAt(int64_t context) const {
  const int64_t blocks_per_seq = (context + kCacheBlockTokens - 1) / kCacheBlockTokens;
  return blocks_per_seq > 0 ? cache_tokens() / kCacheBlockTokens / blocks_per_seq : 0;
}

namespace {

absl::Status CheckOptions(const ModelConfig& config, const CapacityOptions& o) {
  if (o.tp < 1) return absl::InvalidArgumentError(absl::StrCat("tp ", o.tp, " must be at least 1"));
  if (o.gpu_memory_bytes <= 0) return absl::InvalidArgumentError("the GPU memory size must be positive");
  if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu memory utilization ", o.gpu_memory_utilization, " is not in (0, 1]"));
  }
  if (o.runtime_bytes < 0) return absl::InvalidArgumentError("the runtime overhead must not be negative");
  if (o.max_model_len < 0 || o.max_model_len > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("max model len ", o.max_model_len, " is not in [1, ",
                                                   config.max_position_embeddings, "] (the model's context)"));
  }
  return absl::OkStatus();
}

// Every stage's sizes for these ranges; cache_blocks may come out <= 0.
absl::StatusOr<CapacityPlan> PlanStages(const ModelConfig& config, const CapacityOptions& o,
                                        const std::vector<LayerRange>& ranges) {
  CapacityPlan plan;
  plan.max_model_len = o.max_model_len > 0 ? o.max_model_len : config.max_position_embeddings;
  const TpRank rank0{0, o.tp};  // every rank holds the same amount (even splits only)
  for (size_t s = 0; s < ranges.size(); ++s) {
    StageCapacity st;
    st.layers = ranges[s];
    for (int l = st.layers.first; l < st.layers.last; ++l) SPAR_RETURN_IF_ERROR(AddLayer(config, l, rank0, &st.weights));
    const int64_t table = static_cast<int64_t>(config.vocab_size) * config.hidden_size * 2;  // bf16
    if (s == 0) st.weights.embedding = table;
    if (s + 1 == ranges.size()) st.weights.lm_head = table + VectorBytes(config.hidden_size);
    // cos and sin, fp32, one row of rope_dim / 2 per served position.
    st.weights.rope_tables = plan.max_model_len * (config.qk_rope_head_dim / 2) * 4 * 2;
    st.budget_bytes = static_cast<int64_t>(o.gpu_memory_utilization * static_cast<double>(o.gpu_memory_bytes));
    st.runtime_bytes = o.runtime_bytes;
    st.activation_reserve_bytes = ActivationReserveBytes(plan.max_model_len);
    const int64_t layers = st.layers.last - st.layers.first;
    const int64_t block = static_cast<int64_t>(CacheBlockBytesPerLayer(o.latent_format, o.indexer_format)) * layers;
    st.cache_bytes_per_token = block / kCacheBlockTokens;
    st.cache_blocks = std::max<int64_t>(st.cache_budget_bytes(), 0) / block;
    plan.stages.push_back(st);
  }
  return plan;
}

// The smallest stage's cache in tokens, negative while a stage does not fit.
double MinCacheTokens(const CapacityPlan& plan) {
  double m = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StageCapacity& st = plan.stages[s];
    const double t = static_cast<double>(st.cache_budget_bytes()) / st.cache_bytes_per_token;
    m = s == 0 ? t : std::min(m, t);
  }
  return m;
}

}  // namespace

absl::StatusOr<CapacityPlan> PlanCapacity(const ModelConfig& config, const CapacityOptions& o) {
  SPAR_RETURN_IF_ERROR(CheckOptions(config, o));
  std::vector<LayerRange> ranges = o.stage_layers;
  if (ranges.empty()) {
    SPAR_ASSIGN_OR_RETURN(ranges, SplitLayers(config, o.stages));
  } else {
    SPAR_RETURN_IF_ERROR(CheckStageLayers(ranges, config.num_hidden_layers));
  }
  SPAR_ASSIGN_OR_RETURN(CapacityPlan plan, PlanStages(config, o, ranges));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StageCapacity& st = plan.stages[s];
    if (st.cache_blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "stage ", s, " (layers ", st.layers.first, ":", st.layers.last, ") does not fit: ", Gib(st.weights.total()),
          " GiB of weights per GPU + ", Gib(st.activation_reserve_bytes), " GiB activation reserve + ",
          Gib(st.runtime_bytes), " GiB runtime exceed ", Gib(st.budget_bytes),
          " GiB (utilization x GPU memory); use more GPUs per stage (--tp), more stages, or a shorter --max-model-len"));
    }
  }
  const int64_t need = (plan.max_model_len + kCacheBlockTokens - 1) / kCacheBlockTokens * kCacheBlockTokens;
  if (plan.cache_tokens() < need) {
    return absl::ResourceExhaustedError(absl::StrCat("the KV cache holds ", plan.cache_tokens(),
                                                     " tokens, less than one sequence of max model len ",
                                                     plan.max_model_len, "; use more GPUs or a shorter --max-model-len"));
  }
  return plan;
}

int64_t LongestServableContext(const ModelConfig& config, const CapacityOptions& options) {
  CapacityOptions o = options;
  auto fits = [&](int64_t len) {
    o.max_model_len = len;
    return PlanCapacity(config, o).ok();
  };
  int64_t lo = 0, hi = config.max_position_embeddings / kCacheBlockTokens;  // in blocks
  if (fits(hi * kCacheBlockTokens) || hi * kCacheBlockTokens == config.max_position_embeddings) {
    if (fits(config.max_position_embeddings)) return config.max_position_embeddings;
  }
  while (lo < hi) {  // largest block count that fits; fitting is monotone in the length
    const int64_t mid = (lo + hi + 1) / 2;
    if (fits(mid * kCacheBlockTokens)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo * kCacheBlockTokens;
}

absl::StatusOr<std::vector<LayerRange>> BalancedStageLayers(const ModelConfig& config, const CapacityOptions& o) {
  SPAR_RETURN_IF_ERROR(CheckOptions(config, o));
  SPAR_ASSIGN_OR_RETURN(std::vector<LayerRange> best, SplitLayers(config, o.stages));
  SPAR_ASSIGN_OR_RETURN(CapacityPlan plan, PlanStages(config, o, best));
  double best_tokens = MinCacheTokens(plan);
  // Hill-climb: move one boundary to the next layer that may start a stage
  // (not one reusing the previous layer's top-k, as in SplitLayers) while
  // the smallest stage grows.
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t b = 1; b < best.size() && !moved; ++b) {
      for (int delta : {-1, 1}) {
        std::vector<LayerRange> cand = best;
        int at = cand[b].first + delta;
        while (at > cand[b - 1].first && at < cand[b].last && config.indexer_types[at] != IndexerType::kFull) {
          at += delta;  // over layers that cannot start a stage
        }
        if (at <= cand[b - 1].first || at >= cand[b].last) continue;
        cand[b - 1].last = at;
        cand[b].first = at;
        SPAR_ASSIGN_OR_RETURN(CapacityPlan p, PlanStages(config, o, cand));
        const double tokens = MinCacheTokens(p);
        if (tokens > best_tokens) {
          best = cand;
          best_tokens = tokens;
          moved = true;
          break;
        }
      }
    }
  }
  return best;
}

absl::StatusOr<WeightFormat> Glm5ExpertsOnly4Bit(absl::string_view quant) {
  if (quant == "int4") {
    return ParseWeightFormat(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true,
        "version": "gemm", "modules_to_not_convert": ["self_attn", "shared_experts", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj"]})");
  }
  if (quant == "nvfp4") {
    return ParseHfQuantConfig(R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
        "group_size": 16, "exclude_modules": ["lm_head", "*self_attn*", "*shared_experts*", "*mlp.gate",
        "*.mlp.gate_proj", "*.mlp.up_proj", "*.mlp.down_proj"]}})");
  }
  return absl::InvalidArgumentError(absl::StrCat("--quant must be int4 or nvfp4, got \"", quant, "\""));
}

std::string FormatCapacityPlan(const ModelConfig& c, const CapacityOptions& o, const CapacityPlan& plan,
                               const std::vector<int64_t>& contexts) {
  std::string out = absl::StrFormat(
      "%s, %d layers, %s weights; %d stage(s) x TP %d = %d GPUs of %s GiB, utilization %.2f, max model len %d\n"
      "latent cache %s, indexer cache %s: %d bytes per token per layer, replicated on every rank of a stage\n\n",
      c.model_type, c.num_hidden_layers,
      c.quant.weight_format ? c.quant.weight_format->Describe() : c.quant.fp8 ? "block-FP8" : "bf16",
      plan.stages.size(), o.tp,
      plan.stages.size() * o.tp,
      Gib(o.gpu_memory_bytes), o.gpu_memory_utilization, plan.max_model_len,
      LatentFormatName(o.latent_format), IndexerFormatName(o.indexer_format),
      static_cast<int64_t>(CacheBlockBytesPerLayer(o.latent_format, o.indexer_format)) / kCacheBlockTokens);
  out += "per GPU, GiB        ";
  for (size_t s = 0; s < plan.stages.size(); ++s) absl::StrAppendFormat(&out, "  stage %-4d", s);
  out += "\n";
  auto row = [&](const char* name, auto get) {
    absl::StrAppendFormat(&out, "%-20s", name);
    for (const StageCapacity& st : plan.stages) absl::StrAppendFormat(&out, "  %10s", get(st));
    out += "\n";
  };
  row("layers", [](const StageCapacity& s) { return absl::StrCat(s.layers.first, ":", s.layers.last); });
  row("  attention (MLA)", [](const StageCapacity& s) { return Gib(s.weights.attention); });
  row("  indexer", [](const StageCapacity& s) { return Gib(s.weights.indexer); });
  row("  routed experts", [](const StageCapacity& s) { return Gib(s.weights.routed_experts); });
  row("  dense + shared MLP", [](const StageCapacity& s) { return Gib(s.weights.dense_mlp); });
  row("  router", [](const StageCapacity& s) { return Gib(s.weights.router); });
  row("  embedding", [](const StageCapacity& s) { return Gib(s.weights.embedding); });
  row("  lm_head", [](const StageCapacity& s) { return Gib(s.weights.lm_head); });
  row("  rope tables", [](const StageCapacity& s) { return Gib(s.weights.rope_tables); });
  row("weights", [](const StageCapacity& s) { return Gib(s.weights.total()); });
  row("runtime", [](const StageCapacity& s) { return Gib(s.runtime_bytes); });
  row("activation reserve", [](const StageCapacity& s) { return Gib(s.activation_reserve_bytes); });
  row("KV cache", [](const StageCapacity& s) { return Gib(s.cache_bytes()); });
  row("KV cache tokens", [](const StageCapacity& s) { return absl::StrCat(s.cache_tokens()); });
  absl::StrAppendFormat(&out, "\nthe pipeline holds %d tokens of KV cache", plan.cache_tokens());
  for (int64_t ctx : contexts) {
    if (ctx > plan.max_model_len) {
      absl::StrAppendFormat(&out, "; %d tokens is beyond max model len", ctx);
    } else {
      absl::StrAppendFormat(&out, "; %d sequences of %d tokens", plan.SequencesAt(ctx), ctx);
    }
  }
  out += "\n";
  return out;
}

}  // namespace spar
