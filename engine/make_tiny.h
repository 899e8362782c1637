// `spar make-tiny`: deterministic random-weight checkpoints in the exact
// layout of the real GLM-5 / DeepSeek-V3.2 checkpoints (names, dtypes,
// block-FP8 scales), small enough for CPU tests but with the real kernel
// shapes (kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128).
// The same seed gives the same bytes on every machine: spar's own PRNG,
// no std:: distributions and no transcendental functions.
#ifndef SPAR_ENGINE_MAKE_TINY_H_
#define SPAR_ENGINE_MAKE_TINY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "engine/tiny_quant.h"

namespace spar {

enum class TinyGeometry {
  kTiny,      // few heads, layers and experts; a byte-level vocabulary
  kGlm5Full,  // real GLM-5 layer sizes (for GPU benchmarks), `layers` of them
};

struct MakeTinyOptions {
  ModelArch arch = ModelArch::kGlmMoeDsa;
  TinyGeometry geometry = TinyGeometry::kTiny;
  bool fp8 = false;
  // 4-bit weights in a published layout (engine/tiny_quant.h); not with fp8.
  TinyQuant quant = TinyQuant::kNone;
  uint64_t seed = 0;
  int layers = 0;  // 0: the geometry's default
  int index_topk = 0;  // 0: the geometry's default
  // 0: the geometry's default (tiny: GLM-5 4096, DeepSeek 163840); e.g.
  // 131072 for long-context tests (glm5: default RoPE; dsv32: its YaRN
  // factor stays 40 over 4096 original positions).
  int64_t max_position_embeddings = 0;
  // 0: the geometry's default (tiny: GLM-5 192, DeepSeek 128); e.g. 96 for
  // tests of expert widths that are no whole number of the GEMM's 64-byte
  // stages. A multiple of 8 (the kernels' activation rows), at most 8192.
  int64_t moe_intermediate_size = 0;
  uint64_t max_shard_bytes = 0;  // 0: one safetensors file
  // Per-layer indexer kinds as letters, F = full, S = shared (GLM-5.2 style
  // cross-layer top-k sharing; glm5 only). Empty: every layer full.
  std::string indexer_pattern;
  // The multi-token-prediction layer (num_nextn_predict_layers 1) in the
  // real checkpoints' naming, as model.layers.{layers}.*: enorm, hnorm,
  // eh_proj, a full MoE decoder layer with its own indexer and
  // shared_head.norm; dsv32 also stores its own embed_tokens and
  // shared_head.head (copies of the main ones, as DeepSeek's checkpoints do).
  bool mtp = false;
  // For tests of speculative decoding, which need drafts that are often
  // right: every layer's output projections (o_proj, the MLPs' and experts'
  // down_proj) are drawn 16x smaller, so the residual stream is mostly the
  // current token's embedding and the next token depends mostly on the
  // current one; with `mtp`, the MTP layer passes its token's embedding
  // through (eh_proj = [I | 0], its own layer drawn small too), so it
  // predicts the token after next as the main model would.
  bool predictable = false;
  std::string out_dir;
};

// The config make-tiny writes for these options.
absl::StatusOr<ModelConfig> TinyModelConfig(const MakeTinyOptions& options);

// Writes config.json, the weights, tokenizer.json, tokenizer_config.json and
// generation_config.json into options.out_dir (created if missing).
absl::Status MakeTinyModel(const MakeTinyOptions& options);

}  // namespace spar

#endif  // SPAR_ENGINE_MAKE_TINY_H_
