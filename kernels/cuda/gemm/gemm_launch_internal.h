// Internal to kernels/cuda/gemm: the kernel-side parameter block and the
// per-configuration launch entry points shared by the host launchers (.cc)
// and the kernel translation units (.cu). Not a public API.
#ifndef SPAR_KERNELS_CUDA_GEMM_GEMM_LAUNCH_INTERNAL_H_
#define SPAR_KERNELS_CUDA_GEMM_GEMM_LAUNCH_INTERNAL_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm/gemm_config.h"

namespace spar {
struct MoeRouteParams;
struct MoePermuteParams;
struct MoeCombineParams;
struct MoeRouterParams;
}  // namespace spar

namespace spar::gemm::internal {

// The tiled weight layouts (GemmWeightLayout, w8a16_tiles.h) as the kernels
// address them: tiles of 16 rows x 64 bytes (1 KB), ordered [row block]
// [span] (KernelSegment::tiled == kTiledAlongK) or [span][row block]
// (kTiledAcrossRows), so a fragment's 16 rows of one span are contiguous.
constexpr int kTileRows = 16;
constexpr int kTileBytes = 1024;
constexpr int kTiledAlongK = 1;      // GemmWeightLayout::kTilesAlongK
constexpr int kTiledAcrossRows = 2;  // GemmWeightLayout::kTilesAcrossRows

struct KernelSegment {
  const uint8_t* w = nullptr;        // [n, k] e4m3 or bf16, as bytes (row-major or tiled)
  const float* scale = nullptr;      // e4m3: [ceil(n/128), ceil(k/128)]
  const uint8_t* w_up = nullptr;     // SiLU·mul: up weight [n, k]
  const float* scale_up = nullptr;
  int64_t n = 0;                     // output columns (gate rows in SiLU·mul)
  int64_t out_col0 = 0;              // first output column in Y
  int32_t first_tile = 0;            // first row tile (blockIdx.y) of this segment
  int32_t is_fp8 = 1;
  int32_t tiled = 0;                 // GemmWeightLayout as int (0 row-major); one layout a launch
};

struct KernelParams {
  int64_t m = 0;  // dense: tokens
  int64_t k = 0;        // streamed K: the weights' row length in elements
  int64_t k_valid = 0;  // X columns that exist (<= k); X reads past them are zero-filled
  const uint16_t* x = nullptr;  // bf16 [*, k], row stride ldx
  int64_t ldx = 0;
  const int32_t* x_row_index = nullptr;  // grouped: permuted row -> X row (nullptr: identity)
  KernelSegment seg[kMaxGemmSegments];
  int32_t num_segments = 1;
  int32_t total_row_tiles = 0;
  int32_t silu = 0;
  const uint16_t* residual = nullptr;  // bf16 [rows, n_out] or nullptr
  int64_t ldr = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  int32_t y_fp32 = 0;
  int32_t splits = 1;
  float* partials = nullptr;   // [splits][tiles][block_tokens * block_rows]
  int32_t* counters = nullptr; // [tiles], zero between launches
  // Grouped mode (work != nullptr): blockIdx.x indexes work entries
  // {expert, first permuted row, rows, 0}; *work_count entries are valid.
  const int32_t* work = nullptr;
  const int32_t* work_count = nullptr;
  int64_t expert_w_stride_bytes = 0;
  int64_t expert_scale_stride = 0;
};

// Dynamic shared memory the kernel of `id` uses (must equal
// GetTileConfig(id).smem_bytes(); the launcher checks).
int64_t KernelSmemBytes(TileConfigId id);

// <<<grid, config threads, smem, stream>>> of the kernel instance for `id`.
cudaError_t LaunchGemmKernel(TileConfigId id, const KernelParams& p, dim3 grid, cudaStream_t stream);

// The streaming decode kernel (w8a16_stream.cu), p.k_valid == p.k. Dense:
// grid.x = the row tiles of `plan` (segments' first_tile in those tiles),
// p.m <= kStreamMaxTokens x plan.token_frags. Grouped (p.work): grid (work
// entries of at most kStreamMaxTokens rows, row tiles). SiLU·mul with
// plan.streams == 1 only.
cudaError_t LaunchStreamKernel(const StreamPlan& plan, const KernelParams& p, dim3 grid, cudaStream_t stream);

// Builds the grouped work list from expert_offsets [num_experts + 1]:
// entries {e, offsets[e] + i*block_tokens, rows, 0}, then *work_count.
// One block; num_experts <= 1024.
cudaError_t LaunchGroupedWorkList(const int32_t* expert_offsets, int num_experts, int block_tokens, int32_t* work,
                                  int32_t* work_count, cudaStream_t stream);

// A grouped launch's work list and, optionally, the tail list of a second
// launch (MoeGroupedGemmParams::tail_rows): an expert's last partial entry
// of fewer than tail_below rows goes to the tail list instead, in entries
// of tail_block_tokens rows. Entries {e, first permuted row, rows, 0}.
struct GroupedWorkLists {
  int block_tokens = 0;
  int32_t* work = nullptr;
  int32_t* work_count = nullptr;
  int tail_below = 0;  // 0: no tail list
  int tail_block_tokens = 0;
  int32_t* tail_work = nullptr;
  int32_t* tail_count = nullptr;
};
cudaError_t LaunchGroupedWorkLists(const int32_t* expert_offsets, int num_experts, const GroupedWorkLists& lists,
                                   cudaStream_t stream);
// A tail split's two lists in a grouped launch's workspace (16-byte slots,
// gemm::GroupedTailSplitBytes of them): the main list's main_entries entries, its
// count, then the tail list's tail_entries entries and its count.
inline GroupedWorkLists TailSplitListsIn(void* workspace, int block_tokens, int64_t main_entries, int tail_below,
                                         int tail_block_tokens, int64_t tail_entries) {
  GroupedWorkLists l;
  l.block_tokens = block_tokens;
  l.work = static_cast<int32_t*>(workspace);
  l.work_count = l.work + main_entries * 4;
  l.tail_below = tail_below;
  l.tail_block_tokens = tail_block_tokens;
  l.tail_work = l.work_count + 4;
  l.tail_count = l.tail_work + tail_entries * 4;
  return l;
}

// MoE helper kernels (moe_kernels.cu); params already validated.
cudaError_t LaunchMoeRouteKernel(const MoeRouteParams& p, cudaStream_t stream);
cudaError_t LaunchMoePermuteKernel(const MoePermuteParams& p, cudaStream_t stream);
cudaError_t LaunchMoeRoutePermuteKernel(const MoeRouteParams& r, const MoePermuteParams& q, int32_t* done,
                                        cudaStream_t stream);
cudaError_t LaunchMoeRouterRoutePermuteKernel(const MoeRouterParams& g, const MoeRouteParams& r,
                                              const MoePermuteParams& q, int32_t* done, cudaStream_t stream);
cudaError_t LaunchMoeCombineKernel(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace spar::gemm::internal

#endif  // SPAR_KERNELS_CUDA_GEMM_GEMM_LAUNCH_INTERNAL_H_
