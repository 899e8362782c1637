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

namespace {

struct SliceBounds {
  int64_t r0, r1, c0, c1;
};

absl::StatusOr<SliceBounds> Bounds(const MatrixSource& m) {
  const TensorView& t = m.weight;
  if (t.shape.size() != 2) return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" is not 2-D"));
  const int64_t rows = m.full_rows(), cols = m.full_cols();
  SliceBounds b{m.row_begin, m.row_end < 0 ? rows : m.row_end, m.col_begin, m.col_end < 0 ? cols : m.col_end};
  if (b.r0 < 0 || b.r1 > rows || b.r0 > b.r1 || b.c0 < 0 || b.c1 > cols || b.c0 > b.c1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" [", rows, ", ", cols, "]: slice rows [", b.r0,
                                                   ", ", b.r1, ") cols [", b.c0, ", ", b.c1, ") out of bounds"));
  }
  return b;
}

// The whole 4-bit integer matrix, unpacked from its layout.
absl::StatusOr<ref::Int4Weights> UnpackInt4(const MatrixSource& m) {
  const QuantScheme& s = *m.quant;
  const int64_t n = m.quant_rows, k = m.quant_cols, g = s.GroupFor(k);
  SPAR_ASSIGN_OR_RETURN(std::vector<float> scales, TensorToFloat(*m.scales));
  const uint8_t* zeros = m.zeros ? m.zeros->data : nullptr;
  switch (s.layout) {
    case QuantLayout::kAwq:
      return ref::UnpackAwq(m.weight.data, zeros, scales.data(), n, k, g);
    case QuantLayout::kGptq:
      return ref::UnpackGptq(m.weight.data, zeros, scales.data(), n, k, g, s.zero_plus_one);
    case QuantLayout::kPackQuantized:
      return ref::UnpackPackQuantized(m.weight.data, zeros, scales.data(), n, k, g);
    case QuantLayout::kNvfp4:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("tensor \"", m.weight.name, "\" is not a 4-bit integer matrix"));
}

ref::Nvfp4Weights UnpackFp4(const MatrixSource& m) {
  return ref::UnpackNvfp4(m.weight.data, m.scales->data, m.global_scale, m.quant_rows, m.quant_cols);
}

// Keeps only columns [c0, c1) of an fp32 [rows, cols] matrix.
std::vector<float> KeepColumns(std::vector<float> full, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  if (c0 == 0 && c1 == cols) return full;
  std::vector<float> out(static_cast<size_t>(rows * (c1 - c0)));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out.data() + r * (c1 - c0), full.data() + r * cols + c0, (c1 - c0) * 4);
  return out;
}

absl::StatusOr<std::vector<float>> QuantizedToFloat(const MatrixSource& m, const SliceBounds& b) {
  const int64_t cols = m.quant_cols, rows = b.r1 - b.r0;
  std::vector<float> full(static_cast<size_t>(rows * cols));
  if (m.quant->layout == QuantLayout::kNvfp4) {
    ref::DequantizeNvfp4(UnpackFp4(m), b.r0, b.r1, full.data());
  } else {
    SPAR_ASSIGN_OR_RETURN(ref::Int4Weights w, UnpackInt4(m));
    ref::DequantizeInt4(w, b.r0, b.r1, full.data());
  }
  return KeepColumns(std::move(full), rows, cols, b.c0, b.c1);
}

}  // namespace

absl::StatusOr<ref::Int4Weights> MatrixToInt4(const MatrixSource& m) {
  if (!m.quant || m.quant->layout == QuantLayout::kNvfp4) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", m.weight.name, "\" is not a 4-bit integer matrix"));
  }
  SPAR_ASSIGN_OR_RETURN(SliceBounds b, Bounds(m));
  SPAR_ASSIGN_OR_RETURN(ref::Int4Weights full, UnpackInt4(m));
  const int64_t g = full.group, cols = b.c1 - b.c0;
  const bool whole_groups = b.c0 % g == 0 && b.c1 % g == 0;
  const bool one_group = g == full.cols;
  if (!whole_groups && !one_group) {
    return absl::FailedPreconditionError(absl::StrCat("tensor \"", m.weight.name, "\": columns [", b.c0, ", ", b.c1,
                                                      ") split its groups of ", g));
  }
  ref::Int4Weights w;
  w.rows = b.r1 - b.r0;
  w.cols = cols;
  w.group = one_group ? cols : g;
  const int64_t g0 = one_group ? 0 : b.c0 / g, groups = w.groups(), full_groups = full.groups();
  w.codes.resize(static_cast<size_t>(w.rows * cols));
  w.zeros.resize(static_cast<size_t>(w.rows * groups));
  w.scales.resize(static_cast<size_t>(w.rows * groups));
  for (int64_t r = 0; r < w.rows; ++r) {
    std::memcpy(w.codes.data() + r * cols, full.codes.data() + (b.r0 + r) * full.cols + b.c0, cols);
    for (int64_t j = 0; j < groups; ++j) {
      w.zeros[r * groups + j] = full.zeros[(b.r0 + r) * full_groups + g0 + j];
      w.scales[r * groups + j] = full.scales[(b.r0 + r) * full_groups + g0 + j];
    }
  }
  return w;
}

absl::StatusOr<ref::Nvfp4Weights> MatrixToNvfp4(const MatrixSource& m) {
  if (!m.quant || m.quant->layout != QuantLayout::kNvfp4) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", m.weight.name, "\" is not an NVFP4 matrix"));
  }
  SPAR_ASSIGN_OR_RETURN(SliceBounds b, Bounds(m));
  constexpr int64_t kB = ref::kNvfp4Block;
  if (b.c0 % kB != 0 || b.c1 % kB != 0) {
    return absl::FailedPreconditionError(absl::StrCat("tensor \"", m.weight.name, "\": columns [", b.c0, ", ", b.c1,
                                                      ") split its 16-column scale blocks"));
  }
  const ref::Nvfp4Weights full = UnpackFp4(m);
  ref::Nvfp4Weights w;
  w.rows = b.r1 - b.r0;
  w.cols = b.c1 - b.c0;
  w.global_scale = full.global_scale;
  w.codes.resize(static_cast<size_t>(w.rows * w.cols));
  w.scales.resize(static_cast<size_t>(w.rows * w.cols / kB));
  for (int64_t r = 0; r < w.rows; ++r) {
    std::memcpy(w.codes.data() + r * w.cols, full.codes.data() + (b.r0 + r) * full.cols + b.c0, w.cols);
    std::memcpy(w.scales.data() + r * (w.cols / kB), full.scales.data() + (b.r0 + r) * (full.cols / kB) + b.c0 / kB,
                w.cols / kB);
  }
  return w;
}

absl::StatusOr<std::vector<float>> MatrixToFloat(const MatrixSource& m) {
  const TensorView& t = m.weight;
  SPAR_ASSIGN_OR_RETURN(SliceBounds b, Bounds(m));
  if (m.quant) return QuantizedToFloat(m, b);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t r0 = b.r0, r1 = b.r1, c0 = b.c0, c1 = b.c1;
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
