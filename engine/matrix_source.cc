#include "engine/matrix_source.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/weight_names.h"

namespace spar {
namespace {

std::string ShapeOf(const std::vector<int64_t>& shape) {
  TensorView t;
  t.shape = shape;
  return t.ShapeString();
}

// The tensor `name` with one of `dtypes` and exactly `shape`.
absl::StatusOr<TensorView> Expect(const Checkpoint& ck, const std::string& name, std::initializer_list<DType> dtypes,
                                  const std::vector<int64_t>& shape, absl::string_view what) {
  SPAR_ASSIGN_OR_RETURN(TensorView t, ck.Get(name));
  bool dtype_ok = false;
  std::vector<std::string> names;
  for (DType d : dtypes) {
    dtype_ok |= t.dtype == d;
    names.emplace_back(DTypeName(d));
  }
  if (!dtype_ok || t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" is ", DTypeName(t.dtype), t.ShapeString(),
                                                   ", expected ", absl::StrJoin(names, " or "), ShapeOf(shape), " (",
                                                   what, ")"));
  }
  return t;
}

constexpr std::initializer_list<DType> kScaleTypes = {DType::kF16, DType::kBF16, DType::kF32};

absl::Status Divides(int64_t group, int64_t k, const std::string& module) {
  if (k % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\": group size ", group,
                                                   " does not divide its ", k, " input features"));
  }
  return absl::OkStatus();
}

absl::Status Multiple(int64_t v, int64_t of, const std::string& module, absl::string_view what) {
  if (v % of != 0) {
    return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\": ", what, " (", v,
                                                   ") must be a multiple of ", of, " for this layout"));
  }
  return absl::OkStatus();
}

// AWQ GEMM and GPTQ share tensor names, not axes.
absl::Status LoadAwqOrGptq(const Checkpoint& ck, const std::string& module, const QuantScheme& s, MatrixSource* m) {
  const int64_t n = m->quant_rows, k = m->quant_cols, g = s.GroupFor(k);
  SPAR_RETURN_IF_ERROR(Divides(g, k, module));
  SPAR_RETURN_IF_ERROR(Multiple(n, 8, module, "output features"));
  const std::string q = module + ".qweight", z = module + ".qzeros", sc = module + ".scales";
  if (s.layout == QuantLayout::kAwq) {
    SPAR_ASSIGN_OR_RETURN(m->weight, Expect(ck, q, {DType::kI32}, {k, n / 8}, "AWQ qweight [K, N/8]"));
  } else {
    SPAR_RETURN_IF_ERROR(Multiple(k, 8, module, "input features"));
    SPAR_ASSIGN_OR_RETURN(m->weight, Expect(ck, q, {DType::kI32}, {k / 8, n}, "GPTQ qweight [K/8, N]"));
  }
  SPAR_ASSIGN_OR_RETURN(m->zeros, Expect(ck, z, {DType::kI32}, {k / g, n / 8}, "qzeros [K/group, N/8]"));
  SPAR_ASSIGN_OR_RETURN(m->scales, Expect(ck, sc, kScaleTypes, {k / g, n}, "scales [K/group, N]"));
  const std::string gi = module + ".g_idx";
  if (ck.Has(gi)) {
    if (s.layout == QuantLayout::kAwq) return absl::InvalidArgumentError(absl::StrCat("tensor \"", gi, "\": AWQ has no g_idx"));
    SPAR_ASSIGN_OR_RETURN(TensorView idx, Expect(ck, gi, {DType::kI32}, {k}, "g_idx [K]"));
    // desc_act false: every row's group is row / group (GPTQ writes g_idx
    // anyway). Anything else is act-order, which is refused.
    for (int64_t r = 0; r < k; ++r) {
      int32_t v;
      std::memcpy(&v, idx.data + 4 * r, 4);
      if (v != r / g) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", gi, "\": row ", r, " is in group ", v, ", not ", r / g,
                                                       ": act-order (permuted) GPTQ weights are not supported"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoadPackQuantized(const Checkpoint& ck, const std::string& module, const QuantScheme& s, MatrixSource* m) {
  const int64_t n = m->quant_rows, k = m->quant_cols, g = s.GroupFor(k);
  SPAR_RETURN_IF_ERROR(Divides(g, k, module));
  SPAR_ASSIGN_OR_RETURN(m->weight, Expect(ck, module + ".weight_packed", {DType::kI32}, {n, (k + 7) / 8},
                                          "weight_packed [N, ceil(K/8)]"));
  SPAR_ASSIGN_OR_RETURN(m->scales, Expect(ck, module + ".weight_scale", kScaleTypes, {n, k / g}, "weight_scale [N, K/group]"));
  const std::string shape_name = module + ".weight_shape";
  SPAR_ASSIGN_OR_RETURN(TensorView shape, ck.Get(shape_name));
  if ((shape.dtype != DType::kI32 && shape.dtype != DType::kI64) || shape.shape != std::vector<int64_t>{2}) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", shape_name, "\" is ", DTypeName(shape.dtype),
                                                   shape.ShapeString(), ", expected I32 or I64[2]"));
  }
  int64_t stored[2];
  for (int i = 0; i < 2; ++i) {
    if (shape.dtype == DType::kI32) {
      int32_t v;
      std::memcpy(&v, shape.data + 4 * i, 4);
      stored[i] = v;
    } else {
      std::memcpy(&stored[i], shape.data + 8 * i, 8);
    }
  }
  if (stored[0] != n || stored[1] != k) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", shape_name, "\" says [", stored[0], ", ", stored[1],
                                                   "], the model needs [", n, ", ", k, "]"));
  }
  const std::string zp = module + ".weight_zero_point";
  if (s.zero_points) {
    SPAR_RETURN_IF_ERROR(Multiple(n, 8, module, "output features"));
    SPAR_ASSIGN_OR_RETURN(m->zeros, Expect(ck, zp, {DType::kI32}, {n / 8, k / g}, "weight_zero_point [N/8, K/group]"));
  } else if (ck.Has(zp)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", zp, "\" is stored, but the config group is symmetric"));
  }
  if (ck.Has(module + ".weight_g_idx")) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", module, ".weight_g_idx\": act-order weights are not supported"));
  }
  return absl::OkStatus();
}

