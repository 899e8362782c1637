// A second way to read a 4-bit checkpoint, for tests: every packed module
// is dequantized by kernels/ref straight from its raw tensors (found by name
// here, not by the engine's loader: no MatrixSource, no weight_convert, no
// ignore-list matching) and written as a plain F32 weight; everything else
// is copied byte for byte and the quantization config is dropped. The cpu
// engine on the copy is the reference its run on the packed checkpoint
// must equal.
#ifndef SPAR_TESTS_ENGINE_DEQUANTIZED_COPY_H_
#define SPAR_TESTS_ENGINE_DEQUANTIZED_COPY_H_

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/mapped_file.h"
#include "base/numeric.h"
#include "engine/checkpoint.h"
#include "engine/weight_convert.h"
#include "gtest/gtest.h"
#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"
#include "nlohmann/json.hpp"

namespace spar::testing {

// Scales widened to fp32 (only the dtype conversion is shared with the engine).
inline std::vector<float> ScalesAsFloat(const TensorView& t) {
  auto f = TensorToFloat(t);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : std::vector<float>();
}

// Counts what was converted, so a test can check that it converted anything.
struct DequantizedCopyStats {
  int modules = 0;
};

inline DequantizedCopyStats WriteDequantizedCopy(const std::string& src, const std::string& dst) {
  DequantizedCopyStats stats;
  using nlohmann::json;
  auto text = ReadFileToString(src + "/config.json");
  EXPECT_TRUE(text.ok());
  json config = json::parse(*text);
  std::string method;
  bool gptq_v1 = false;
  if (config.contains("quantization_config")) {
    const json& q = config["quantization_config"];
    method = q.value("quant_method", "");
    gptq_v1 = method == "gptq" && q.value("checkpoint_format", "gptq") == "gptq";
  }
  config.erase("quantization_config");
  EXPECT_TRUE(WriteStringToFile(dst + "/config.json", config.dump(2)).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    auto t = ReadFileToString(src + "/" + f);
    if (t.ok()) {
      EXPECT_TRUE(WriteStringToFile(dst + "/" + f, *t).ok());
    }
  }
  auto ck = Checkpoint::Open(src);
  EXPECT_TRUE(ck.ok()) << ck.status();
  CheckpointWriter out;
  auto get = [&](const std::string& name) {
    auto t = (*ck)->Get(name);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  };
  auto write_f32 = [&](const std::string& module, int64_t rows, int64_t cols, const std::vector<float>& w) {
    std::string bytes(reinterpret_cast<const char*>(w.data()), w.size() * 4);
    EXPECT_TRUE(out.AddBytes(module + ".weight", DType::kF32, {rows, cols}, std::move(bytes)).ok());
    ++stats.modules;
  };
  const std::vector<std::string> aux = {".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_zero_point",
                                        ".weight_shape", ".weight_scale_2", ".input_scale"};
  for (const std::string& name : (*ck)->Names()) {
    bool is_aux = false;
    for (const auto& suffix : aux) is_aux |= absl::EndsWith(name, suffix);
    if (is_aux) continue;
    const TensorView t = get(name);
    if (absl::EndsWith(name, ".qweight")) {  // AWQ or GPTQ
      const std::string module = name.substr(0, name.size() - 8);
      const TensorView scales = get(module + ".scales");
      const int64_t n = scales.shape[1];
      const int64_t k = method == "awq" ? t.shape[0] : t.shape[0] * 8;
      const int64_t group = k / scales.shape[0];
      const std::vector<float> s = ScalesAsFloat(scales);
      const TensorView zeros = get(module + ".qzeros");
      const ref::Int4Weights w = method == "awq" ? ref::UnpackAwq(t.data, zeros.data, s.data(), n, k, group)
                                                 : ref::UnpackGptq(t.data, zeros.data, s.data(), n, k, group, gptq_v1);
      std::vector<float> f(static_cast<size_t>(n * k));
      ref::DequantizeInt4(w, 0, n, f.data());
      write_f32(module, n, k, f);
    } else if (absl::EndsWith(name, ".weight_packed")) {  // compressed-tensors
      const std::string module = name.substr(0, name.size() - 14);
      const TensorView shape = get(module + ".weight_shape");
      int64_t dims[2];
      std::memcpy(dims, shape.data, 16);  // make-tiny writes I64
      const TensorView scales = get(module + ".weight_scale");
      const std::vector<float> s = ScalesAsFloat(scales);
      const bool has_zp = (*ck)->Has(module + ".weight_zero_point");
      const uint8_t* zp = has_zp ? get(module + ".weight_zero_point").data : nullptr;
      const ref::Int4Weights w = ref::UnpackPackQuantized(t.data, zp, s.data(), dims[0], dims[1], dims[1] / scales.shape[1]);
      std::vector<float> f(static_cast<size_t>(dims[0] * dims[1]));
      ref::DequantizeInt4(w, 0, dims[0], f.data());
      write_f32(module, dims[0], dims[1], f);
    } else if (t.dtype == DType::kU8 && absl::EndsWith(name, ".weight")) {  // NVFP4
      const std::string module = name.substr(0, name.size() - 7);
      float global;
      std::memcpy(&global, get(module + ".weight_scale_2").data, 4);
      const int64_t n = t.shape[0], k = t.shape[1] * 2;
      const ref::Nvfp4Weights w = ref::UnpackNvfp4(t.data, get(module + ".weight_scale").data, global, n, k);
      std::vector<float> f(static_cast<size_t>(n * k));
      ref::DequantizeNvfp4(w, 0, n, f.data());
      write_f32(module, n, k, f);
    } else {
      EXPECT_TRUE(out.AddBytes(name, t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)).ok());
    }
  }
  EXPECT_TRUE(out.Write(dst).ok());
  return stats;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_DEQUANTIZED_COPY_H_
