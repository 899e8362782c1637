// Internal to kernels/cuda/gemm: the W4A16 tile configurations, one table
// read by the host planner (w4a16_gemm.cu) and by the translation units
// that instantiate the kernels from it (w4a16_gemm.cu: the tile kernel,
// w4a16_decode.cu: the decode kernel), so no configuration is written twice.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_CONFIGS_H_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_CONFIGS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm/w4a16_gemm.h"
#include "kernels/cuda/gemm/w4a16_kernel_params.h"

namespace spar::gemm::w4 {

// Tile kernel (w4a16_gemm_kernel.cuh): bt tokens x br rows per block, wr x wt
// warps, `stages` cp.async stages of `sub` 64-column chunks. Decode kernel
// (w4a16_decode_kernel.cuh): `warps` warps of `mi` 16-row fragments each,
// nj 8-token fragments of which xtok tokens are kept (bt = nj * xtok), a
// per-warp ring of `stages` chunks. Streaming kernel (w4a16_stream.cu):
// 8 tokens x `mi` 16-row fragments per block, its `warps` warps splitting
// K, `stages` chunks loaded a round; never split over blocks.
struct W4Config {
  const char* name;
  bool decode;
  int bt, br;
  int wr, wt, stages, sub, min_blocks;  // tile kernel (stages and min_blocks: both)
  int warps, mi, nj, xtok;              // decode kernel (warps, mi: the streaming kernel too)
  bool stream = false;
};

constexpr W4Config TileConfig(const char* name, int bt, int br, int wr, int wt, int stages, int sub, int min_blocks) {
  return {name, false, bt, br, wr, wt, stages, sub, min_blocks, 0, 0, 0, 0, false};
}
constexpr W4Config DecodeConfig(const char* name, int warps, int mi, int nj, int xtok, int stages, int min_blocks) {
  return {name, true, nj * xtok, warps * 16 * mi, 0, 0, stages, 0, min_blocks, warps, mi, nj, xtok, false};
}
constexpr W4Config StreamConfig(const char* name, int warps, int mi, int depth, int nj = 1) {
  return {name, false, 8 * nj, 16 * mi, 0, 0, depth, 0, 0, warps, mi, nj, 8, true};
}

// Decode tiles stream 256 columns (4 chunks) per stage so each 16-row tile
// contributes 2 KB contiguous per stage; the prefill tile is 128 rows x 128
// tokens with 8 warps of 32 x 64 (two accumulator sets per thread for int4:
// the running sum and the group's). It replaced a 128 x 64 tile (W4P128,
// warps of 32 x 32) on 2026-12-03: 1.19-1.23x faster for int4 and 1.34x for
// NVFP4 at M = 2048, 1.05-1.12x on the grouped MoE at 4096 tokens (H200
// running this sm80 code, bench/RESULTS.md). Then the decode kernel's,
// from a sweep of eleven (bench/results/gemm.md, 2026-12-02): W4D16M2S4 the
// grouped plan takes at 9-16 rows per expert; W4D8M1S6 (dense 9-16 tokens
// on small matrices until the streaming kernel's 16-token tiles replaced it,
// 2026-12-04) and W4D1M4S3 (one row a tile, four fragments a warp: the
// fastest int4 grouped GEMM at 8 tokens x top-8 in the 2026-12-04 sweep,
// 1.09x the streaming kernel, but an expert with r rows reads its weights r
// times, which a plan would have to bound first) no planner picks. Then the
// streaming kernel's: four 8-token tiles the planners pick from a sweep of
// 25 (bench/RESULTS.md, 2026-12-04) and four 16-token tiles (two B
// fragments a lane) for dense GEMMs of 9-16 tokens.
inline constexpr W4Config kW4Configs[kW4NumConfigs] = {
    TileConfig("W4T8", 8, 64, 4, 1, 4, 4, 2),
    TileConfig("W4T16", 16, 64, 4, 1, 4, 4, 2),
    TileConfig("W4T32", 32, 64, 4, 1, 4, 2, 2),
    TileConfig("W4T64", 64, 64, 2, 2, 4, 2, 2),
    TileConfig("W4P128T", 128, 128, 4, 2, 3, 2, 1),
    DecodeConfig("W4D1M4S3", 4, 4, 1, 1, 3, 4),
    DecodeConfig("W4D8M1S6", 4, 1, 1, 8, 6, 4),
    DecodeConfig("W4D16M2S4", 4, 2, 2, 8, 4, 3),
    StreamConfig("W4SM1D4W4", 4, 1, 4),
    StreamConfig("W4SM1D4W8", 8, 1, 4),
    StreamConfig("W4SM2D3W2", 2, 2, 3),
    StreamConfig("W4SM2D3W4", 4, 2, 3),
    StreamConfig("W4SM1N2D3W8", 8, 1, 3, 2),
    StreamConfig("W4SM1N2D3W4", 4, 1, 3, 2),
    StreamConfig("W4SM2N2D2W4", 4, 2, 2, 2),
    StreamConfig("W4SM2N2D2W2", 2, 2, 2, 2),
    // 64 tokens on the prefill tile's 32 x 64 warp tile, so each widened
    // weight fragment feeds 8 token fragments, not W4T64's 4: the dense plan
    // from 65 tokens (w4a16_gemm.cu, DenseConfigFor; 2026-12-07).
    TileConfig("W4T64R4", 64, 128, 4, 1, 3, 2, 2),
};

// w4a16_decode.cu: the decode kernel of configuration `id` (decode == true).
cudaError_t LaunchDecodeConfig(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream);
// Its blocks resident per SM on the current device (cached), for the planner.
int DecodeConfigBlocksPerSm(int id, bool fp4);
// w4a16_stream.cu: the streaming kernel of configuration `id` (stream ==
// true); p.splits must be 1.
cudaError_t LaunchStreamConfig(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream);

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_CONFIGS_H_
