#include "engine/tiny_quant.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Scales in the dtype the tools store them in: fp16 (AWQ, GPTQ) or bf16
// (llm-compressor keeps the model's dtype).
std::string ScaleBytes(const std::vector<float>& s, DType dtype) {
  std::vector<uint16_t> h(s.size());
  for (size_t i = 0; i < s.size(); ++i) h[i] = dtype == DType::kBF16 ? FloatToBf16(s[i]) : FloatToHalf(s[i]);
  return Bytes(h);
}

std::string F32Bytes(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Fills 32-bit words from per-chunk random streams on all cores.
void FillRandomWords(uint8_t* dst, size_t n, uint64_t seed) {
  constexpr int64_t kChunk = 1 << 16;
  ParallelFor((static_cast<int64_t>(n) + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      Rng rng(SplitMix64(seed + static_cast<uint64_t>(c)));
      const size_t end = std::min(n, static_cast<size_t>((c + 1) * kChunk));
      for (size_t i = static_cast<size_t>(c * kChunk); i < end; i += 8) {
        const uint64_t bits = rng.NextU64();
        std::memcpy(dst + i, &bits, std::min<size_t>(8, end - i));
      }
    }
  });
}

void FillConstant16(uint8_t* dst, size_t n, uint16_t v) {
  for (size_t i = 0; i + 2 <= n; i += 2) std::memcpy(dst + i, &v, 2);
}

void FillConstant32(uint8_t* dst, size_t n, uint32_t v) {
  for (size_t i = 0; i + 4 <= n; i += 4) std::memcpy(dst + i, &v, 4);
}

}  // namespace

absl::StatusOr<TinyQuant> ParseTinyQuant(absl::string_view name) {
  if (name.empty()) return TinyQuant::kNone;
  if (name == "awq") return TinyQuant::kAwq;
  if (name == "gptq") return TinyQuant::kGptq;
  if (name == "int4-ct") return TinyQuant::kInt4Ct;
  if (name == "nvfp4") return TinyQuant::kNvfp4;
  return absl::InvalidArgumentError(absl::StrCat("--quant must be awq, gptq, int4-ct or nvfp4, got \"", name, "\""));
}

absl::string_view TinyQuantName(TinyQuant quant) {
  switch (quant) {
    case TinyQuant::kNone:
      return "";
    case TinyQuant::kAwq:
      return "awq";
    case TinyQuant::kGptq:
      return "gptq";
    case TinyQuant::kInt4Ct:
      return "int4-ct";
    case TinyQuant::kNvfp4:
      return "nvfp4";
  }
  return "";
}

