// Prefill-side instances of the W8A16 tile GEMM (64 and 128-token tiles),
// the configuration dispatch, and the grouped (MoE) work-list builder.
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/gemm/w8a16_gemm_kernel.cuh"

namespace spar::gemm::internal {

cudaError_t LaunchGemmT8(const KernelParams& p, dim3 grid, cudaStream_t stream);
cudaError_t LaunchGemmT16(const KernelParams& p, dim3 grid, cudaStream_t stream);
cudaError_t LaunchGemmT32(const KernelParams& p, dim3 grid, cudaStream_t stream);
cudaError_t LaunchGemmT8W4(const KernelParams& p, dim3 grid, cudaStream_t stream);
cudaError_t LaunchGemmT16W4(const KernelParams& p, dim3 grid, cudaStream_t stream);
int64_t SmemT8();
int64_t SmemT16();
int64_t SmemT32();
int64_t SmemT8W4();
int64_t SmemT16W4();

namespace {

cudaError_t LaunchGemmT64(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<64, 64, 2, 2, 6, 1, 3>(p, grid, stream);
}
// One block of 8 warps per SM: ~180 registers per thread, no spills.
cudaError_t LaunchGemmT128(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<128, 128, 4, 2, 5, 1, 1>(p, grid, stream);
}
cudaError_t LaunchGemmT64W2(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<64, 64, 2, 2, 4, 2, 2>(p, grid, stream);
}
// Two blocks per SM: registers capped at 128 (ptxas spills ~130 bytes).
cudaError_t LaunchGemmT128B2(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<128, 128, 4, 2, 4, 1, 2>(p, grid, stream);
}
cudaError_t LaunchGemmT128W2(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchTile<128, 128, 4, 2, 3, 2, 1>(p, grid, stream);
}

// One thread per expert: tiles = ceil(rows / block_tokens), block-wide
// exclusive scan (two levels of warp shuffles), then each expert writes its
// entries. Launched with 1024 threads.
__global__ void GroupedWorkListKernel(const int32_t* __restrict__ offsets, int num_experts, int block_tokens,
                                      int4* __restrict__ work, int32_t* __restrict__ work_count) {
  __shared__ int warp_sums[32];
  const int e = threadIdx.x;
  const int lane = e & 31, warp = e >> 5;
  int begin = 0, rows = 0;
  if (e < num_experts) {
    begin = offsets[e];
    rows = offsets[e + 1] - begin;
  }
  const int tiles = (rows + block_tokens - 1) / block_tokens;
  // Inclusive scan inside the warp.
  int incl = tiles;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    int s = lane < nw ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += v;
    }
    if (lane < nw) warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const int first = (warp > 0 ? warp_sums[warp - 1] : 0) + incl - tiles;
  for (int i = 0; i < tiles; ++i) {
    const int r0 = i * block_tokens;
    work[first + i] = make_int4(e, begin + r0, min(block_tokens, rows - r0), 0);
  }
  if (e == blockDim.x - 1) *work_count = warp_sums[(blockDim.x >> 5) - 1];
}

}  // namespace

int64_t KernelSmemBytes(TileConfigId id) {
  switch (id) {
    case TileConfigId::kT8:
      return SmemT8();
    case TileConfigId::kT16:
      return SmemT16();
    case TileConfigId::kT32:
      return SmemT32();
    case TileConfigId::kT64:
      return GemmTile<64, 64, 2, 2, 6, 1>::kSmemBytes;
    case TileConfigId::kT128:
      return GemmTile<128, 128, 4, 2, 5, 1>::kSmemBytes;
    case TileConfigId::kT8W4:
      return SmemT8W4();
    case TileConfigId::kT16W4:
      return SmemT16W4();
    case TileConfigId::kT64W2:
      return GemmTile<64, 64, 2, 2, 4, 2>::kSmemBytes;
    case TileConfigId::kT128B2:
      return GemmTile<128, 128, 4, 2, 4, 1>::kSmemBytes;
    case TileConfigId::kT128W2:
      return GemmTile<128, 128, 4, 2, 3, 2>::kSmemBytes;
  }
  return -1;
}

cudaError_t LaunchGemmKernel(TileConfigId id, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  switch (id) {
    case TileConfigId::kT8:
      return LaunchGemmT8(p, grid, stream);
    case TileConfigId::kT16:
      return LaunchGemmT16(p, grid, stream);
    case TileConfigId::kT32:
      return LaunchGemmT32(p, grid, stream);
    case TileConfigId::kT64:
      return LaunchGemmT64(p, grid, stream);
    case TileConfigId::kT128:
      return LaunchGemmT128(p, grid, stream);
    case TileConfigId::kT8W4:
      return LaunchGemmT8W4(p, grid, stream);
    case TileConfigId::kT16W4:
      return LaunchGemmT16W4(p, grid, stream);
    case TileConfigId::kT64W2:
      return LaunchGemmT64W2(p, grid, stream);
    case TileConfigId::kT128B2:
      return LaunchGemmT128B2(p, grid, stream);
    case TileConfigId::kT128W2:
      return LaunchGemmT128W2(p, grid, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGroupedWorkList(const int32_t* expert_offsets, int num_experts, int block_tokens, int32_t* work,
                                  int32_t* work_count, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024) return cudaErrorInvalidValue;
  GroupedWorkListKernel<<<1, 1024, 0, stream>>>(expert_offsets, num_experts, block_tokens,
                                                reinterpret_cast<int4*>(work), work_count);
  return cudaGetLastError();
}

}  // namespace spar::gemm::internal
