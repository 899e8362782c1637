// The grid arrivals (kernels/cuda/common/grid_arrival.cuh) as a protocol:
// every thread of every block writes values that depend on the launch, and
// the block(s) after the arrival check every other block's values through
// L2 (each launch changes every value, so a stale read cannot match); one
// last block a launch, the counter left zero, two barriers in a row. What
// this does not show: that the release is needed. On an H100 a copy with
// relaxed atomics and loads (no fence at all) passed too (2026-12-06, 5
// repeats): the hardware rarely reorders these without memory stress, so
// the PTX memory model, not this test, is why the arrival is acq_rel.
#include <cstdint>
#include <vector>

#include "kernels/cuda/common/grid_arrival.cuh"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

constexpr int kThreads = 256;
constexpr int kValuesPerThread = 4;

__device__ __forceinline__ uint32_t ValueOf(uint32_t seed, uint32_t block, uint32_t i) {
  uint32_t x = seed * 0x9e3779b9u ^ (block * kThreads * kValuesPerThread + i) * 0x85ebca6bu;
  x ^= x >> 15;
  return x * 0x2c1b3c6du;
}

// Counters: [0] the arrivals (left zero), [1] mismatches seen, [2] last
// blocks seen.
__global__ void __launch_bounds__(kThreads) PublishThenCheckInLastBlock(uint32_t* data, uint32_t* counters,
                                                                        uint32_t seed) {
  __shared__ int is_last;
  const uint32_t block = blockIdx.x, tid = threadIdx.x;
  for (int k = 0; k < kValuesPerThread; ++k) {
    const uint32_t i = k * kThreads + tid;  // warps interleaved: every warp writes every part of the row
    data[block * kThreads * kValuesPerThread + i] = ValueOf(seed, block, i);
  }
  if (!cuda::ArriveIsLast(counters, gridDim.x, is_last)) return;
  uint32_t bad = 0;
  for (uint32_t b = 0; b < gridDim.x; ++b) {
    for (int k = 0; k < kValuesPerThread; ++k) {
      const uint32_t i = k * kThreads + tid;
      bad += __ldcg(data + b * kThreads * kValuesPerThread + i) != ValueOf(seed, b, i);
    }
  }
  if (bad != 0) atomicAdd(counters + 1, bad);
  if (tid == 0) {
    atomicAdd(counters + 2, 1u);
    counters[0] = 0;  // ready for the next launch
  }
}

// Two barriers in a row (cooperative launch): values written before each
// are checked after it, in every block, for every block.
__global__ void __launch_bounds__(kThreads) BarrierPhases(uint32_t* data, uint32_t* counters, uint32_t seed) {
  const uint32_t block = blockIdx.x, tid = threadIdx.x;
  uint32_t bad = 0;
  for (uint32_t phase = 0; phase < 2; ++phase) {
    for (int k = 0; k < kValuesPerThread; ++k) {
      const uint32_t i = k * kThreads + tid;
      data[block * kThreads * kValuesPerThread + i] = ValueOf(seed + phase, block, i);
    }
    cuda::ArriveAndWait(counters, (phase + 1) * gridDim.x);
    // Another block's values, so no thread checks only its own writes.
    const uint32_t b = (block + 1 + tid) % gridDim.x;
    for (int k = 0; k < kValuesPerThread; ++k) {
      const uint32_t i = k * kThreads + (tid * 7 + k) % kThreads;
      bad += __ldcg(data + b * kThreads * kValuesPerThread + i) != ValueOf(seed + phase, b, i);
    }
    // Nobody overwrites the phase's values before every block checked them.
    cuda::ArriveAndWait(counters + 3, (phase + 1) * gridDim.x);
  }
  if (bad != 0) atomicAdd(counters + 1, bad);
}

TEST(Sm80_GridArrival, LastBlockSeesEveryBlocksWrites) {
  SPAR_REQUIRE_GPU();
  int sms = 0;
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  constexpr int kLaunches = 300;
  // More blocks than fit at once, and fewer than one wave.
  for (const int blocks : {2, 37, sms, 3 * sms + 5}) {
    testing::DeviceArray<uint32_t> data(static_cast<size_t>(blocks) * kThreads * kValuesPerThread), counters(3);
    data.Poison();
    SPAR_ASSERT_CUDA(cudaMemset(counters.get(), 0, 3 * sizeof(uint32_t)));
    for (int l = 0; l < kLaunches; ++l) {
      PublishThenCheckInLastBlock<<<blocks, kThreads>>>(data.get(), counters.get(), 1000u + l);
      SPAR_ASSERT_CUDA(cudaGetLastError());
    }
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint32_t> c = counters.Download();
    EXPECT_EQ(c[0], 0u) << blocks << " blocks: the last block resets the counter";
    EXPECT_EQ(c[1], 0u) << blocks << " blocks: values the last block did not see";
    EXPECT_EQ(c[2], static_cast<uint32_t>(kLaunches)) << blocks << " blocks: one last block a launch";
  }
}

TEST(Sm80_GridArrival, ArriveAndWaitOrdersEveryBlocksWrites) {
  SPAR_REQUIRE_GPU();
  int sms = 0, per_sm = 0, coop = 0;
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  if (coop == 0) GTEST_SKIP() << "no cooperative launch on this device";
  SPAR_ASSERT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, BarrierPhases, kThreads, 0));
  ASSERT_GE(per_sm, 1);
  const int blocks = sms * per_sm;  // every block resident: the barrier's requirement
  testing::DeviceArray<uint32_t> data(static_cast<size_t>(blocks) * kThreads * kValuesPerThread), counters(4);
  data.Poison();
  for (int l = 0; l < 100; ++l) {
    SPAR_ASSERT_CUDA(cudaMemset(counters.get(), 0, 4 * sizeof(uint32_t)));
    uint32_t* d = data.get();
    uint32_t* c = counters.get();
    uint32_t seed = 7u * l;
    void* args[] = {&d, &c, &seed};
    SPAR_ASSERT_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(BarrierPhases), blocks, kThreads, args));
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint32_t> got = counters.Download();
    ASSERT_EQ(got[1], 0u) << "launch " << l << " (" << blocks << " blocks): values read before they were published";
    ASSERT_EQ(got[0], 2u * blocks) << "launch " << l << ": every block arrives at both barriers";
  }
}

}  // namespace
}  // namespace spar
