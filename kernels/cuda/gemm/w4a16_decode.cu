// The W4A16 decode kernel's instances, one per decode row of kW4Configs and
// weight type (its own translation unit: it compiles beside w4a16_gemm.cu).
#include <atomic>
#include <utility>

#include "kernels/cuda/common/smem_residency.h"
#include "kernels/cuda/gemm/w4a16_configs.h"
#include "kernels/cuda/gemm/w4a16_decode_kernel.cuh"

namespace spar::gemm::w4 {
namespace {

template <int kId, bool kFp4>
auto DecodeKernelOf() {
  constexpr W4Config c = kW4Configs[kId];
  return W4A16DecodeKernel<c.warps, c.mi, c.nj, c.xtok, c.stages, kFp4, c.min_blocks>;
}

template <int kId, bool kFp4>
int DecodeSmemOf() {
  constexpr W4Config c = kW4Configs[kId];
  return DecodeTile<c.warps, c.mi, c.nj, c.xtok, c.stages, kFp4>::kSmemBytes;
}

template <int... kIds>
cudaError_t LaunchDecodeIn(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream,
                           std::integer_sequence<int, kIds...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        constexpr W4Config c = kW4Configs[kIds];
        if constexpr (c.decode) {
          if (id == kIds) {
            result = fp4 ? LaunchW4Decode<c.warps, c.mi, c.nj, c.xtok, c.stages, true, c.min_blocks>(p, grid, stream)
                         : LaunchW4Decode<c.warps, c.mi, c.nj, c.xtok, c.stages, false, c.min_blocks>(p, grid, stream);
          }
        }
      }(),
      ...);
  return result;
}

template <int... kIds>
int BlocksPerSmIn(int id, bool fp4, std::integer_sequence<int, kIds...>) {
  int blocks = 1;
  (
      [&] {
        constexpr W4Config c = kW4Configs[kIds];
        if constexpr (c.decode) {
          if (id == kIds) {
            // The launch's request (LaunchWithSmem pads it under SPAR_SMEM_PER_SM_KB).
            const int smem = static_cast<int>(LaunchSmemBytes(fp4 ? DecodeSmemOf<kIds, true>() : DecodeSmemOf<kIds, false>()));
            const auto kernel = fp4 ? DecodeKernelOf<kIds, true>() : DecodeKernelOf<kIds, false>();
            if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, c.warps * 32, smem) != cudaSuccess) {
              blocks = 1;
            }
          }
        }
      }(),
      ...);
  return blocks < 1 ? 1 : blocks;
}

using AllIds = std::make_integer_sequence<int, kW4NumConfigs>;

}  // namespace

cudaError_t LaunchDecodeConfig(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchDecodeIn(id, fp4, p, grid, stream, AllIds{});
}

int DecodeConfigBlocksPerSm(int id, bool fp4) {
  // [device][config][fp4]; 0 = not asked yet. The occupancy query is a
  // driver call: once per device and instance, not per launch.
  constexpr int kDevices = 16;
  static std::atomic<int> cache[kDevices][kW4NumConfigs][2] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices || id < 0 || id >= kW4NumConfigs) {
    return BlocksPerSmIn(id, fp4, AllIds{});
  }
  std::atomic<int>& slot = cache[dev][id][fp4 ? 1 : 0];
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    v = BlocksPerSmIn(id, fp4, AllIds{});
    slot.store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace spar::gemm::w4
