// Decode-side instances of the W8A16 tile GEMM: the configurations of <= 32
// tokens of kTileConfigs (w8a16_gemm_tiles.cuh).
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/gemm/w8a16_gemm_tiles.cuh"

namespace spar::gemm::internal {

cudaError_t LaunchDecodeTile(int id, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchHalf</*kDecodeHalf=*/true>(id, p, grid, stream, AllTileIds());
}

int64_t DecodeTileSmemBytes(int id) { return SmemHalf</*kDecodeHalf=*/true>(id, AllTileIds()); }

}  // namespace spar::gemm::internal
