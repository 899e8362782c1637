// Host-side conversion of checkpoint tensors for the backends' weight
// uploads: vectors and matrices to fp32 (dequantizing block-FP8 and the
// 4-bit formats), and 4-bit matrices to the canonical forms of kernels/ref
// (what the cuda backend repacks for its kernels).
#ifndef SPAR_ENGINE_WEIGHT_CONVERT_H_
#define SPAR_ENGINE_WEIGHT_CONVERT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/safetensors.h"
#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"

namespace spar {

// Every element of an F32, BF16 or F16 tensor as fp32; other dtypes are an
// error naming the tensor.
absl::StatusOr<std::vector<float>> TensorToFloat(const TensorView& t);

// The matrix slice as fp32 [rows(), cols()]: F8_E4M3 is dequantized with its
// 128x128 block scales (W = e4m3 · weight_scale_inv), 4-bit layouts with
// their group scales and zero points (kernels/ref/int4_ref.h, nvfp4_ref.h).
absl::StatusOr<std::vector<float>> MatrixToFloat(const MatrixSource& m);

// A 4-bit integer matrix (AWQ, GPTQ, pack-quantized) slice in the canonical
// form. A column slice must keep whole groups (or the matrix must have one
// group per row); FailedPrecondition otherwise, so a caller can fall back
// to MatrixToFloat.
absl::StatusOr<ref::Int4Weights> MatrixToInt4(const MatrixSource& m);
// An NVFP4 matrix slice; column slices must keep whole 16-column blocks.
absl::StatusOr<ref::Nvfp4Weights> MatrixToNvfp4(const MatrixSource& m);

}  // namespace spar

#endif  // SPAR_ENGINE_WEIGHT_CONVERT_H_
