#include "engine/make_tiny.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "engine/checkpoint.h"
#include "engine/tiny_tokenizer.h"
#include "engine/weight_names.h"
#include "kernels/ref/fp8_block_ref.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(absl::StrCat("cannot create directory ", partial, ": ", std::strerror(errno)));
      }
    }
    if (i < path.size()) partial.push_back(path[i]);
  }
  return absl::OkStatus();
}

// How a tensor's values are drawn: uniform in [center - spread, center + spread].
struct Init {
  float center = 0.0f;
  float spread = 1.0f;
};

// Variance 1/fan_in: keeps activations O(1) through the stack. sqrt is
// correctly rounded by IEEE-754, so this is deterministic too.
Init LinearInit(int64_t fan_in) { return {0.0f, std::sqrt(3.0f / static_cast<float>(fan_in))}; }

uint64_t TensorSeed(uint64_t seed, const std::string& name) {
  Fnv1a64 h;
  h.Update(name);
  return SplitMix64(seed ^ h.Digest());
}

// Values of one tensor, already rounded to bf16 (checkpoints are bf16).
std::vector<float> DrawValues(uint64_t seed, const std::string& name, int64_t count, Init init) {
  Rng rng(TensorSeed(seed, name));
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = RoundToBf16(init.center + init.spread * rng.Symmetric());
  return v;
}

// The router and the embedding are not nn.Linear modules in the Hugging
// Face model: no quantization tool converts them.
bool IsLinearModule(const std::string& name) {
  return name != names::kEmbed && !absl::EndsWith(name, ".mlp.gate.weight");
}

class TinyWriter {
 public:
  TinyWriter(const MakeTinyOptions& options, const ModelConfig& config)
      : options_(options), config_(config), fp8_cache_(std::make_shared<Fp8Cache>()) {}

