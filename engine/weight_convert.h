// Host-side conversion of checkpoint tensors for the backends' weight
// uploads: vectors and matrices to fp32, dequantizing block-FP8.
#ifndef SPAR_ENGINE_WEIGHT_CONVERT_H_
#define SPAR_ENGINE_WEIGHT_CONVERT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/safetensors.h"

namespace spar {

// Every element of an F32, BF16 or F16 tensor as fp32; other dtypes are an
// error naming the tensor.
absl::StatusOr<std::vector<float>> TensorToFloat(const TensorView& t);

// Rows [row_begin, row_end) of a matrix as fp32 [rows, cols]; F8_E4M3 is
// dequantized with its 128x128 block scales (W = e4m3 · weight_scale_inv).
absl::StatusOr<std::vector<float>> MatrixToFloat(const MatrixSource& m);

}  // namespace spar

#endif  // SPAR_ENGINE_WEIGHT_CONVERT_H_
