// Split-K over blocks, the tile kernels' epilogue (W8A16: w8a16_gemm_kernel.cuh;
// W4A16: w4a16_block_steps.cuh): every block of a tile publishes its fp32
// tile to its split's slot, and the last block of the tile to arrive (one
// atomic counter per tile) sums every split's tile in split order, so the
// result has the same bits whatever order the splits finish in.
#ifndef SPAR_KERNELS_CUDA_GEMM_SPLIT_K_SUM_CUH_
#define SPAR_KERNELS_CUDA_GEMM_SPLIT_K_SUM_CUH_

#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/grid_arrival.cuh"

#include <cstdint>

namespace spar::gemm {

// sc: the block's tile, tok_count tokens x kBR rows, token-major with pitch
// kPitchC (in shared memory, after a barrier). From the kernel's parameters
// p: partials [splits][tiles][kTileElems], counters [tiles] (zero between
// launches: the last block resets its tile's) and splits (p by reference:
// the W4A16 kernels then compile to the same SASS as with this code inline).
// Call with all kThreads threads of the block (tid = threadIdx.x); is_last is
// a shared int. Returns false in the blocks that are not the last of their
// tile (they are done); in the last one sc holds the sum of every split.
template <int kBR, int kPitchC, int kThreads, int kTileElems, class Params>
__device__ __forceinline__ bool SumSplitsInLastBlock(const Params& p, float* sc, int split, int64_t tiles,
                                                     int64_t tile_id, int tok_count, int tid, int& is_last) {
  const int n4 = tok_count * kBR / 4;
  float* mine = p.partials + (split * tiles + tile_id) * kTileElems;
  for (int i = tid; i < n4; i += kThreads) {
    const int c = (i * 4) / kBR, r = (i * 4) % kBR;
    *reinterpret_cast<float4*>(mine + c * kBR + r) = *reinterpret_cast<const float4*>(sc + c * kPitchC + r);
  }
  if (!cuda::ArriveIsLast(&p.counters[tile_id], p.splits, is_last)) return false;
  for (int i = tid; i < n4; i += kThreads) {
    const int c = (i * 4) / kBR, r = (i * 4) % kBR;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z = 0; z < p.splits; ++z) {  // fixed order: independent of arrival
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.partials + (z * tiles + tile_id) * kTileElems + c * kBR + r));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    *reinterpret_cast<float4*>(sc + c * kPitchC + r) = sum;
  }
  if (tid == 0) p.counters[tile_id] = 0;  // ready for the next launch
  __syncthreads();
  return true;
}

}  // namespace spar::gemm

#endif  // SPAR_KERNELS_CUDA_GEMM_SPLIT_K_SUM_CUH_
