#include "engine/cuda/device_weights.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "engine/weight_convert.h"
#include "kernels/cuda/gemm/w4_layout.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar {
namespace {

// ---- 4-bit: the canonical codes of a slice, repacked for the W4A16 kernel ----

// A 4-bit slice's codes when the kernel takes its shape (w4_layout.h:
// 64-column multiples, groups of a multiple of 64 kept whole); nullopt
// otherwise, and the caller stores the slice in bf16.
struct FourBitHost {
  bool fp4 = false;
  ref::Int4Weights i4;
  ref::Nvfp4Weights f4;

  gemm::W4Source Source() const { return fp4 ? gemm::W4SourceOf(f4) : gemm::W4SourceOf(i4); }
};

absl::StatusOr<std::optional<FourBitHost>> KernelReady4Bit(const MatrixSource& m) {
  if (!m.quant) return std::optional<FourBitHost>();
  FourBitHost h;
  h.fp4 = m.quant->layout == QuantLayout::kNvfp4;
  absl::Status st;
  if (h.fp4) {
    auto w = MatrixToNvfp4(m);
    st = w.status();
    if (w.ok()) h.f4 = std::move(*w);
  } else {
    auto w = MatrixToInt4(m);
    st = w.status();
    if (w.ok()) h.i4 = std::move(*w);
  }
  if (absl::IsFailedPrecondition(st)) return std::optional<FourBitHost>();  // a slice splitting groups
  SPAR_RETURN_IF_ERROR(st);
  const gemm::W4Source src = h.Source();
  if (!gemm::W4LayoutSupports(src.cols, src.group, h.fp4)) return std::optional<FourBitHost>();
  return std::optional<FourBitHost>(std::move(h));
}

absl::Status UploadW4(const gemm::W4Packed& p, W4Buffers* out) {
  SPAR_RETURN_IF_ERROR(out->values.Upload(p.values.data(), p.values.size()));
  W4GemmWeight& w = out->w;
  w = W4GemmWeight();
  w.values = out->values.as<uint8_t>();
  if (p.fp4) {
    SPAR_RETURN_IF_ERROR(out->fp4_scales.Upload(p.fp4_scales.data(), p.fp4_scales.size()));
    const float global[2] = {p.global_scale, p.global_scale_up};
    SPAR_RETURN_IF_ERROR(out->global.Upload(global, sizeof(global)));
    w.type = W4WeightType::kNvfp4;
    w.fp4_scales = out->fp4_scales.as<uint8_t>();
    w.global_scale = out->global.as<float>();
  } else {
    SPAR_RETURN_IF_ERROR(out->scales.Upload(p.scales.data(), p.scales.size() * 4));
    SPAR_RETURN_IF_ERROR(out->zeros.Upload(p.zeros.data(), p.zeros.size()));
    w.type = W4WeightType::kInt4;
    w.scales = out->scales.as<float>();
    w.zeros = out->zeros.as<uint8_t>();
    w.group = p.group;
  }
  w.rows_padded = p.rows_padded;
  return absl::OkStatus();
}

absl::Status UploadW4Matrix(const gemm::W4Packed& p, bool silu_pair, int64_t cols, CudaMatrix* out) {
  SPAR_RETURN_IF_ERROR(UploadW4(p, &out->w4));
  out->w4.w.silu_pair = silu_pair;
  out->w4.w.n = silu_pair ? p.rows / 2 : p.rows;
  out->four_bit = true;
  out->cols = cols;
  return absl::OkStatus();
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

// A W8A16 GEMM weight's bytes (`rows` rows of `row_bytes`, row-major) into
// `buf` in `layout` (tiled: w8a16_tiles.h, rows padded to 16).
absl::Status UploadGemmBytes(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmWeightLayout layout,
                             DeviceBuffer* buf) {
  if (IsTiled(layout)) {
    const std::vector<uint8_t> tiled = gemm::TileGemmRows(row_major, rows, row_bytes, TileOrderOf(layout));
    return buf->Upload(tiled.data(), tiled.size());
  }
  return buf->Upload(row_major, static_cast<size_t>(rows * row_bytes));
}

// FP8 weights stay FP8 on the GPU when the slice keeps whole 128x128 scale
// blocks (always true for the real models' TP splits); other slices (tiny
// test models) are dequantized to bf16, which the GEMM takes as well.
bool KeepsScaleBlocks(const MatrixSource& m) {
  const int64_t rows = m.weight.shape[0], cols = m.weight.shape[1];
  const int64_t r1 = m.row_end < 0 ? rows : m.row_end, c1 = m.col_end < 0 ? cols : m.col_end;
  return m.scale_inv && m.row_begin % 128 == 0 && m.col_begin % 128 == 0 && (r1 % 128 == 0 || r1 == rows) &&
         (c1 % 128 == 0 || c1 == cols);
}

// A matrix the W4A16 kernel does not take (a 4-bit slice it cannot take
// included) as stored FP8 or, dequantized by MatrixToFloat, bf16. Rows of
// `cols` values are stored `ld` apart (PaddedGemmRowElements: the GEMM
// streams whole 64-byte stages), the padding zero.
absl::Status UploadStoredMatrix(const MatrixSource& m, GemmWeightLayout layout, CudaMatrix* out) {
  const int64_t rows = m.rows(), cols = m.cols();
  out->cols = cols;
  out->gemm.n = rows;
  out->gemm.layout = layout;
  if (m.weight.dtype == DType::kF8E4M3 && KeepsScaleBlocks(m)) {
    const int64_t full_cols = m.weight.shape[1];
    const int64_t full_scols = (full_cols + 127) / 128, scols = (cols + 127) / 128, srows = (rows + 127) / 128;
    if (rows < 0 || cols < 0 || m.row_begin + rows > m.weight.shape[0] || m.col_begin + cols > full_cols) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", m.weight.name, "\": slice out of bounds"));
    }
    const int64_t ld = PaddedGemmRowElements(cols, GemmWeightType::kFp8Block128);
    std::vector<uint8_t> values(static_cast<size_t>(rows * ld), 0);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(values.data() + r * ld, m.weight.data + (m.row_begin + r) * full_cols + m.col_begin, cols);
    }
    out->gemm.ld = ld;
    std::vector<float> scales(static_cast<size_t>(srows * scols));
    const float* s = reinterpret_cast<const float*>(m.scale_inv->data);
    for (int64_t r = 0; r < srows; ++r) {
      std::memcpy(scales.data() + r * scols, s + (m.row_begin / 128 + r) * full_scols + m.col_begin / 128, scols * 4);
    }
    SPAR_RETURN_IF_ERROR(UploadGemmBytes(values.data(), rows, ld, layout, &out->values));
    SPAR_RETURN_IF_ERROR(out->scales.Upload(scales.data(), scales.size() * 4));
    out->gemm.type = GemmWeightType::kFp8Block128;
    out->gemm.data = out->values.as<void>();
    out->gemm.scale = out->scales.as<float>();
    return absl::OkStatus();
  }
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(m));
  const int64_t ld = PaddedGemmRowElements(cols, GemmWeightType::kBf16);
  std::vector<uint16_t> b(static_cast<size_t>(rows * ld), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) b[r * ld + c] = FloatToBf16(f[r * cols + c]);
  }
  SPAR_RETURN_IF_ERROR(UploadGemmBytes(reinterpret_cast<const uint8_t*>(b.data()), rows, ld * 2, layout, &out->values));
  out->gemm.type = GemmWeightType::kBf16;
  out->gemm.data = out->values.as<void>();
  out->gemm.scale = nullptr;
  out->gemm.ld = ld;
  return absl::OkStatus();
}

