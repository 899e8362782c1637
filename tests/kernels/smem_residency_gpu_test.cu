// Shared-memory residency emulation on the GPU (kernels/cuda/common/
// smem_residency.h): with SPAR_SMEM_PER_SM_KB=164 the padded launches of
// every W8A16 tile configuration's shared memory leave as many blocks an SM
// as an A100 holds (the occupancy calculator of this GPU), launches through
// cuda::LaunchWithSmem run, and CurrentDeviceInfo() reports the A100 size.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/smem_residency.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kA100 = 167936;

struct TouchParams {
  int* out;
  int words;  // of shared memory the launch asked for
};

// Writes its block's first and last shared-memory words through, so the
// launch is checked to have run with the memory it asked for.
__global__ void __launch_bounds__(kThreads) TouchSmem(const TouchParams p) {
  extern __shared__ int smem[];
  if (threadIdx.x == 0) {
    smem[0] = static_cast<int>(blockIdx.x) + 1;
    smem[p.words - 1] = 7;
    p.out[blockIdx.x] = smem[0] + smem[p.words - 1];
  }
}

TEST(Sm80_SmemResidency, PaddedLaunchesHoldTheA100sBlocks) {
  SPAR_REQUIRE_GPU();
  // Before anything reads it (EmulatedSmemPerSm reads it once a process).
  ASSERT_EQ(setenv("SPAR_SMEM_PER_SM_KB", "164", 1), 0);
  ASSERT_EQ(EmulatedSmemPerSm(), kA100);
  int dev = 0, per_sm = 0, reserved = 0, max_block = 0;
  SPAR_ASSERT_CUDA(cudaGetDevice(&dev));
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&max_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const SmemFigures real{per_sm, reserved, max_block};
  EXPECT_EQ(CurrentDeviceInfo().smem_per_sm, per_sm < kA100 ? per_sm : kA100);
  testing::DeviceArray<int> out(64);
  for (const int64_t bytes : {30784, 49232, 65584, 73808, 98368, 122936, 147520}) {
    const int64_t padded = LaunchSmemBytes(bytes);
    ASSERT_EQ(padded, SmemForResidency(bytes, real, kA100)) << bytes;
    ASSERT_GE(padded, bytes);
    SPAR_ASSERT_CUDA(cudaFuncSetAttribute(TouchSmem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(padded)));
    int blocks = 0;
    SPAR_ASSERT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, TouchSmem, kThreads, static_cast<size_t>(padded)));
    const int64_t a100_blocks = kA100 / (bytes + reserved);
    EXPECT_EQ(blocks, a100_blocks < 2048 / kThreads ? a100_blocks : 2048 / kThreads)
        << bytes << " bytes padded to " << padded;
    out.Poison();
    const int words = static_cast<int>(bytes / 4);
    SPAR_ASSERT_CUDA(cuda::LaunchWithSmem<TouchSmem>(dim3(64), kThreads, static_cast<int>(bytes), nullptr,
                                                     TouchParams{out.get(), words}));
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<int> got = out.Download();
    for (int b = 0; b < 64; ++b) ASSERT_EQ(got[b], b + 8) << bytes;
  }
}

}  // namespace
}  // namespace spar