absl::StatusOr<WeightFormat> TinyWeightFormat(TinyQuant quant, int group_size, bool mtp) {
  // The MTP layer's modules no tool converts (substrings of their names).
  const std::vector<std::string> mtp_kept =
      mtp ? std::vector<std::string>{"eh_proj", "shared_head", "embed_tokens"} : std::vector<std::string>{};
  json q;
  switch (quant) {
    case TinyQuant::kNone:
      return absl::InvalidArgumentError("no 4-bit format requested");
    case TinyQuant::kAwq:
      q = {{"quant_method", "awq"},        {"bits", 4},
           {"group_size", group_size},    {"zero_point", true},
           {"version", "gemm"},           {"modules_to_not_convert", {"self_attn.indexer"}}};
      for (const std::string& m : mtp_kept) q["modules_to_not_convert"].push_back(m);
      return ParseWeightFormat(q.dump());
    case TinyQuant::kGptq:
      q = {{"quant_method", "gptq"}, {"bits", 4},          {"group_size", group_size}, {"desc_act", false},
           {"sym", true},            {"static_groups", false}, {"true_sequential", true},  {"damp_percent", 0.01},
           {"lm_head", false},       {"checkpoint_format", "gptq"}};
      if (mtp) q["modules_to_not_convert"] = mtp_kept;
      return ParseWeightFormat(q.dump());
    case TinyQuant::kInt4Ct: {
      const json experts = {{"num_bits", 4},      {"type", "int"},       {"symmetric", true},
                            {"strategy", "group"}, {"group_size", group_size}, {"dynamic", false},
                            {"actorder", nullptr}, {"observer", "minmax"}, {"block_structure", nullptr}};
      const json dense = {{"num_bits", 4},         {"type", "int"},         {"symmetric", false},
                          {"strategy", "channel"}, {"group_size", nullptr}, {"dynamic", false},
                          {"actorder", nullptr},   {"observer", "minmax"},  {"block_structure", nullptr}};
      q = {{"quant_method", "compressed-tensors"},
           {"format", "pack-quantized"},
           {"quantization_status", "compressed"},
           {"version", "0.10.2"},
           {"global_compression_ratio", nullptr},
           {"kv_cache_scheme", nullptr},
           {"sparsity_config", json::object()},
           {"config_groups",
            {{"group_0",
              {{"targets", {"re:.*mlp\\.experts\\..*"}},
               {"weights", experts},
               {"input_activations", nullptr},
               {"output_activations", nullptr}}},
             {"group_1",
              {{"targets",
                {"re:.*self_attn\\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)$",
                 "re:.*mlp\\.(shared_experts\\.)?(gate|up|down)_proj$"}},
               {"weights", dense},
               {"input_activations", nullptr},
               {"output_activations", nullptr}}}}},
           {"ignore", {"lm_head", "re:.*mlp\\.gate$", "re:.*self_attn\\.indexer\\..*"}}};
      return ParseWeightFormat(q.dump());
    }
    case TinyQuant::kNvfp4: {
      json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.41.0"}}},
                 {"quantization",
                  {{"quant_algo", "NVFP4"},
                   {"kv_cache_quant_algo", nullptr},
                   {"group_size", 16},
                   {"exclude_modules", {"lm_head", "*mlp.gate", "model.layers.0.self_attn*", "*.self_attn.indexer*"}}}}};
      for (const std::string& m : mtp_kept) hf["quantization"]["exclude_modules"].push_back("*" + m + "*");
      return ParseHfQuantConfig(hf.dump());
    }
  }
  return absl::InvalidArgumentError("unknown 4-bit format");
}

absl::Status AddQuantizedMatrix(CheckpointWriter& writer, const QuantScheme& s, const std::string& module,
                                const std::vector<float>& w, int64_t rows, int64_t cols) {
  const int64_t g = s.GroupFor(cols);
  if (cols % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat("make-tiny: group ", g, " does not divide ", module, "'s ", cols, " columns"));
  }
  const int64_t groups = cols / g;
  switch (s.layout) {
    case QuantLayout::kAwq: {
      const ref::AwqPacked p = ref::PackAwq(ref::QuantizeInt4(w.data(), rows, cols, g, /*symmetric=*/false));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".qweight", DType::kI32, {cols, rows / 8}, Bytes(p.qweight)));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".qzeros", DType::kI32, {groups, rows / 8}, Bytes(p.qzeros)));
      return writer.AddBytes(module + ".scales", DType::kF16, {groups, rows}, ScaleBytes(p.scales, DType::kF16));
    }
    case QuantLayout::kGptq: {
      // GPTQ always stores zero points; the tiny config says sym: true, so
      // they are all the midpoint 8 (stored 7 in v1).
      const ref::Int4Weights q = ref::QuantizeInt4(w.data(), rows, cols, g, /*symmetric=*/true);
      ref::GptqPacked p;
      if (!ref::PackGptq(q, s.zero_plus_one, &p)) return absl::InternalError("make-tiny: GPTQ v1 cannot store a zero of 0");
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".qweight", DType::kI32, {cols / 8, rows}, Bytes(p.qweight)));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".qzeros", DType::kI32, {groups, rows / 8}, Bytes(p.qzeros)));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".scales", DType::kF16, {groups, rows}, ScaleBytes(p.scales, DType::kF16)));
      std::vector<int32_t> g_idx(static_cast<size_t>(cols));
      for (int64_t k = 0; k < cols; ++k) g_idx[k] = static_cast<int32_t>(k / g);
      return writer.AddBytes(module + ".g_idx", DType::kI32, {cols}, Bytes(g_idx));
    }
    case QuantLayout::kPackQuantized: {
      const bool symmetric = !s.zero_points;
      const ref::PackQuantizedPacked p =
          ref::PackPackQuantized(ref::QuantizeInt4(w.data(), rows, cols, g, symmetric, /*scale_bf16=*/true), symmetric);
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_packed", DType::kI32, {rows, (cols + 7) / 8}, Bytes(p.weight_packed)));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_scale", DType::kBF16, {rows, groups}, ScaleBytes(p.scales, DType::kBF16)));
      const std::vector<int64_t> shape = {rows, cols};
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_shape", DType::kI64, {2}, Bytes(shape)));
      if (symmetric) return absl::OkStatus();
      return writer.AddBytes(module + ".weight_zero_point", DType::kI32, {(rows + 7) / 8, groups}, Bytes(p.zero_point));
    }
    case QuantLayout::kNvfp4: {
      const ref::Nvfp4Weights q = ref::QuantizeNvfp4(w.data(), rows, cols);
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight", DType::kU8, {rows, cols / 2}, Bytes(ref::PackNvfp4(q))));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, Bytes(q.scales)));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_scale_2", DType::kF32, {}, F32Bytes(q.global_scale)));
      // W4A4's activation scale; spar runs bf16 activations and ignores it.
      return writer.AddBytes(module + ".input_scale", DType::kF32, {}, F32Bytes(1.0f));
    }
  }
  return absl::InternalError("unknown layout");
}