absl::Status UploadMatrix(const MatrixSource& m, GemmWeightLayout layout, CudaMatrix* out) {
  SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> four, KernelReady4Bit(m));
  if (four) return UploadW4Matrix(gemm::PackW4(four->Source()), /*silu_pair=*/false, m.cols(), out);
  return UploadStoredMatrix(m, layout, out);
}

// A matrix as bf16 [rows_out, cols_out]: the source in the top-left corner,
// zeros elsewhere.
absl::Status UploadPaddedBf16(const MatrixSource& m, int64_t rows_out, int64_t cols_out, GemmWeightLayout layout,
                              CudaMatrix* out) {
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(m));
  const int64_t rows = m.rows(), cols = m.cols();
  std::vector<float> padded(static_cast<size_t>(rows_out * cols_out), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(padded.data() + r * cols_out, f.data() + r * cols, cols * 4);
  const auto b = ToBf16(padded);
  SPAR_RETURN_IF_ERROR(
      UploadGemmBytes(reinterpret_cast<const uint8_t*>(b.data()), rows_out, cols_out * 2, layout, &out->values));
  out->cols = cols_out;
  out->gemm.n = rows_out;
  out->gemm.layout = layout;
  out->gemm.type = GemmWeightType::kBf16;
  out->gemm.data = out->values.as<void>();
  out->gemm.scale = nullptr;
  return absl::OkStatus();
}