  // A norm or other vector kept in bf16; `draw_as` names another tensor
  // whose values it copies (drawn from that name's stream).
  absl::Status Vector(const std::string& name, int64_t n, Init init, const std::string& draw_as = "") {
    const uint64_t seed = options_.seed;
    const std::string source = draw_as.empty() ? name : draw_as;
    return writer_.Add(name, DType::kBF16, {n}, [=](uint8_t* dst, size_t) {
      auto v = DrawValues(seed, source, n, init);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = FloatToBf16(v[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
    });
  }

  absl::Status F32Vector(const std::string& name, int64_t n, Init init) {
    const uint64_t seed = options_.seed;
    return writer_.Add(name, DType::kF32, {n}, [=](uint8_t* dst, size_t) {
      Rng rng(TensorSeed(seed, name));
      for (int64_t i = 0; i < n; ++i) {
        const float x = init.center + init.spread * rng.Symmetric();
        std::memcpy(dst + 4 * i, &x, 4);
      }
    });
  }

  // A [rows, cols] linear weight; block-FP8 when the model is FP8 and
  // `quantizable`, else bf16.
  absl::Status Matrix(const std::string& name, int64_t rows, int64_t cols, bool quantizable = true,
                      std::optional<Init> init_override = std::nullopt, const std::string& draw_as = "") {
    const Init init = init_override.value_or(LinearInit(cols));
    const uint64_t seed = options_.seed;
    if (config_.quant.weight_format && IsLinearModule(name)) {
      const std::string module = name.substr(0, name.size() - 7);  // without ".weight"
      SPAR_ASSIGN_OR_RETURN(std::optional<QuantScheme> scheme, config_.quant.weight_format->SchemeFor(module));
      if (scheme) {
        if (options_.geometry == TinyGeometry::kGlm5Full) {
          return AddRandomQuantizedMatrix(writer_, *scheme, module, rows, cols, TensorSeed(seed, name), init.spread);
        }
        return AddQuantizedMatrix(writer_, *scheme, module, DrawValues(seed, name, rows * cols, init), rows, cols);
      }
    }
    if (options_.geometry == TinyGeometry::kGlm5Full) return FastMatrix(name, rows, cols, quantizable, init);
    const std::string source = draw_as.empty() ? name : draw_as;
    if (!(options_.fp8 && quantizable)) {
      return writer_.Add(name, DType::kBF16, {rows, cols}, [=](uint8_t* dst, size_t) {
        auto v = DrawValues(seed, source, rows * cols, init);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const uint16_t b = FloatToBf16(v[i]);
          std::memcpy(dst + 2 * i, &b, 2);
        }
      });
    }
    const bool ue8m0 = config_.quant.ue8m0_scales;
    auto cache = fp8_cache_;
    auto quantized = [=]() -> std::shared_ptr<Fp8BlockWeight> {
      // The writer emits "x.weight" then "x.weight_scale_inv"; quantize once.
      std::lock_guard<std::mutex> lock(cache->mu);
      if (cache->name != name) {
        auto v = DrawValues(seed, source, rows * cols, init);
        cache->weight = std::make_shared<Fp8BlockWeight>(QuantizeFp8Blocks(v.data(), rows, cols, ue8m0));
        cache->name = name;
      }
      return cache->weight;
    };
    const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
    SPAR_RETURN_IF_ERROR(writer_.Add(name, DType::kF8E4M3, {rows, cols}, [=](uint8_t* dst, size_t n) {
      std::memcpy(dst, quantized()->values.data(), n);
    }));
    return writer_.Add(names::ScaleOf(name), DType::kF32, {srows, scols}, [=](uint8_t* dst, size_t n) {
      std::memcpy(dst, quantized()->scales.data(), n);
    });
  }

  // A bf16 tensor of given values (constructed weights, not drawn ones).
  absl::Status Bf16Values(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    return writer_.Add(name, DType::kBF16, std::move(shape), [values = std::move(values)](uint8_t* dst, size_t) {
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t b = FloatToBf16(values[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
    });
  }

  absl::Status Write(const std::string& dir) { return writer_.Write(dir, options_.max_shard_bytes); }

 private:
  // Benchmark-size weights (GLM-5 geometry: ~10 GB per MoE layer) drawn
  // straight in their stored form, 8 values per PRNG call, instead of
  // drawing floats and quantizing them: FP8 codes with magnitudes up to 1.875
  // (exponent field <= 7, never NaN) times a per-block scale of the init
  // spread, or bf16 bit patterns of uniform values. The numbers only have to
  // be finite and of the right scale; timing does not depend on them.
  absl::Status FastMatrix(const std::string& name, int64_t rows, int64_t cols, bool quantizable, Init init) {
    const uint64_t seed = TensorSeed(options_.seed, name);
    if (options_.fp8 && quantizable) {
      SPAR_RETURN_IF_ERROR(writer_.Add(name, DType::kF8E4M3, {rows, cols}, [=](uint8_t* dst, size_t n) {
        // 64 KiB chunks with their own streams, on all cores.
        constexpr int64_t kChunk = 1 << 16;
        ParallelFor((static_cast<int64_t>(n) + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            Rng rng(SplitMix64(seed + static_cast<uint64_t>(c)));
            const size_t end = std::min(n, static_cast<size_t>((c + 1) * kChunk));
            for (size_t i = static_cast<size_t>(c * kChunk); i < end; i += 8) {
              uint64_t bits = rng.NextU64();
              for (size_t j = i; j < std::min(end, i + 8); ++j, bits >>= 8) {
                dst[j] = static_cast<uint8_t>(bits & 0xBF);  // exponent's top bit clear: |x| <= 1.875
              }
            }
          }
        });
      }));
      const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
      return writer_.Add(names::ScaleOf(name), DType::kF32, {srows, scols}, [=](uint8_t* dst, size_t n) {
        const float scale = init.spread;
        for (size_t i = 0; i < n; i += 4) std::memcpy(dst + i, &scale, 4);
      });
    }
    return writer_.Add(name, DType::kBF16, {rows, cols}, [=](uint8_t* dst, size_t n) {
      constexpr int64_t kChunk = 1 << 16;  // values
      const int64_t count = static_cast<int64_t>(n / 2);
      ParallelFor((count + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          Rng rng(SplitMix64(seed + static_cast<uint64_t>(c)));
          for (int64_t i = c * kChunk; i < std::min(count, (c + 1) * kChunk); ++i) {
            const uint16_t b = FloatToBf16(init.center + init.spread * rng.Symmetric());
            std::memcpy(dst + 2 * i, &b, 2);
          }
        }
      });
    });
  }

 public:

 private:
  struct Fp8Cache {
    std::mutex mu;
    std::string name;
    std::shared_ptr<Fp8BlockWeight> weight;
  };
  const MakeTinyOptions& options_;
  const ModelConfig& config_;
  CheckpointWriter writer_;
  std::shared_ptr<Fp8Cache> fp8_cache_;
};

constexpr Init kNormInit{1.0f, 0.2f};

// What kind of decoder layer to write, and how large its output
// projections are drawn (MakeTinyOptions::predictable).
struct TinyLayerKind {
  bool moe = false;
  bool full_indexer = true;
  float output_scale = 1.0f;
};

Init OutputInit(int64_t fan_in, float scale) {
  Init init = LinearInit(fan_in);
  init.spread *= scale;
  return init;
}

absl::Status AddLayer(TinyWriter& w, const ModelConfig& c, int i, const TinyLayerKind& kind) {
  using names::Layer;
  const int64_t h = c.hidden_size;
  const int64_t heads = c.num_attention_heads;
  const float out = kind.output_scale;
  SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kInputNorm), h, kNormInit));
  SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kPostAttnNorm), h, kNormInit));
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kQA), c.q_lora_rank, h));
  SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kQANorm), c.q_lora_rank, kNormInit));
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kQB), heads * c.qk_head_dim(), c.q_lora_rank));
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kKvA), c.kv_lora_rank + c.qk_rope_head_dim, h));
  SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kKvANorm), c.kv_lora_rank, kNormInit));
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kKvB), heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank));
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kO), h, heads * c.v_head_dim, true, OutputInit(heads * c.v_head_dim, out)));
  if (kind.full_indexer) {
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kIdxWqB), c.index_n_heads * c.index_head_dim, c.q_lora_rank));
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kIdxWk), c.index_head_dim, h));
    SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kIdxKNormW), c.index_head_dim, kNormInit));
    SPAR_RETURN_IF_ERROR(w.Vector(Layer(i, names::kIdxKNormB), c.index_head_dim, Init{0.0f, 0.1f}));
    // Stored bf16 even in FP8 checkpoints (the real ones leave it unconverted).
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kIdxWeights), c.index_n_heads, h, /*quantizable=*/false));
  }
  if (!kind.moe) {
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kMlpGate), c.intermediate_size, h));
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kMlpUp), c.intermediate_size, h));
    SPAR_RETURN_IF_ERROR(
        w.Matrix(Layer(i, names::kMlpDown), h, c.intermediate_size, true, OutputInit(c.intermediate_size, out)));
    return absl::OkStatus();
  }
  SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kRouter), c.n_routed_experts, h, /*quantizable=*/false));
  SPAR_RETURN_IF_ERROR(w.F32Vector(Layer(i, names::kRouterBias), c.n_routed_experts, Init{0.0f, 0.05f}));
  for (int e = 0; e < c.n_routed_experts; ++e) {
    SPAR_RETURN_IF_ERROR(w.Matrix(names::Expert(i, e, "gate_proj"), c.moe_intermediate_size, h));
    SPAR_RETURN_IF_ERROR(w.Matrix(names::Expert(i, e, "up_proj"), c.moe_intermediate_size, h));
    SPAR_RETURN_IF_ERROR(w.Matrix(names::Expert(i, e, "down_proj"), h, c.moe_intermediate_size, true,
                                  OutputInit(c.moe_intermediate_size, out)));
  }
  if (c.n_shared_experts > 0) {
    const int64_t inter = c.moe_intermediate_size * c.n_shared_experts;
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kSharedGate), inter, h));
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kSharedUp), inter, h));
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(i, names::kSharedDown), h, inter, true, OutputInit(inter, out)));
  }
  return absl::OkStatus();
}

