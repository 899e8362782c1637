// `spar plan` against the cuda backend: a checkpoint of GLM-5's real layer
// geometry (4 layers: 3 dense, 1 MoE with 256 experts, the 154880-token
// embedding and head, block-FP8) loaded on one GPU; what the planner predicts
// for weights and cache blocks against what the backend allocated.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "services/common/capacity_plan.h"

namespace spar {
namespace {

// Block-FP8 as GLM-5-FP8, and 4-bit layouts (the W4A16 kernel's: codes,
// fp32 scales and uint8 zeros, gate/up pairs, rows padded to 64).
class CapacityPlanGpuTest : public ::testing::TestWithParam<TinyQuant> {};

TEST_P(CapacityPlanGpuTest, PredictsWhatTheCudaBackendAllocates) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  // ~16 GB of weights: in memory where the host has /dev/shm.
  const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : testing::TempDir();
  const std::string dir = base + "/spar_capacity_plan_gpu_test" + std::string(TinyQuantName(GetParam()));
  std::filesystem::remove_all(dir);
  MakeTinyOptions mo;
  mo.geometry = TinyGeometry::kGlm5Full;
  mo.fp8 = GetParam() == TinyQuant::kNone;
  mo.quant = GetParam();
  mo.layers = 4;
  mo.out_dir = dir;
  ASSERT_TRUE(MakeTinyModel(mo).ok());
  constexpr double kUtilization = 0.6;
  constexpr int64_t kMaxModelLen = 32768;
  EngineOptions eo;
  eo.backend = "cuda";
  eo.model.gpu_memory_utilization = kUtilization;
  eo.model.max_model_len = kMaxModelLen;
  auto engine = Engine::Create(dir, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const DeviceMemoryUsage used = (*engine)->model().backend()->device_memory();
  const int64_t blocks = (*engine)->model().num_blocks();
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);

  CapacityOptions o;
  o.gpu_memory_bytes = static_cast<int64_t>(total);
  o.gpu_memory_utilization = kUtilization;
  o.runtime_bytes = used.runtime_bytes;  // measured: the planner's one assumption
  o.max_model_len = kMaxModelLen;
  auto plan = PlanCapacity((*engine)->config(), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const StageCapacity& s = plan->stages[0];
  std::printf("runtime (context, stream) %.3f GiB; weights: planned %.3f GiB, allocated %.3f GiB (%+.2f %%); "
              "cache blocks: planned %lld, allocated %lld (%+.2f %%)\n",
              used.runtime_bytes / 1073741824.0, s.weights.total() / 1073741824.0,
              used.weights_bytes / 1073741824.0,
              100.0 * (static_cast<double>(s.weights.total()) / used.weights_bytes - 1),
              static_cast<long long>(s.cache_blocks), static_cast<long long>(blocks),
              100.0 * (static_cast<double>(s.cache_blocks) / blocks - 1));
  // The allocator rounds each buffer up (2 MiB pages for large ones): the
  // planner may be a little under, never far off.
  EXPECT_NEAR(static_cast<double>(s.weights.total()), static_cast<double>(used.weights_bytes),
              0.02 * used.weights_bytes);
  EXPECT_NEAR(static_cast<double>(s.cache_blocks), static_cast<double>(blocks), 0.02 * blocks);
  EXPECT_EQ(used.cache_bytes, blocks * 64 * s.cache_bytes_per_token);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(WeightForms, CapacityPlanGpuTest,
                         ::testing::Values(TinyQuant::kNone, TinyQuant::kAwq, TinyQuant::kNvfp4),
                         [](const auto& info) {
                           return info.param == TinyQuant::kNone ? std::string("fp8")
                                                                 : std::string(info.param == TinyQuant::kAwq ? "awq" : "nvfp4");
                         });

}  // namespace
}  // namespace spar
