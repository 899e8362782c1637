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
  uint64_t max_shard_bytes = 0;  // 0: one safetensors file
  // Per-layer indexer kinds as letters, F = full, S = shared (GLM-5.2 style
  // cross-layer top-k sharing; glm5 only). Empty: every layer full.
  std::string indexer_pattern;
  std::string out_dir;
};

// The config make-tiny writes for these options.
absl::StatusOr<ModelConfig> TinyModelConfig(const MakeTinyOptions& options);

// Writes config.json, the weights, tokenizer.json, tokenizer_config.json and
// generation_config.json into options.out_dir (created if missing).
absl::Status MakeTinyModel(const MakeTinyOptions& options);

}  // namespace spar

#endif  // SPAR_ENGINE_MAKE_TINY_H_