// The GEMMs need K (the down projection's input) to be a multiple of 64. A
// tensor-parallel slice of a small MLP may not be (the tiny models' shared
// expert: 192 / 2 = 96): pad the intermediate dimension with zero rows of
// gate/up and zero columns of down, which adds exactly nothing.
absl::Status UploadMlpInto(const MlpSource& src, GemmWeightLayout layout, CudaMlp* m) {
  const int64_t inter = src.gate.rows();
  const int64_t padded = (inter + 63) / 64 * 64;
  if (padded == inter && (src.gate.quant || src.up.quant)) {
    // 4-bit gate and up become one SiLU pair; when either cannot, both are
    // bf16 (the GEMM's SiLU·mul needs the two of one type).
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> g, KernelReady4Bit(src.gate));
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> u, KernelReady4Bit(src.up));
    const bool pair = g && u && g->fp4 == u->fp4 && g->Source().rows == u->Source().rows &&
                      g->Source().cols == u->Source().cols && g->Source().group == u->Source().group;
    if (pair) {
      SPAR_RETURN_IF_ERROR(UploadW4Matrix(gemm::PackW4SiluPair(g->Source(), u->Source()), true, src.gate.cols(), &m->gate));
    } else {
      SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.gate, src.gate.rows(), src.gate.cols(), layout, &m->gate));
      SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.up, src.up.rows(), src.up.cols(), layout, &m->up));
    }
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.down, layout, &m->down));
    m->inter = inter;
    return absl::OkStatus();
  }
  if (padded == inter) {
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.gate, layout, &m->gate));
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.up, layout, &m->up));
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.down, layout, &m->down));
  } else {
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.gate, padded, src.gate.cols(), layout, &m->gate));
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.up, padded, src.up.cols(), layout, &m->up));
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.down, src.down.rows(), padded, layout, &m->down));
  }
  m->inter = m->gate.gemm.n;
  if (m->gate.gemm.type != m->up.gemm.type) return absl::InvalidArgumentError("MLP gate and up differ in dtype");
  return absl::OkStatus();
}

