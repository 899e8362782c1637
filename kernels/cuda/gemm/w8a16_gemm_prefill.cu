// Prefill-side instances of the W8A16 tile GEMM (the configurations of more
// than 32 tokens of kTileConfigs, w8a16_gemm_tiles.cuh), the configuration
// dispatch, and the grouped (MoE) work-list builder.
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/gemm/w8a16_gemm_tiles.cuh"

namespace spar::gemm::internal {
namespace {

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
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kNumTileConfigs) return -1;
  return IsDecodeTile(i) ? DecodeTileSmemBytes(i) : SmemHalf</*kDecodeHalf=*/false>(i, AllTileIds());
}

cudaError_t LaunchGemmKernel(TileConfigId id, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kNumTileConfigs) return cudaErrorInvalidValue;
  return IsDecodeTile(i) ? LaunchDecodeTile(i, p, grid, stream)
                         : LaunchHalf</*kDecodeHalf=*/false>(i, p, grid, stream, AllTileIds());
}

cudaError_t LaunchGroupedWorkList(const int32_t* expert_offsets, int num_experts, int block_tokens, int32_t* work,
                                  int32_t* work_count, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024) return cudaErrorInvalidValue;
  GroupedWorkListKernel<<<1, 1024, 0, stream>>>(expert_offsets, num_experts, block_tokens,
                                                reinterpret_cast<int4*>(work), work_count);
  return cudaGetLastError();
}

}  // namespace spar::gemm::internal
