#include "engine/weight_convert.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/status_macros.h"

namespace spar {

absl::StatusOr<std::vector<float>> TensorToFloat(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(&out[i], t.data + 4 * i, 4);
        break;
      case DType::kBF16:
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
        break;
      case DType::kF16:
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = HalfToFloat(h);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("tensor \"", t.name, "\": dtype ", DTypeName(t.dtype), " cannot be used here"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> MatrixToFloat(const MatrixSource& m) {
  const TensorView& t = m.weight;
  if (t.shape.size() != 2) return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" is not 2-D"));
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t r0 = m.row_begin, r1 = m.row_end < 0 ? rows : m.row_end;
  const int64_t c0 = m.col_begin, c1 = m.col_end < 0 ? cols : m.col_end;
  if (r0 < 0 || r1 > rows || r0 > r1 || c0 < 0 || c1 > cols || c0 > c1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" ", t.ShapeString(), ": slice rows [", r0,
                                                   ", ", r1, ") cols [", c0, ", ", c1, ") out of bounds"));
  }
  const int64_t out_cols = c1 - c0;
  std::vector<float> out(static_cast<size_t>((r1 - r0) * out_cols));
  if (t.dtype == DType::kF8E4M3) {
    if (!m.scale_inv) return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\": FP8 without scales"));
    const TensorView& s = *m.scale_inv;
    const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
    if (s.dtype != DType::kF32 || s.shape != std::vector<int64_t>{srows, scols}) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", s.name, "\" is ", DTypeName(s.dtype),
                                                     s.ShapeString(), ", expected F32[", srows, ", ", scols, "]"));
    }
    const float* scales = reinterpret_cast<const float*>(s.data);
    for (int64_t r = r0; r < r1; ++r) {
      const float* srow = scales + (r / 128) * scols;
      float* dst = out.data() + (r - r0) * out_cols;
      for (int64_t c = c0; c < c1; ++c) dst[c - c0] = E4m3ToFloat(t.data[r * cols + c]) * srow[c / 128];
    }
    return out;
  }
  // Convert row runs: the whole range at once when all columns are kept.
  const size_t esize = DTypeSize(t.dtype);
  const bool full_rows = c0 == 0 && c1 == cols;
  const int64_t run = full_rows ? r1 - r0 : 1;
  for (int64_t r = r0; r < r1; r += run) {
    TensorView part;
    part.name = t.name;
    part.dtype = t.dtype;
    part.shape = {run * out_cols};
    part.data = t.data + (r * cols + c0) * esize;
    part.nbytes = static_cast<size_t>(run * out_cols) * esize;
    SPAR_ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloat(part));
    std::memcpy(out.data() + (r - r0) * out_cols, f.data(), f.size() * sizeof(float));
  }
  return out;
}

}  // namespace spar