// Experts back to back, each [rows, ld] with rows of `cols` values padded
// with zeros to ld (PaddedGemmRowElements: the grouped GEMM streams whole
// 64-byte stages; an expert width of 96, say, is served as 128).
absl::Status PackExperts(const std::vector<const MatrixSource*>& mats, GemmWeightLayout layout, PackedExperts* out) {
  const int64_t rows = mats[0]->rows(), cols = mats[0]->cols();
  const bool fp8 = mats[0]->weight.dtype == DType::kF8E4M3;
  const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
  const int64_t ld = PaddedGemmRowElements(cols, fp8 ? GemmWeightType::kFp8Block128 : GemmWeightType::kBf16);
  const int64_t elem = fp8 ? 1 : 2, row_bytes = cols * elem, ld_bytes = ld * elem;
  // Tiled: each expert's rows padded to whole 16-row tiles (w8a16_tiles.h).
  const bool tiled = IsTiled(layout);
  const int64_t stored_rows = tiled ? gemm::GemmTiledRows(rows) : rows;
  std::vector<uint8_t> values(static_cast<size_t>(mats.size() * stored_rows * ld_bytes), 0);
  std::vector<uint8_t> expert(static_cast<size_t>(rows * ld_bytes), 0);  // one expert, row-major
  std::vector<float> scales;
  for (size_t e = 0; e < mats.size(); ++e) {
    const MatrixSource* m = mats[e];
    if (m->rows() != rows || m->cols() != cols || (m->weight.dtype == DType::kF8E4M3) != fp8) {
      return absl::InvalidArgumentError(absl::StrCat("expert tensor \"", m->weight.name, "\" differs from expert 0"));
    }
    uint8_t* dst = tiled ? expert.data() : values.data() + e * rows * ld_bytes;
    if (fp8) {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld_bytes, m->weight.data + r * row_bytes, row_bytes);
      const float* s = reinterpret_cast<const float*>(m->scale_inv->data);
      scales.insert(scales.end(), s, s + srows * scols);
    } else {
      SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(*m));
      const auto b = ToBf16(f);
      for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld_bytes, b.data() + r * cols, row_bytes);
    }
    if (tiled) {
      gemm::TileGemmRowsInto(expert.data(), rows, ld_bytes, TileOrderOf(layout),
                             values.data() + e * stored_rows * ld_bytes);
    }
  }
  SPAR_RETURN_IF_ERROR(out->values.Upload(values.data(), values.size()));
  out->first.n = rows;
  out->first.ld = ld;
  out->first.layout = layout;
  out->weight_stride = stored_rows * ld;
  if (fp8) {
    SPAR_RETURN_IF_ERROR(out->scales.Upload(scales.data(), scales.size() * 4));
    out->first.type = GemmWeightType::kFp8Block128;
    out->first.scale = out->scales.as<float>();
    out->scale_stride = srows * scols;
  } else {
    out->first.type = GemmWeightType::kBf16;
  }
  out->first.data = out->values.as<void>();
  return absl::OkStatus();
}