absl::Status LoadNvfp4(const Checkpoint& ck, const std::string& module, MatrixSource* m) {
  const int64_t n = m->quant_rows, k = m->quant_cols;
  SPAR_RETURN_IF_ERROR(Multiple(k, 16, module, "input features"));
  SPAR_ASSIGN_OR_RETURN(m->weight, Expect(ck, module + ".weight", {DType::kU8}, {n, k / 2}, "NVFP4 weight [N, K/2]"));
  SPAR_ASSIGN_OR_RETURN(m->scales, Expect(ck, module + ".weight_scale", {DType::kF8E4M3}, {n, k / 16},
                                          "NVFP4 weight_scale [N, K/16]"));
  const std::string gs = module + ".weight_scale_2";
  SPAR_ASSIGN_OR_RETURN(TensorView g, ck.Get(gs));
  if (g.dtype != DType::kF32 || g.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", gs, "\" is ", DTypeName(g.dtype), g.ShapeString(),
                                                   ", expected one F32 value"));
  }
  std::memcpy(&m->global_scale, g.data, 4);
  if (!std::isfinite(m->global_scale) || !(m->global_scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", gs, "\" is ", m->global_scale, ", not a positive scale"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MatrixSource> PlainOrFp8(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols) {
  MatrixSource m;
  SPAR_ASSIGN_OR_RETURN(m.weight, ck.Get(name));
  if (m.weight.shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" has shape ", m.weight.ShapeString(),
                                                   ", expected ", ShapeOf({rows, cols})));
  }
  switch (m.weight.dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF32:
      return m;
    case DType::kF8E4M3: {
      SPAR_ASSIGN_OR_RETURN(m.scale_inv, Expect(ck, names::ScaleOf(name), {DType::kF32},
                                                {(rows + 127) / 128, (cols + 127) / 128}, "block-FP8 weight_scale_inv"));
      return m;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" has unsupported dtype ", DTypeName(m.weight.dtype)));
  }
}

}  // namespace