// Twice the unit-variance scale so the logits have a peaked distribution.
Init HeadInit(const ModelConfig& c) { return {0.0f, 2.0f * std::sqrt(3.0f / static_cast<float>(c.hidden_size))}; }
constexpr Init kEmbedInit{0.0f, 1.0f};
constexpr float kPredictableOutputScale = 1.0f / 16.0f;

// The MTP layer, model.layers.{num_hidden_layers}.*, as GLM-5 / DeepSeek
// store it (dsa-spec.md §2.8): a MoE decoder layer with a full indexer, the
// two input norms, eh_proj over [embedding ‖ hidden], shared_head.norm.
absl::Status AddMtpLayer(TinyWriter& w, const ModelConfig& c, const MakeTinyOptions& o) {
  using names::Layer;
  const int l = c.num_hidden_layers;
  const int64_t h = c.hidden_size;
  SPAR_RETURN_IF_ERROR(AddLayer(w, c, l, {true, true, o.predictable ? kPredictableOutputScale : 1.0f}));
  SPAR_RETURN_IF_ERROR(w.Vector(Layer(l, names::kMtpHnorm), h, kNormInit));
  if (o.predictable) {
    // e' = RMSNorm(embed): eh_proj = [I | 0] passes it through, and the head
    // norm is the final norm, so the draft is the main model's own next-token
    // map applied to the token the MTP layer reads.
    SPAR_RETURN_IF_ERROR(w.Bf16Values(Layer(l, names::kMtpEnorm), {h}, std::vector<float>(h, 1.0f)));
    std::vector<float> eh(static_cast<size_t>(h * 2 * h), 0.0f);
    for (int64_t r = 0; r < h; ++r) eh[r * 2 * h + r] = 1.0f;
    SPAR_RETURN_IF_ERROR(w.Bf16Values(Layer(l, names::kMtpEhProj), {h, 2 * h}, std::move(eh)));
    SPAR_RETURN_IF_ERROR(w.Vector(Layer(l, names::kMtpHeadNorm), h, kNormInit, names::kFinalNorm));
  } else {
    SPAR_RETURN_IF_ERROR(w.Vector(Layer(l, names::kMtpEnorm), h, kNormInit));
    // Stored bf16 in the FP8 checkpoints too (modules_to_not_convert).
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(l, names::kMtpEhProj), h, 2 * h, /*quantizable=*/false));
    SPAR_RETURN_IF_ERROR(w.Vector(Layer(l, names::kMtpHeadNorm), h, kNormInit));
  }
  if (c.arch == ModelArch::kDeepseekV32) {
    // DeepSeek's checkpoints carry the layer's own copies of both.
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(l, names::kMtpEmbed), c.vocab_size, h, false, kEmbedInit, names::kEmbed));
    SPAR_RETURN_IF_ERROR(w.Matrix(Layer(l, names::kMtpHead), c.vocab_size, h, false, HeadInit(c), names::kLmHead));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> TinyModelConfig(const MakeTinyOptions& o) {
  ModelConfig c;
  c.arch = o.arch;
  const bool glm = o.arch == ModelArch::kGlmMoeDsa;
  c.model_type = std::string(ModelArchName(o.arch));
  c.architectures = {glm ? "GlmMoeDsaForCausalLM" : "DeepseekV32ForCausalLM"};
  const TinyTokenizerSpec tok = TinyTokenizerLayout();
  if (o.geometry == TinyGeometry::kTiny) {
    c.vocab_size = 320;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.moe_intermediate_size = glm ? 192 : 128;
    c.num_hidden_layers = o.layers > 0 ? o.layers : 3;
    // 16 heads: a TP-2 rank holds 8, the smallest head count the sparse MLA
    // kernels take; indexer heads as in the real models (32 / 64).
    c.num_attention_heads = 16;
    c.q_lora_rank = glm ? 256 : 192;
    c.kv_lora_rank = 512;
    c.qk_nope_head_dim = glm ? 192 : 128;
    c.qk_rope_head_dim = 64;
    c.v_head_dim = glm ? 256 : 128;
    c.index_n_heads = glm ? 32 : 64;
    c.index_head_dim = 128;
    c.index_topk = o.index_topk > 0 ? o.index_topk : 32;
    c.n_routed_experts = 16;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 4;
    c.n_group = glm ? 1 : 4;
    c.topk_group = glm ? 1 : 2;
    c.first_k_dense_replace = 1;
    c.max_position_embeddings = glm ? 4096 : 163840;  // DS: 40 x 4096, consistent with YaRN
    c.eos_token_ids = {tok.eos_id, tok.user_id, tok.observation_id};
    c.pad_token_id = tok.eos_id;
  } else {
    // GLM-5's real layer geometry (dsa-spec.md §1.1).
    if (!glm) return absl::InvalidArgumentError("--geometry glm5-full needs --arch glm5");
    if (o.predictable) return absl::InvalidArgumentError("--predictable needs --geometry tiny");
    c.vocab_size = 154880;
    c.hidden_size = 6144;
    c.intermediate_size = 12288;
    c.moe_intermediate_size = 2048;
    c.num_hidden_layers = o.layers > 0 ? o.layers : 4;
    c.num_attention_heads = 64;
    c.q_lora_rank = 2048;
    c.kv_lora_rank = 512;
    c.qk_nope_head_dim = 192;
    c.qk_rope_head_dim = 64;
    c.v_head_dim = 256;
    c.index_n_heads = 32;
    c.index_head_dim = 128;
    c.index_topk = o.index_topk > 0 ? o.index_topk : 2048;
    c.n_routed_experts = 256;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 8;
    c.first_k_dense_replace = 3;
    c.max_position_embeddings = 202752;
    c.eos_token_ids = {154820, 154827, 154829};
    c.pad_token_id = 154820;
  }
  if (o.max_position_embeddings < 0 || o.max_position_embeddings > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--max-position-embeddings must be in [1, 2^30], got ",
                                                   o.max_position_embeddings));
  }
  if (o.max_position_embeddings > 0) c.max_position_embeddings = o.max_position_embeddings;
  if (o.moe_intermediate_size < 0 || o.moe_intermediate_size > 8192 || o.moe_intermediate_size % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--moe-intermediate-size must be a multiple of 8 in [8, 8192] (0: the default), got ", o.moe_intermediate_size));
  }
  if (o.moe_intermediate_size > 0) c.moe_intermediate_size = o.moe_intermediate_size;
  c.num_key_value_heads = c.num_attention_heads;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  c.rms_norm_eps = glm ? 1e-5 : 1e-6;
  c.mla_rope_layout = RopeLayout::kInterleaved;
  c.indexer_rope_layout = glm ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  if (glm) {
    c.rope.type = RopeType::kDefault;
    c.rope.theta = 1e6;
  } else {
    c.rope.type = RopeType::kYarn;
    c.rope.theta = 1e4;
    c.rope.factor = 40;
    c.rope.original_max_position_embeddings = 4096;
    c.rope.beta_fast = 32;
    c.rope.beta_slow = 1;
    c.rope.mscale = 1.0;
    c.rope.mscale_all_dim = 1.0;
    c.rope.attention_factor = 1.0;
  }
  if (!o.indexer_pattern.empty()) {
    if (!glm) return absl::InvalidArgumentError("--indexer-pattern needs --arch glm5 (DeepSeek-V3.2 has no shared indexers)");
    if (static_cast<int>(o.indexer_pattern.size()) != c.num_hidden_layers) {
      return absl::InvalidArgumentError(absl::StrCat("--indexer-pattern \"", o.indexer_pattern, "\" must have one letter per layer (",
                                                     c.num_hidden_layers, ")"));
    }
  }
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    c.mlp_layer_types.push_back(i < c.first_k_dense_replace ? MlpType::kDense : MlpType::kMoe);
    const char kind = o.indexer_pattern.empty() ? 'F' : o.indexer_pattern[i];
    if (kind != 'F' && kind != 'S') {
      return absl::InvalidArgumentError(absl::StrCat("--indexer-pattern: letter '", std::string(1, kind), "' is not F or S"));
    }
    c.indexer_types.push_back(kind == 'F' ? IndexerType::kFull : IndexerType::kShared);
  }
  if (o.quant != TinyQuant::kNone) {
    if (o.fp8) return absl::InvalidArgumentError("--quant and --fp8 are different weight formats: pick one");
    // 64 divides every tiny input width (192, 256, 512, 4096); the real
    // checkpoints use 128.
    SPAR_ASSIGN_OR_RETURN(c.quant.weight_format, TinyWeightFormat(o.quant, o.geometry == TinyGeometry::kTiny ? 64 : 128, o.mtp));
  }
  if (o.fp8) {
    c.quant.fp8 = true;
    c.quant.ue8m0_scales = !glm;
    // The real GLM-5-FP8 list, including its "indexers_proj" misspelling.
    c.quant.modules_to_not_convert = {"input_layernorm", "post_attention_layernorm", "q_a_layernorm",
                                      "kv_a_layernorm", "model.norm", "mlp.gate", "mlp.gate.e_score_correction_bias",
                                      "self_attn.indexer.k_norm", "self_attn.indexers_proj", "lm_head",
                                      "model.embed_tokens"};
    if (o.mtp) {
      for (const char* m : {"eh_proj", "enorm", "hnorm", "shared_head"}) c.quant.modules_to_not_convert.push_back(m);
    }
  }
  if (o.mtp) c.num_nextn_predict_layers = 1;
  SPAR_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::Status MakeTinyModel(const MakeTinyOptions& options) {
  if (options.out_dir.empty()) return absl::InvalidArgumentError("make-tiny: --out is required");
  SPAR_ASSIGN_OR_RETURN(ModelConfig c, TinyModelConfig(options));
  SPAR_RETURN_IF_ERROR(MakeDirs(options.out_dir));
  TinyWriter w(options, c);
  SPAR_RETURN_IF_ERROR(w.Matrix(names::kEmbed, c.vocab_size, c.hidden_size, /*quantizable=*/false, kEmbedInit));
  const float output_scale = options.predictable ? kPredictableOutputScale : 1.0f;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const TinyLayerKind kind{c.is_moe_layer(i), c.indexer_types[i] == IndexerType::kFull, output_scale};
    SPAR_RETURN_IF_ERROR(AddLayer(w, c, i, kind));
  }
  if (options.mtp) SPAR_RETURN_IF_ERROR(AddMtpLayer(w, c, options));
  SPAR_RETURN_IF_ERROR(w.Vector(names::kFinalNorm, c.hidden_size, kNormInit));
  SPAR_RETURN_IF_ERROR(w.Matrix(names::kLmHead, c.vocab_size, c.hidden_size, /*quantizable=*/false, HeadInit(c)));
  SPAR_RETURN_IF_ERROR(w.Write(options.out_dir));
  SPAR_RETURN_IF_ERROR(WriteStringToFile(options.out_dir + "/config.json", ModelConfigToJson(c)));
  if (c.quant.weight_format && !c.quant.weight_format->hf_quant_config_json.empty()) {
    // ModelOpt checkpoints describe NVFP4 in hf_quant_config.json too.
    const auto hf = nlohmann::json::parse(c.quant.weight_format->hf_quant_config_json);
    SPAR_RETURN_IF_ERROR(WriteStringToFile(options.out_dir + "/hf_quant_config.json", hf.dump(2) + "\n"));
  }
  nlohmann::json gen = {{"eos_token_id", c.eos_token_ids}, {"do_sample", false}, {"_from_model_config", true}};
  if (c.pad_token_id) gen["pad_token_id"] = *c.pad_token_id;
  SPAR_RETURN_IF_ERROR(WriteStringToFile(options.out_dir + "/generation_config.json", gen.dump(2) + "\n"));
  if (options.geometry == TinyGeometry::kTiny) {
    SPAR_RETURN_IF_ERROR(WriteStringToFile(options.out_dir + "/tokenizer.json", TinyTokenizerJson()));
    SPAR_RETURN_IF_ERROR(WriteStringToFile(options.out_dir + "/tokenizer_config.json", TinyTokenizerConfigJson()));
  }
  return absl::OkStatus();
}

}  // namespace spar
