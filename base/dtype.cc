#include "base/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace spar {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kBF16, "BF16", 2}, {DType::kF16, "F16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kI32, "I32", 4},  {DType::kI64, "I64", 8},
    {DType::kU8, "U8", 1},
};

}  // namespace

size_t DTypeSize(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", name, "\""));
}

}  // namespace spar
