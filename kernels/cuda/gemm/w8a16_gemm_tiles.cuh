// The kernel of each tile configuration, instantiated from its row of
// kTileConfigs (gemm_config.h): the template arguments are read from the
// table, never written out again. The configurations are compiled in two
// translation units (w8a16_gemm_decode.cu: the tiles of <= 32 tokens,
// w8a16_gemm_prefill.cu: the rest) so the two halves compile in parallel;
// each dispatches its own half by id.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_TILES_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_TILES_CUH_

#include <utility>

#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/w8a16_gemm_kernel.cuh"

namespace spar::gemm::internal {

constexpr bool IsDecodeTile(int id) { return kTileConfigs[id].block_tokens <= 32; }

template <int kId>
cudaError_t LaunchTileConfig(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  constexpr TileConfig c = kTileConfigs[kId];
  return LaunchTile<c.block_tokens, c.block_rows, c.warps_rows, c.warps_tokens, c.stages, c.sub,
                    c.min_blocks_per_sm, c.fold_pow2>(p, grid, stream);
}

template <int kId>
constexpr int64_t TileConfigSmemBytes() {
  constexpr TileConfig c = kTileConfigs[kId];
  return GemmTile<c.block_tokens, c.block_rows, c.warps_rows, c.warps_tokens, c.stages, c.sub>::kSmemBytes;
}

// Launch / shared-memory size of configuration `id` if it belongs to this
// half (kDecodeHalf), else cudaErrorInvalidValue / -1.
template <bool kDecodeHalf, int... kIds>
cudaError_t LaunchHalf(int id, const KernelParams& p, dim3 grid, cudaStream_t stream,
                       std::integer_sequence<int, kIds...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        if constexpr (IsDecodeTile(kIds) == kDecodeHalf) {
          if (id == kIds) result = LaunchTileConfig<kIds>(p, grid, stream);
        }
      }(),
      ...);
  return result;
}

template <bool kDecodeHalf, int... kIds>
int64_t SmemHalf(int id, std::integer_sequence<int, kIds...>) {
  int64_t bytes = -1;
  (
      [&] {
        if constexpr (IsDecodeTile(kIds) == kDecodeHalf) {
          if (id == kIds) bytes = TileConfigSmemBytes<kIds>();
        }
      }(),
      ...);
  return bytes;
}

using AllTileIds = std::make_integer_sequence<int, kNumTileConfigs>;

// Defined in w8a16_gemm_decode.cu.
cudaError_t LaunchDecodeTile(int id, const KernelParams& p, dim3 grid, cudaStream_t stream);
int64_t DecodeTileSmemBytes(int id);

}  // namespace spar::gemm::internal

#endif  // SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_TILES_CUH_
