// Decode-side instances of the W8A16 tile GEMM (8, 16 and 32-token tiles,
// narrow and wide stages).
// Split from the prefill instances so the two compile in parallel.
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/gemm/w8a16_gemm_kernel.cuh"

namespace spar::gemm::internal {

// Template arguments: tokens, rows, warps along rows, warps along tokens,
// stages, 64-byte slices per row per stage, min blocks per SM. Must match
// kConfigs in gemm_config.cc (the launcher compares KernelSmemBytes with
// TileConfig::smem_bytes()).
cudaError_t LaunchGemmT8(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<8, 64, 4, 1, 8, 1, 4>(p, grid, stream);
}
cudaError_t LaunchGemmT16(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<16, 64, 4, 1, 8, 1, 4>(p, grid, stream);
}
cudaError_t LaunchGemmT32(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<32, 64, 4, 1, 6, 1, 4>(p, grid, stream);
}
cudaError_t LaunchGemmT8W4(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<8, 64, 4, 1, 4, 4, 2>(p, grid, stream);
}
cudaError_t LaunchGemmT16W4(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<16, 64, 4, 1, 4, 4, 2>(p, grid, stream);
}
int64_t SmemT8() { return GemmTile<8, 64, 4, 1, 8, 1>::kSmemBytes; }
int64_t SmemT16() { return GemmTile<16, 64, 4, 1, 8, 1>::kSmemBytes; }
int64_t SmemT32() { return GemmTile<32, 64, 4, 1, 6, 1>::kSmemBytes; }
int64_t SmemT8W4() { return GemmTile<8, 64, 4, 1, 4, 4>::kSmemBytes; }
int64_t SmemT16W4() { return GemmTile<16, 64, 4, 1, 4, 4>::kSmemBytes; }

}  // namespace spar::gemm::internal
