// The cuda-vs-cpu parity fixture shared by cuda_parity_test.cc (logits,
// greedy picks, cache formats, selections) and cuda_parity_steps_test.cc
// (decode steps as graphs, overlapped branches, the separate indexer query):
// one test suite over every make-tiny variant, instantiated in the first.
#ifndef SPAR_TESTS_ENGINE_CUDA_PARITY_H_
#define SPAR_TESTS_ENGINE_CUDA_PARITY_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"
#include "tests/engine/tiny_variants.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar::testing {

inline constexpr int kDense = 4096;  // index_topk above every test context

// `dtypes` as --kv-cache-dtype / --indexer-cache-dtype (default auto: the
// cpu's fp32 caches, the cuda backend's bf16 latent rows and FP8 keys).
inline std::unique_ptr<Engine> MakeEngine(const std::string& dir, const std::string& backend, int topk_override = 0,
                                          CacheDtypes dtypes = {}, int64_t num_blocks = 64,
                                          bool urgent_branch = BackendOptions{}.urgent_branch_priority,
                                          IndexerQueryGemm indexer_query = ModelOptions{}.indexer_query,
                                          GemmWeightTiling tiling = BackendOptions{}.gemm_weight_tiling) {
  EngineOptions eo;
  eo.backend = backend;
  eo.backend_options.urgent_branch_priority = urgent_branch;
  eo.backend_options.gemm_weight_tiling = tiling;
  eo.model.indexer_query = indexer_query;
  eo.model.num_blocks = num_blocks;
  eo.model.index_topk_override = topk_override;
  eo.cache_dtypes = dtypes;
  auto e = Engine::Create(dir, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// The golden prompts of a make-tiny variant (the bf16 goldens' for a 4-bit
// variant without its own) and the variant's checkpoint.
class CudaParityTest : public ::testing::TestWithParam<TinyVariant> {
 protected:
  void SetUp() override {
    SPAR_REQUIRE_GPU();
    const TinyVariant v = GetParam();
    dir_ = MakeTinyVariant(v, "cuda_parity_");
    // A 4-bit variant without its own goldens yet runs on the bf16 goldens'
    // prompts (the same prompt draw); only the transformers report needs its own.
    has_golden_ = HasGolden(v);
    const TinyVariant prompts_from = has_golden_ ? v : TinyVariant{"glm5-bf16", v.arch, false};
    golden_ = nlohmann::json::parse(ReadSource(GoldenPath(prompts_from)));
    for (const auto& p : golden_["prompts"]) prompts_.push_back(p["ids"].get<std::vector<int32_t>>());
  }

  // OverlappedBranchesEqualSerialSteps with the side stream urgent or not.
  void ExpectOverlappedBranchesEqualSerial(bool urgent, IndexerQueryGemm indexer_query = ModelOptions{}.indexer_query);
  // SeparateIndexerQueryGemmKeepsParityWithCpu for one placement.
  void ExpectSeparateIndexerQueryKeepsParity(IndexerQueryGemm placement);

  std::string dir_;
  bool has_golden_ = true;
  nlohmann::json golden_;
  std::vector<std::vector<int32_t>> prompts_;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_CUDA_PARITY_H_
