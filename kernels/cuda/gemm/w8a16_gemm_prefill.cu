// Prefill-side instances of the W8A16 tile GEMM (the configurations of more
// than 32 tokens of kTileConfigs, w8a16_gemm_tiles.cuh), the configuration
// dispatch, and the grouped (MoE) work-list builder.
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/gemm/w8a16_gemm_tiles.cuh"

namespace spar::gemm::internal {
namespace {

// Exclusive prefix sum of v over the block (blockDim.x threads, a multiple
// of 32, at most 1024) and, in `total`, the sum of all. Two levels of warp
// shuffles; ends with a barrier, so warp_sums may be reused at once.
__device__ int BlockExclusiveSum(int v, int* warp_sums, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int s = lane < nw ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += u;
    }
    if (lane < nw) warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const int excl = (warp > 0 ? warp_sums[warp - 1] : 0) + incl - v;
  total = warp_sums[nw - 1];
  __syncthreads();
  return excl;
}

// One thread per expert: its entries (tiles of block_tokens rows; with a
// tail list, a last partial tile of fewer than tail_below rows goes there in
// entries of tail_block_tokens rows), placed by block-wide exclusive scans.
// Launched with 1024 threads.
__global__ void GroupedWorkListsKernel(const int32_t* __restrict__ offsets, int num_experts, GroupedWorkLists l) {
  __shared__ int warp_sums[32];
  const int e = threadIdx.x;
  int begin = 0, rows = 0;
  if (e < num_experts) {
    begin = offsets[e];
    rows = offsets[e + 1] - begin;
  }
  int tail_rows = 0;
  const int rem = rows % l.block_tokens;
  if (l.tail_below > 0 && rem > 0 && rem < l.tail_below) tail_rows = rem;
  const int main_rows = rows - tail_rows;
  const int tiles = (main_rows + l.block_tokens - 1) / l.block_tokens;
  int total = 0;
  const int first = BlockExclusiveSum(tiles, warp_sums, total);
  for (int i = 0; i < tiles; ++i) {
    const int r0 = i * l.block_tokens;
    reinterpret_cast<int4*>(l.work)[first + i] = make_int4(e, begin + r0, min(l.block_tokens, main_rows - r0), 0);
  }
  if (e == 0) *l.work_count = total;
  if (l.tail_below <= 0) return;  // uniform: every thread sees the same l
  const int tail_tiles = (tail_rows + l.tail_block_tokens - 1) / l.tail_block_tokens;
  const int tail_first = BlockExclusiveSum(tail_tiles, warp_sums, total);
  for (int i = 0; i < tail_tiles; ++i) {
    const int r0 = i * l.tail_block_tokens;
    reinterpret_cast<int4*>(l.tail_work)[tail_first + i] =
        make_int4(e, begin + main_rows + r0, min(l.tail_block_tokens, tail_rows - r0), 0);
  }
  if (e == 0) *l.tail_count = total;
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

cudaError_t LaunchGroupedWorkLists(const int32_t* expert_offsets, int num_experts, const GroupedWorkLists& lists,
                                   cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024 || lists.block_tokens < 1) return cudaErrorInvalidValue;
  if (lists.tail_below > 0 && (lists.tail_block_tokens < 1 || lists.tail_work == nullptr)) return cudaErrorInvalidValue;
  GroupedWorkListsKernel<<<1, 1024, 0, stream>>>(expert_offsets, num_experts, lists);
  return cudaGetLastError();
}

cudaError_t LaunchGroupedWorkList(const int32_t* expert_offsets, int num_experts, int block_tokens, int32_t* work,
                                  int32_t* work_count, cudaStream_t stream) {
  GroupedWorkLists lists;
  lists.block_tokens = block_tokens;
  lists.work = work;
  lists.work_count = work_count;
  return LaunchGroupedWorkLists(expert_offsets, num_experts, lists, stream);
}

}  // namespace spar::gemm::internal