absl::Status AddRandomQuantizedMatrix(CheckpointWriter& writer, const QuantScheme& s, const std::string& module,
                                      int64_t rows, int64_t cols, uint64_t seed, float spread) {
  const int64_t g = s.GroupFor(cols), groups = cols / g;
  auto words = [seed](uint8_t* dst, size_t n) { FillRandomWords(dst, n, seed); };
  // Codes are uniform in 0..15 around a zero of 8: scale spread / 8.
  const float scale = spread / 8.0f;
  switch (s.layout) {
    case QuantLayout::kAwq:
    case QuantLayout::kGptq: {
      const bool awq = s.layout == QuantLayout::kAwq;
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".qweight", DType::kI32,
                                      awq ? std::vector<int64_t>{cols, rows / 8} : std::vector<int64_t>{cols / 8, rows}, words));
      const uint32_t zero_word = s.zero_plus_one ? 0x77777777u : 0x88888888u;
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".qzeros", DType::kI32, {groups, rows / 8},
                                      [zero_word](uint8_t* dst, size_t n) { FillConstant32(dst, n, zero_word); }));
      const uint16_t h = FloatToHalf(scale);
      return writer.Add(module + ".scales", DType::kF16, {groups, rows}, [h](uint8_t* dst, size_t n) { FillConstant16(dst, n, h); });
    }
    case QuantLayout::kPackQuantized: {
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".weight_packed", DType::kI32, {rows, (cols + 7) / 8}, words));
      const uint16_t b = FloatToBf16(scale);
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".weight_scale", DType::kBF16, {rows, groups},
                                      [b](uint8_t* dst, size_t n) { FillConstant16(dst, n, b); }));
      const std::vector<int64_t> shape = {rows, cols};
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_shape", DType::kI64, {2}, Bytes(shape)));
      if (!s.zero_points) return absl::OkStatus();
      return writer.Add(module + ".weight_zero_point", DType::kI32, {(rows + 7) / 8, groups},
                        [](uint8_t* dst, size_t n) { FillConstant32(dst, n, 0x88888888u); });
    }
    case QuantLayout::kNvfp4: {
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".weight", DType::kU8, {rows, cols / 2}, words));
      // Block scale 1.0 (e4m3 0x38); |e2m1| <= 6, so global = spread / 6.
      SPAR_RETURN_IF_ERROR(writer.Add(module + ".weight_scale", DType::kF8E4M3, {rows, cols / 16},
                                      [](uint8_t* dst, size_t n) { std::memset(dst, 0x38, n); }));
      SPAR_RETURN_IF_ERROR(writer.AddBytes(module + ".weight_scale_2", DType::kF32, {}, F32Bytes(spread / 6.0f)));
      return writer.AddBytes(module + ".input_scale", DType::kF32, {}, F32Bytes(1.0f));
    }
  }
  return absl::InternalError("unknown layout");
}

}  // namespace spar
