// Finding one linear layer's tensors in a checkpoint: the plain [rows, cols]
// weight, block-FP8 with its weight_scale_inv, or a 4-bit layout with its
// scale and zero-point tensors (engine/weight_format.h). Every shape and
// dtype is checked against the layout and the config, so the backends can
// trust a MatrixSource.
//
// Which form a module has is read from its tensors, which name their layout
// unambiguously (qweight, weight_packed, a uint8 NVFP4 weight); the config
// must agree: a module the config keeps unconverted must be stored plain,
// and packed tensors need a 4-bit config of the same layout. A module the
// config would convert may still be stored plain (tools skip layers they do
// not know, e.g. AutoAWQ's per-model layer lists): the tensors say so.
#ifndef SPAR_ENGINE_MATRIX_SOURCE_H_
#define SPAR_ENGINE_MATRIX_SOURCE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/model_config.h"

namespace spar {

enum class MatrixKind {
  kLinear,     // any stored form
  kPlainOnly,  // the router and the embedding: bf16 / fp16 / fp32 only
};

// `weight_name` is the plain tensor's name ("model.layers.0.self_attn.o_proj.weight");
// the 4-bit tensors are found next to it ("...o_proj.qweight").
absl::StatusOr<MatrixSource> LoadMatrixSource(const Checkpoint& ck, const QuantConfig& quant,
                                              const std::string& weight_name, int64_t rows, int64_t cols,
                                              MatrixKind kind = MatrixKind::kLinear);

// Whether two matrices are stored alike, so that a linear stacking them is
// one GEMM on every backend: both plain (bf16 / fp32 / block-FP8: segments of
// one launch), or both 4-bit in one layout with the same group size over the
// same columns (NVFP4: the same global scale too). A 4-bit matrix beside a
// plain one is two GEMMs wherever they are stacked.
bool SameWeightFormat(const MatrixSource& a, const MatrixSource& b);

// "x.weight" -> "x"; other names unchanged.
std::string ModuleOfWeight(const std::string& weight_name);

}  // namespace spar

#endif  // SPAR_ENGINE_MATRIX_SOURCE_H_
