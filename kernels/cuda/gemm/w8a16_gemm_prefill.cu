// Prefill-side instances of the W8A16 tile GEMM (the configurations of more
// than 32 tokens of kTileConfigs, w8a16_gemm_tiles.cuh), the configuration
// dispatch, and the grouped (MoE) work-list builder.
#include "kernels/cuda/common/arch.cuh"

#include "kernels/cuda/common/reduce.cuh"
#include "kernels/cuda/gemm/w8a16_gemm_tiles.cuh"

namespace spar::gemm::internal {
namespace {

constexpr int kListThreads = 1024;  // one thread per expert (LaunchGroupedWorkLists' bound)

// One thread per expert: its entries (tiles of block_tokens rows; with a
// tail list, a last partial tile of fewer than tail_below rows goes there in
// entries of tail_block_tokens rows), placed by one block-wide exclusive
// scan of both lists' counts.
__global__ void __launch_bounds__(kListThreads)
    GroupedWorkListsKernel(const int32_t* __restrict__ offsets, int num_experts, GroupedWorkLists l) {
  __shared__ int scan_scratch[32 * 2];
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
  const int tail_tiles = tail_rows > 0 ? (tail_rows + l.tail_block_tokens - 1) / l.tail_block_tokens : 0;
  int first[2] = {tiles, tail_tiles}, total[2];
  cuda::BlockExclusiveScanFields<kListThreads, 2>(first, scan_scratch, total);
  for (int i = 0; i < tiles; ++i) {
    const int r0 = i * l.block_tokens;
    reinterpret_cast<int4*>(l.work)[first[0] + i] = make_int4(e, begin + r0, min(l.block_tokens, main_rows - r0), 0);
  }
  if (e == 0) *l.work_count = total[0];
  if (l.tail_below <= 0) return;  // uniform: every thread sees the same l
  for (int i = 0; i < tail_tiles; ++i) {
    const int r0 = i * l.tail_block_tokens;
    reinterpret_cast<int4*>(l.tail_work)[first[1] + i] =
        make_int4(e, begin + main_rows + r0, min(l.tail_block_tokens, tail_rows - r0), 0);
  }
  if (e == 0) *l.tail_count = total[1];
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
  if (num_experts < 1 || num_experts > kListThreads || lists.block_tokens < 1) return cudaErrorInvalidValue;
  if (lists.tail_below > 0 && (lists.tail_block_tokens < 1 || lists.tail_work == nullptr)) return cudaErrorInvalidValue;
  GroupedWorkListsKernel<<<1, kListThreads, 0, stream>>>(expert_offsets, num_experts, lists);
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