// Every expert's 4-bit matrix (or, with `up`, its gate/up SiLU pair) in the
// kernel layout, back to back. False when some expert's slice cannot be
// taken by the kernel (then the caller packs them in bf16).
absl::StatusOr<bool> PackExpertsW4(const std::vector<const MatrixSource*>& mats,
                                   const std::vector<const MatrixSource*>* up, PackedExperts* out) {
  // Unpacking the checkpoint's layout is per expert: all experts at once.
  const int64_t count = static_cast<int64_t>(mats.size());
  std::vector<absl::StatusOr<std::optional<FourBitHost>>> unpacked(count), unpacked_up(up != nullptr ? count : 0);
  ParallelFor(count, 1, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      unpacked[e] = KernelReady4Bit(*mats[e]);
      if (up != nullptr) unpacked_up[e] = KernelReady4Bit(*(*up)[e]);
    }
  });
  std::vector<FourBitHost> hosts, ups;
  for (int64_t e = 0; e < count; ++e) {
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> h, std::move(unpacked[e]));
    if (!h) return false;
    hosts.push_back(std::move(*h));
    if (up != nullptr) {
      SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> u, std::move(unpacked_up[e]));
      if (!u || u->fp4 != hosts.back().fp4) return false;
      ups.push_back(std::move(*u));
    }
  }
  gemm::W4Packed all;
  std::vector<float> globals;
  int64_t rows = 0;
  for (size_t e = 0; e < hosts.size(); ++e) {
    const gemm::W4Packed p =
        up != nullptr ? gemm::PackW4SiluPair(hosts[e].Source(), ups[e].Source()) : gemm::PackW4(hosts[e].Source());
    if (e == 0) {
      all = p;
      rows = p.rows;
      out->w4_values_stride = static_cast<int64_t>(p.values.size());
      out->w4_scales_stride = static_cast<int64_t>(p.scales.size());
      out->w4_zeros_stride = static_cast<int64_t>(p.zeros.size());
      out->w4_fp4_stride = static_cast<int64_t>(p.fp4_scales.size());
    } else {
      if (p.rows != rows || p.cols != all.cols || p.group != all.group) {
        return absl::InvalidArgumentError(absl::StrCat("expert tensor \"", mats[e]->weight.name, "\" differs from expert 0"));
      }
      all.values.insert(all.values.end(), p.values.begin(), p.values.end());
      all.scales.insert(all.scales.end(), p.scales.begin(), p.scales.end());
      all.zeros.insert(all.zeros.end(), p.zeros.begin(), p.zeros.end());
      all.fp4_scales.insert(all.fp4_scales.end(), p.fp4_scales.begin(), p.fp4_scales.end());
    }
    globals.push_back(p.global_scale);
    if (up != nullptr) globals.push_back(p.global_scale_up);
  }
  SPAR_RETURN_IF_ERROR(UploadW4(all, &out->w4));
  if (all.fp4) {  // one global scale per expert (two for a pair)
    SPAR_RETURN_IF_ERROR(out->w4.global.Upload(globals.data(), globals.size() * 4));
    out->w4.w.global_scale = out->w4.global.as<float>();
  }
  out->w4.w.silu_pair = up != nullptr;
  out->w4.w.n = up != nullptr ? rows / 2 : rows;
  out->four_bit = true;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Weight>> UploadLinear(const LinearSource& src, GemmWeightLayout layout) {
  if (src.parts.empty() || src.parts.size() > static_cast<size_t>(gemm::kMaxGemmSegments)) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear: ", src.parts.size(), " parts (1..", gemm::kMaxGemmSegments, " supported)"));
  }
  std::vector<std::optional<FourBitHost>> four;
  for (const auto& p : src.parts) {
    if (p.cols() != src.parts.front().cols()) return absl::InvalidArgumentError("linear: parts differ in columns");
    SPAR_ASSIGN_OR_RETURN(std::optional<FourBitHost> f, KernelReady4Bit(p));
    four.push_back(std::move(f));
  }
  // Neighbouring 4-bit parts that can share one packing become one matrix,
  // so one GEMM launch writes them all (q_a ‖ kv_a of an int4 checkpoint's
  // fused A projection: one launch instead of two).
  auto lin = std::make_unique<CudaLinear>();
  lin->k = src.parts.front().cols();
  for (size_t i = 0; i < src.parts.size();) {
    auto m = std::make_unique<CudaMatrix>();
    size_t next = i + 1;
    if (four[i]) {
      std::vector<gemm::W4Source> run = {four[i]->Source()};
      while (next < four.size() && four[next] && gemm::W4CanStack(run.front(), four[next]->Source())) {
        run.push_back(four[next++]->Source());
      }
      SPAR_RETURN_IF_ERROR(UploadW4Matrix(gemm::PackW4Stacked(run), /*silu_pair=*/false, lin->k, m.get()));
    } else {
      SPAR_RETURN_IF_ERROR(UploadStoredMatrix(src.parts[i], layout, m.get()));
    }
    lin->n_total += m->n();
    lin->parts.push_back(std::move(m));
    i = next;
  }
  lin->fp32_out = src.fp32_output;
  return std::unique_ptr<Weight>(std::move(lin));
}

absl::StatusOr<std::unique_ptr<Weight>> UploadVector(const TensorView& src) {
  auto v = std::make_unique<CudaVector>();
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloat(src));
  v->n = static_cast<int64_t>(f.size());
  const auto b = ToBf16(f);
  SPAR_RETURN_IF_ERROR(v->bf16.Upload(b.data(), b.size() * 2));
  SPAR_RETURN_IF_ERROR(v->f32.Upload(f.data(), f.size() * 4));
  return std::unique_ptr<Weight>(std::move(v));
}

absl::StatusOr<std::unique_ptr<Weight>> UploadEmbedding(const TensorView& src) {
  auto e = std::make_unique<CudaEmbedding>();
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloat(src));
  e->vocab = src.shape[0];
  e->dim = src.shape[1];
  const auto b = ToBf16(f);
  SPAR_RETURN_IF_ERROR(e->table.Upload(b.data(), b.size() * 2));
  return std::unique_ptr<Weight>(std::move(e));
}

