// make-tiny's 4-bit checkpoints (`spar make-tiny --quant awq|gptq|int4-ct|nvfp4`):
// a real-looking quantization config per format and the tensors each module
// is stored as, packed exactly as the tools that publish such checkpoints
// pack them (docs/weight_formats.md). Deterministic like the rest of
// make-tiny: the same float weights give the same bytes.
#ifndef SPAR_ENGINE_TINY_QUANT_H_
#define SPAR_ENGINE_TINY_QUANT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/checkpoint.h"
#include "engine/weight_format.h"

namespace spar {

enum class TinyQuant { kNone, kAwq, kGptq, kInt4Ct, kNvfp4 };

// "awq", "gptq", "int4-ct", "nvfp4" (the --quant spellings); "" is kNone.
absl::StatusOr<TinyQuant> ParseTinyQuant(absl::string_view name);
absl::string_view TinyQuantName(TinyQuant quant);

// The config make-tiny writes, parsed by the same parser real checkpoints
// go through. `group_size` is the AWQ / GPTQ / compressed-tensors group.
// What stays bf16 follows the published checkpoints of each kind: AWQ keeps
// the DSA indexer unconverted, GPTQ converts every decoder linear,
// compressed-tensors converts the routed experts (group, symmetric) and the
// attention / dense / shared projections (per channel, with zero points) in
// two config groups, NVFP4 excludes lm_head, layer 0's attention and the
// indexers. With `mtp` (a checkpoint with the MTP layer) the layer's own
// projections stay bf16 too, as in the FP8 checkpoints: eh_proj,
// shared_head and its embed_tokens copy (its decoder layer is converted
// like the others).
absl::StatusOr<WeightFormat> TinyWeightFormat(TinyQuant quant, int group_size, bool mtp = false);

// Adds the tensors module `module` (weight [rows, cols], fp32 values already
// rounded to bf16) is stored as under `scheme`.
absl::Status AddQuantizedMatrix(CheckpointWriter& writer, const QuantScheme& scheme, const std::string& module,
                                const std::vector<float>& w, int64_t rows, int64_t cols);

// Benchmark-size stand-in: random codes and scales of the init's magnitude
// (`spread`), drawn in the stored form without quantizing floats.
absl::Status AddRandomQuantizedMatrix(CheckpointWriter& writer, const QuantScheme& scheme, const std::string& module,
                                      int64_t rows, int64_t cols, uint64_t seed, float spread);

}  // namespace spar

#endif  // SPAR_ENGINE_TINY_QUANT_H_