std::string ModuleOfWeight(const std::string& weight_name) {
  return absl::EndsWith(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

absl::StatusOr<MatrixSource> LoadMatrixSource(const Checkpoint& ck, const QuantConfig& quant,
                                              const std::string& weight_name, int64_t rows, int64_t cols,
                                              MatrixKind kind) {
  const std::string module = ModuleOfWeight(weight_name);
  // The stored form, from the tensors' names and dtypes.
  std::optional<QuantLayout> stored;
  std::string evidence;
  if (ck.Has(module + ".qweight")) {
    stored = QuantLayout::kAwq;  // or GPTQ: the config tells which axis is packed
    evidence = module + ".qweight";
  }
  if (ck.Has(module + ".weight_packed")) {
    if (stored) return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\" has both qweight and weight_packed"));
    stored = QuantLayout::kPackQuantized;
    evidence = module + ".weight_packed";
  }
  if (stored && ck.Has(weight_name)) {
    return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\" has both \"", weight_name, "\" and \"",
                                                   evidence, "\""));
  }
  if (!stored && ck.Has(weight_name) && ck.Has(module + ".weight_scale")) {
    SPAR_ASSIGN_OR_RETURN(TensorView w, ck.Get(weight_name));
    if (w.dtype == DType::kU8) {
      stored = QuantLayout::kNvfp4;
      evidence = weight_name + " (U8 with weight_scale)";
    }
  }
  if (!stored) return PlainOrFp8(ck, weight_name, rows, cols);

  if (kind == MatrixKind::kPlainOnly) {
    return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\" must be stored unquantized (bf16), but the "
                                                   "checkpoint has \"", evidence, "\""));
  }
  if (!quant.weight_format) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint stores \"", module, "\" 4-bit (\"", evidence,
                                                   "\") but config.json has no 4-bit quantization_config (awq, gptq, "
                                                   "compressed-tensors) and there is no hf_quant_config.json"));
  }
  const WeightFormat& f = *quant.weight_format;
  SPAR_ASSIGN_OR_RETURN(std::optional<QuantScheme> scheme, f.SchemeFor(module));
  if (!scheme) {
    return absl::InvalidArgumentError(absl::StrCat(f.source, " keeps \"", module,
                                                   "\" unconverted (not targeted, or in its ignore / "
                                                   "modules_to_not_convert / exclude_modules list), but the checkpoint "
                                                   "stores it 4-bit (\"", evidence, "\")"));
  }
  const bool layout_agrees = *stored == QuantLayout::kAwq
                                 ? scheme->layout == QuantLayout::kAwq || scheme->layout == QuantLayout::kGptq
                                 : scheme->layout == *stored;
  if (!layout_agrees) {
    return absl::InvalidArgumentError(absl::StrCat("module \"", module, "\" is stored as \"", evidence, "\", which is not the ",
                                                   QuantLayoutName(scheme->layout), " layout ", f.source, " describes"));
  }
  MatrixSource m;
  m.quant = scheme;
  m.quant_rows = rows;
  m.quant_cols = cols;
  switch (scheme->layout) {
    case QuantLayout::kAwq:
    case QuantLayout::kGptq:
      SPAR_RETURN_IF_ERROR(LoadAwqOrGptq(ck, module, *scheme, &m));
      break;
    case QuantLayout::kPackQuantized:
      SPAR_RETURN_IF_ERROR(LoadPackQuantized(ck, module, *scheme, &m));
      break;
    case QuantLayout::kNvfp4:
      SPAR_RETURN_IF_ERROR(LoadNvfp4(ck, module, &m));
      break;
  }
  return m;
}

bool SameWeightFormat(const MatrixSource& a, const MatrixSource& b) {
  if (a.quant.has_value() != b.quant.has_value()) return false;
  if (!a.quant.has_value()) return true;
  if (a.quant->layout != b.quant->layout || a.cols() != b.cols()) return false;
  if (a.quant->layout == QuantLayout::kNvfp4) return a.global_scale == b.global_scale;
  return a.quant->GroupFor(a.cols()) == b.quant->GroupFor(b.cols());
}

}  // namespace spar
