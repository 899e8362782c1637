// Element types that cross spar's boundaries (checkpoints, caches, wire).
#ifndef SPAR_BASE_DTYPE_H_
#define SPAR_BASE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace spar {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF8E4M3,  // OCP e4m3 "fn": no infinities, max 448, NaN = 0x7F/0xFF.
  kI32,
  kI64,
  kU8,
};

size_t DTypeSize(DType dtype);
// Safetensors spelling: "F32", "BF16", "F16", "F8_E4M3", "I32", "I64", "U8".
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);

}  // namespace spar

#endif  // SPAR_BASE_DTYPE_H_