absl::StatusOr<std::unique_ptr<Weight>> UploadAbsorb(const AbsorbSource& src) {
  SPAR_ASSIGN_OR_RETURN(std::vector<float> kv_b, MatrixToFloat(src.kv_b));
  const int64_t per_head = src.nope_dim + src.v_dim;
  const int64_t begin = static_cast<int64_t>(src.head_begin) * per_head * src.kv_lora_rank;
  const int64_t count = static_cast<int64_t>(src.heads) * per_head * src.kv_lora_rank;
  if (src.kv_lora_rank != kLatentNopeDim || begin + count > static_cast<int64_t>(kv_b.size())) {
    return absl::InvalidArgumentError(absl::StrCat("kv_b \"", src.kv_b.weight.name, "\" does not match ", src.heads,
                                                   " heads x ", per_head, " x ", kLatentNopeDim));
  }
  auto a = std::make_unique<CudaAbsorb>();
  const auto b = ToBf16(std::vector<float>(kv_b.begin() + begin, kv_b.begin() + begin + count));
  SPAR_RETURN_IF_ERROR(a->kv_b.Upload(b.data(), b.size() * 2));
  a->w.kv_b = a->kv_b.as<__nv_bfloat16>();
  a->w.heads = src.heads;
  a->w.nope_dim = src.nope_dim;
  a->w.v_dim = src.v_dim;
  return std::unique_ptr<Weight>(std::move(a));
}

absl::StatusOr<std::unique_ptr<Weight>> UploadMlp(const MlpSource& src, GemmWeightLayout layout) {
  auto m = std::make_unique<CudaMlp>();
  SPAR_RETURN_IF_ERROR(UploadMlpInto(src, layout, m.get()));
  return std::unique_ptr<Weight>(std::move(m));
}

absl::StatusOr<std::unique_ptr<Weight>> UploadMoe(const MoeSource& src, GemmWeightLayout layout) {
  auto moe = std::make_unique<CudaMoe>();
  MatrixSource router;
  router.weight = src.router;
  // Row-major whatever `layout`: the one-token router GEMV reads its rows.
  SPAR_RETURN_IF_ERROR(UploadMatrix(router, GemmWeightLayout::kRowMajor, &moe->router));
  SPAR_ASSIGN_OR_RETURN(std::vector<float> bias, TensorToFloat(src.correction_bias));
  SPAR_RETURN_IF_ERROR(moe->bias.Upload(bias.data(), bias.size() * 4));
  if (src.experts.empty()) return absl::InvalidArgumentError("MoE layer without local experts");
  std::vector<const MatrixSource*> gate, up, down;
  for (const auto& e : src.experts) {
    gate.push_back(&e.gate);
    up.push_back(&e.up);
    down.push_back(&e.down);
  }
  // 4-bit experts: gate and up as SiLU pairs in moe->gate, down alone; a
  // projection the kernel cannot take goes bf16 (each on its own).
  bool pair = false, down_4bit = false;
  if (src.experts[0].gate.quant && src.experts[0].up.quant) {
    SPAR_ASSIGN_OR_RETURN(pair, PackExpertsW4(gate, &up, &moe->gate));
  }
  if (src.experts[0].down.quant) {
    SPAR_ASSIGN_OR_RETURN(down_4bit, PackExpertsW4(down, nullptr, &moe->down));
  }
  if (!pair) {
    moe->gate = PackedExperts();
    SPAR_RETURN_IF_ERROR(PackExperts(gate, layout, &moe->gate));
    SPAR_RETURN_IF_ERROR(PackExperts(up, layout, &moe->up));
  }
  if (!down_4bit) SPAR_RETURN_IF_ERROR(PackExperts(down, layout, &moe->down));
  moe->num_local = static_cast<int>(src.experts.size());
  moe->expert_begin = src.expert_begin;
  moe->inter = src.experts[0].gate.rows();
  moe->hidden = src.experts[0].gate.cols();
  if (src.shared) {
    moe->shared = std::make_unique<CudaMlp>();
    SPAR_RETURN_IF_ERROR(UploadMlpInto(*src.shared, layout, moe->shared.get()));
  }
  moe->route.num_experts = src.num_experts;
  moe->route.top_k = src.top_k;
  moe->route.n_group = src.n_group;
  moe->route.topk_group = src.topk_group;
  moe->route.renormalize = src.renormalize;
  moe->route.routed_scaling = src.routed_scaling;
  return std::unique_ptr<Weight>(std::move(moe));
}

}  // namespace spar
