// The make-tiny variants that have transformers goldens in tests/data/goldens.
#ifndef SPAR_TESTS_ENGINE_TINY_VARIANTS_H_
#define SPAR_TESTS_ENGINE_TINY_VARIANTS_H_

#include <sys/stat.h>

#include <string>
#include <vector>

#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar::testing {

struct TinyVariant {
  const char* name;  // also the golden file's name
  ModelArch arch;
  bool fp8;
  int layers = 0;
  const char* indexer_pattern = "";
  TinyQuant quant = TinyQuant::kNone;
};

inline auto AllTinyVariants() {
  return ::testing::Values(TinyVariant{"glm5-bf16", ModelArch::kGlmMoeDsa, false},
                           TinyVariant{"glm5-fp8", ModelArch::kGlmMoeDsa, true},
                           TinyVariant{"dsv32-bf16", ModelArch::kDeepseekV32, false},
                           TinyVariant{"dsv32-fp8", ModelArch::kDeepseekV32, true},
                           // GLM-5.2-style cross-layer top-k sharing.
                           TinyVariant{"glm5-shared", ModelArch::kGlmMoeDsa, false, 4, "FSFS"});
}

// The 4-bit make-tiny variants (tools/device/goldens.sh writes their
// goldens; until they are committed, golden_test skips them).
inline std::vector<TinyVariant> QuantTinyVariants() {
  return {TinyVariant{"glm5-awq", ModelArch::kGlmMoeDsa, false, 0, "", TinyQuant::kAwq},
          TinyVariant{"glm5-gptq", ModelArch::kGlmMoeDsa, false, 0, "", TinyQuant::kGptq},
          TinyVariant{"glm5-int4-ct", ModelArch::kGlmMoeDsa, false, 0, "", TinyQuant::kInt4Ct},
          TinyVariant{"glm5-nvfp4", ModelArch::kGlmMoeDsa, false, 0, "", TinyQuant::kNvfp4}};
}

inline std::string GoldenPath(const TinyVariant& v) { return std::string("tests/data/goldens/") + v.name + ".json"; }

inline bool HasGolden(const TinyVariant& v) {
  struct stat st;
  return ::stat(SourcePath(GoldenPath(v)).c_str(), &st) == 0;
}

// The quantized variants whose golden fixture is in the tree.
inline std::vector<TinyVariant> QuantTinyVariantsWithGoldens() {
  std::vector<TinyVariant> out;
  for (const TinyVariant& v : QuantTinyVariants()) {
    if (HasGolden(v)) out.push_back(v);
  }
  return out;
}

inline std::string TinyVariantTestName(const ::testing::TestParamInfo<TinyVariant>& info) {
  std::string n = info.param.name;
  for (auto& ch : n) {
    if (ch == '-') ch = '_';
  }
  return n;
}

// Writes the variant's checkpoint (seed 0) under a fresh temp dir.
inline std::string MakeTinyVariant(const TinyVariant& v, const std::string& prefix) {
  MakeTinyOptions o;
  o.arch = v.arch;
  o.fp8 = v.fp8;
  o.quant = v.quant;
  o.layers = v.layers;
  o.indexer_pattern = v.indexer_pattern;
  o.out_dir = TempDir(prefix + v.name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_TINY_VARIANTS_H_
