// The make-tiny variants that have transformers goldens in tests/data/goldens.
#ifndef SPAR_TESTS_ENGINE_TINY_VARIANTS_H_
#define SPAR_TESTS_ENGINE_TINY_VARIANTS_H_

#include <string>

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
};

inline auto AllTinyVariants() {
  return ::testing::Values(TinyVariant{"glm5-bf16", ModelArch::kGlmMoeDsa, false},
                           TinyVariant{"glm5-fp8", ModelArch::kGlmMoeDsa, true},
                           TinyVariant{"dsv32-bf16", ModelArch::kDeepseekV32, false},
                           TinyVariant{"dsv32-fp8", ModelArch::kDeepseekV32, true},
                           // GLM-5.2-style cross-layer top-k sharing.
                           TinyVariant{"glm5-shared", ModelArch::kGlmMoeDsa, false, 4, "FSFS"});
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
  o.layers = v.layers;
  o.indexer_pattern = v.indexer_pattern;
  o.out_dir = TempDir(prefix + v.name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_TINY_VARIANTS_H_
