// MoE on sm80 (noaux_tc routing, dsa-spec.md §2.7): routing, permutation of
// (token, choice) pairs by expert, the grouped W8A16 GEMM over the experts
// present, and the weighted combine back to token order.
//
// One MoE layer on a rank that holds the routed experts [e0, e1)
// (expert parallel; all experts: e0 = 0, e1 = n_routed_experts):
//
//   1. logits  = LaunchW8A16Gemm(x, mlp.gate.weight as a bf16 segment,
//                y_fp32 = true)                          [T, E] fp32
//   2. LaunchMoeRoute(logits, e_score_correction_bias)  -> ids, weights [T, K]
//   3. LaunchMoePermute(ids, [e0, e1))                  -> expert_offsets
//        [E_local+1], sorted_token [T*K], slot [T, K] (-1: expert not local)
//      (2 + 3 in one launch: LaunchMoeRoutePermute; the permutation can
//      also write the work lists of the grouped GEMMs of steps 4-5; 1 + 2 + 3
//      for one token: LaunchMoeRouterRoutePermute)
//   4. LaunchMoeGroupedGemm(kSiluMul, x gathered by sorted_token,
//        gate_proj/up_proj of the local experts)        -> h [T*K, I] bf16
//   5. LaunchMoeGroupedGemm(kNone, h, down_proj)        -> yd [T*K, H] bf16
//   6. shared expert with the dense GEMM: LaunchW8A16Gemm(kSiluMul,
//        shared gate/up) -> hs [T, I]; LaunchW8A16Gemm(hs, shared down) -> s
//   7. LaunchMoeCombine(yd, slot, weights, shared = s, residual) -> out [T, H]
//
// Under expert parallelism the per-rank outputs are summed by the
// all-reduce, so pass the shared-expert output (and the residual) on one
// rank only — or split the shared expert's intermediate dimension over the
// ranks, each adding its partial. Tokens routed to experts of other ranks
// contribute nothing here (slot -1).
//
// Expert weights are strided: expert e's matrix (local index e - e0) starts
// at data + e * expert_weight_stride elements, its scales at scale + e *
// expert_scale_stride floats; the engine loads the local experts' tensors
// into one allocation per projection ([E_local, n, k] + [E_local, n/128,
// k/128]). Gate and up may be two such allocations or one [E_local, 2I, k]
// with `up` pointing I rows in (I % 128 == 0).
//
// Sizes are device-resident after routing, so the grouped GEMM's grid is
// sized for the worst case (every (token, choice) pair on a local expert)
// and idle blocks exit at once: the whole sequence is CUDA-graph capturable
// with fixed T.
//
// Thread-safety: functions are thread-safe; work follows stream order.
#ifndef SPAR_KERNELS_CUDA_GEMM_MOE_H_
#define SPAR_KERNELS_CUDA_GEMM_MOE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar {

// Exactly kernels/ref MoeRoute: sigmoid scores, + bias for selection only,
// group-limited (top topk_group groups by the sum of their two best biased
// scores), top_k by biased score (ties: lower expert id first), weights =
// unbiased scores renormalised (sum + 1e-20) times routed_scaling. Outputs
// are ordered best first. One warp per token.
struct MoeRouteParams {
  int64_t tokens = 0;
  int num_experts = 0;  // 1..32, or a multiple of 32 up to 512
  int top_k = 0;        // 1..32, <= experts in the allowed groups
  int n_group = 1;      // divides num_experts
  int topk_group = 1;   // 1..n_group
  bool renormalize = true;
  float routed_scaling = 1.0f;
  const float* logits = nullptr;  // [tokens, num_experts] fp32, row stride ld_logits
  int64_t ld_logits = 0;
  const float* bias = nullptr;    // [num_experts] e_score_correction_bias
  int32_t* expert_ids = nullptr;  // [tokens, top_k] global expert ids
  float* expert_weights = nullptr;  // [tokens, top_k]
};
absl::Status LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream);

// Groups the (token, choice) pairs whose expert is in [expert_begin,
// expert_end) by expert. Permuted row p in [offsets[e], offsets[e+1]) belongs
// to local expert e; within an expert the row order is unspecified (the
// results do not depend on it: every row is computed independently).
// One block; tokens * top_k < 2^31.
inline constexpr int kMaxPermuteWorkLists = 2;
// The fewest rows per entry a work list of MoeGroupedGemmWorkspaceBytes
// holds (every grouped GEMM plan's tiles have at least this many).
inline constexpr int kMinWorkListBlockTokens = 8;
struct MoePermuteParams {
  int64_t tokens = 0;
  int top_k = 0;
  const int32_t* expert_ids = nullptr;  // [tokens, top_k] global ids
  int expert_begin = 0;
  int expert_end = 0;  // local experts: expert_end - expert_begin <= 1024
  int32_t* expert_offsets = nullptr;  // [E_local + 1]
  int32_t* sorted_token = nullptr;    // [tokens * top_k]: token of permuted row p
  int32_t* slot = nullptr;            // [tokens, top_k]: permuted row, or -1
  // Optional: the work lists of the grouped GEMMs that follow (one per
  // distinct block_tokens of their plans, MoeGroupedGemmPlan), written with
  // the offsets so that those launches need no work-list kernel of their own
  // (MoeGroupedGemmParams::work). Each list: MoeGroupedGemmWorkspaceBytes
  // (max_rows, local experts) bytes, 16-byte aligned.
  int num_work_lists = 0;  // 0..kMaxPermuteWorkLists
  int work_block_tokens[kMaxPermuteWorkLists] = {};
  void* work[kMaxPermuteWorkLists] = {};
};
absl::Status LaunchMoePermute(const MoePermuteParams& p, cudaStream_t stream);
// The work list `perm` is to write for entries of `block_tokens` rows (a
// grouped GEMM's MoeGroupedGemmBlockTokens): the one it already has for that
// height, else list n = perm->num_work_lists, at storage + n * list_bytes
// (storage: kMaxPermuteWorkLists lists of list_bytes =
// MoeGroupedGemmWorkspaceBytes, 16-byte aligned), added to perm. nullptr
// when block_tokens is 0 (no list wanted) or every list holds another height.
// Host only: reads no device memory.
void* RequestPermuteWorkList(MoePermuteParams* perm, int block_tokens, void* storage, size_t list_bytes);

// LaunchMoeRoute then LaunchMoePermute of its ids, in one launch: every block
// routes one token, the last block to finish permutes them all. `perm` must
// name route.expert_ids with the same tokens and top_k. done_counter: a
// device int32 that is 0 before the launch; the kernel leaves it 0 again, so
// one zeroed int serves every later launch on the stream (graph replays too).
absl::Status LaunchMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& perm, int32_t* done_counter,
                                   cudaStream_t stream);

// Steps 1-3 for one token (decode at batch 1) in one launch: the router's
// logits as a bf16 GEMV (block b computes experts 2b and 2b + 1, each dot
// product summed in a fixed order), then the last block to finish routes and
// permutes the token (LaunchMoeRoutePermute's one-token path). At batch 1 the
// W8A16 GEMM streams the 3 MB router through a split-K plan built for big
// weights (~8-10 us for ~1 us of bytes) and the routing is a second launch.
// `route.logits` must be `router.logits` (the logits are still written:
// traces and tests read them); route.tokens == 1.
struct MoeRouterParams {
  const __nv_bfloat16* x = nullptr;       // [hidden], 16-byte aligned
  const __nv_bfloat16* weight = nullptr;  // [num_experts, ld] bf16, 16-byte aligned
  int64_t ld = 0;                         // 0: hidden; a multiple of 8
  int64_t hidden = 0;                     // a multiple of 8
  float* logits = nullptr;                // [num_experts] out
};
// Whether LaunchMoeRouterRoutePermute takes these shapes and pointers (else
// run the GEMM and LaunchMoeRoutePermute).
bool MoeRouterRoutePermuteSupported(const MoeRouterParams& router, const MoeRouteParams& route);
absl::Status LaunchMoeRouterRoutePermute(const MoeRouterParams& router, const MoeRouteParams& route,
                                         const MoePermuteParams& perm, int32_t* done_counter, cudaStream_t stream);

// Y[rows of expert e] = X[rows] · W_eᵀ for every local expert, with the
// epilogues of the dense GEMM (no residual; split-K only with a split
// workspace).
struct MoeGroupedGemmParams {
  int num_experts = 0;                   // local experts, <= 1024
  const int32_t* expert_offsets = nullptr;  // [num_experts + 1] device (LaunchMoePermute)
  int64_t max_rows = 0;                  // permuted-row capacity (tokens * top_k)
  // Host hint for the tile choice: expected rows per expert with work
  // (e.g. max(1, tokens * top_k / n_routed_experts)).
  int64_t expected_rows_per_expert = 1;
  int64_t expected_active_experts = 0;   // 0: min(num_experts, max_rows)
  int64_t k = 0;                         // multiple of 8 (X columns)
  const __nv_bfloat16* x = nullptr;      // 16-byte aligned, row stride ldx
  int64_t ldx = 0;
  const int32_t* x_row_index = nullptr;  // [max_rows]: X row of permuted row p, or nullptr (X is permuted)
  // Expert 0: [n, ld] (+ scales [ceil(n/128), ceil(k/128)]); type and
  // layout shared by all (tiled: [GemmTiledRows(n), ld] in tiles). A k that
  // is no whole number of 64-byte stages (an expert width of 96, say) needs
  // rows stored zero-padded to PaddedGemmRowElements(k) with weight.ld (and
  // up.ld) set to that; X columns past k are never read.
  GemmWeight weight;
  GemmWeight up;                         // kSiluMul: up weight of expert 0
  int64_t expert_weight_stride = 0;      // elements between experts (weight and up): >= stored rows * ld
  int64_t expert_scale_stride = 0;       // floats between experts' scales
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* y = nullptr;                     // [max_rows, n_out] bf16 (or fp32), row p = permuted row
  int64_t ldy = 0;
  bool y_fp32 = false;
  void* workspace = nullptr;             // MoeGroupedGemmWorkspaceBytes(max_rows, num_experts)
  size_t workspace_bytes = 0;
  // A work list the permutation wrote (MoePermuteParams::work) for tiles of
  // work_block_tokens rows: used, instead of building one in `workspace`,
  // when the plan's tile has that many tokens.
  const void* work = nullptr;
  int work_block_tokens = 0;
  // Split-K (several blocks per tile over K, the last one sums them): a
  // dense GEMM's split workspace (W8A16GemmParams::workspace: 256-byte
  // aligned, its counters zero between launches, which every launch leaves
  // so). Null: the launch never splits. The engine passes none: on the H200
  // sweep of 2026-12-02 no split beat the best unsplit tile of any grouped
  // decode shape (bench/gemm/calibration/h200_sweep_2026-12-02_grouped.txt);
  // the benchmark and the tests force it.
  void* split_workspace = nullptr;
  size_t split_workspace_bytes = 0;
  int num_sms = 0;                       // 0: read from the current device
  int force_config = -1;                 // tests/benchmarks: force a tile configuration
  int force_splits = 1;                  // with force_config: the split factor (needs split_workspace)
  // 0: the kernels' own choice (MoeGroupedGemmUsesStreamKernel); tests and
  // benchmarks: 1 / 2 / 4 / 8 run the streaming kernel with that many warps
  // a block where it can take the launch, -1 the tile kernel.
  int force_stream_warps = 0;
  // The tail split (MoeGroupedGemmTailPlan): -1 automatic, 0 never, > 0
  // that bound on a tail's rows (tests and benchmarks).
  int tail_rows = -1;
  int force_tail_config = -1;  // tests and benchmarks: the tail launch's tile (-1: kMoeTailConfig)
};
size_t MoeGroupedGemmWorkspaceBytes(int64_t max_rows, int num_experts);
gemm::GemmPlan MoeGroupedGemmPlan(const MoeGroupedGemmParams& p);
// The streaming kernel of the dense decode GEMMs (w8a16_stream.cu) runs a
// decode-sized launch (rows of exactly k columns) over work entries of
// gemm::kStreamMaxTokens rows: by default up to kMoeStreamAutoMaxRows rows
// (one to five tokens' choices at top-8: decode at batch 1, MTP verify
// steps) with kMoeStreamAutoWarps warps a block, forced up to
// kMoeStreamMaxRows. Measured on an H100 running sm80 code (2026-12-06,
// GLM-5 experts tiled across rows, gate/up + down, µs, tile kernel ->
// four-warp blocks): 1 token 113.6 -> 107.3 (93 % of the hit experts'
// bytes against 88 %), 2 tokens 238.6 -> 214.2, 3 297.5 -> 288.3, 4 405.4 ->
// 374.4, 5 473.6 -> 461.8; one-warp blocks were the slowest width at one
// token (121.7: a warp streams a whole expert row, 24 rounds of loads one
// after another); at 8 tokens the tile kernel 701 against 694-721 for the
// widths, at 16 1280 against 1288-1345: no gain worth a second path.
inline constexpr int64_t kMoeStreamAutoMaxRows = 40;
inline constexpr int kMoeStreamAutoWarps = 4;
inline constexpr int64_t kMoeStreamMaxRows = 512;
bool MoeGroupedGemmUsesStreamKernel(const MoeGroupedGemmParams& p);
// The tail split of a prefill launch. The prefill tile (128 tokens) costs
// about the same whatever rows it holds: each warp widens its weight rows
// once per tile, and that, not the mma, bounds it (a GLM-5 expert's
// gate/up pass took ~22.4 us at 64 rows and at 128 on the H200). A
// 4096-token chunk gives each of 256 experts ~128 +- 11 rows when routing
// is even, so about half of them need a second tile for a few rows. With
// the split, an expert's last partial tile of fewer than `below` rows runs
// instead in a second launch of a small tile (`config`) that streams the
// weights at memory speed (a third of the prefill tile's pass; each of its
// entries holds config's block_tokens rows). Automatic where the plan's
// tile holds >= kMoeTailMinTileTokens tokens and does not split K, the
// tail tile's stages divide the rows, and both work lists fit the
// workspace. Measured on an H100 running sm80 code (2026-12-06, gemm_bench
// --moe-tokens, GLM-5 experts tiled across rows, even routing, gate/up +
// down): 4096 tokens 13070 -> 11368-11523 us (1.13-1.15x), 8192 22068 ->
// 20916 (1.06x), 2048 unchanged (no expert has a tail); bounds 16 / 48
// and tail tiles T32 / T8R128M2F / T64W2 were 0-8 % slower than 32 with
// T16W4F. With engine_bench's random router (uneven rows, remainders
// spread over the whole tile) the prefill chunk's expert GEMMs gain 3-6 %.
inline constexpr int kMoeTailAutoRows = 32;
inline constexpr int kMoeTailMinTileTokens = 128;
inline constexpr gemm::TileConfigId kMoeTailConfig = gemm::TileConfigId::kT16W4F;
struct MoeTailPlan {
  int below = 0;  // 0: no tail launch
  gemm::TileConfigId config = kMoeTailConfig;
};
MoeTailPlan MoeGroupedGemmTailPlan(const MoeGroupedGemmParams& p);
// Rows a work entry of the launch holds (the work list it wants); 0 where
// the launch builds its own lists (the tail split).
int MoeGroupedGemmBlockTokens(const MoeGroupedGemmParams& p);
absl::Status LaunchMoeGroupedGemm(const MoeGroupedGemmParams& p, cudaStream_t stream);

// out[t] = Σ_j weights[t, j] · expert_out[slot[t, j]] (slot >= 0 only, fp32,
// j in order) + shared[t] + residual[t], rounded once to bf16.
struct MoeCombineParams {
  int64_t tokens = 0;
  int top_k = 0;
  int64_t hidden = 0;  // multiple of 8
  const __nv_bfloat16* expert_out = nullptr;  // [rows, hidden], row stride ld_expert
  int64_t ld_expert = 0;
  const int32_t* slot = nullptr;    // [tokens, top_k]
  const float* weights = nullptr;   // [tokens, top_k]
  const __nv_bfloat16* shared = nullptr;    // [tokens, hidden] or nullptr
  int64_t ld_shared = 0;
  const __nv_bfloat16* residual = nullptr;  // [tokens, hidden] or nullptr (may equal out)
  int64_t ld_residual = 0;
  __nv_bfloat16* out = nullptr;     // [tokens, hidden], row stride ld_out
  int64_t ld_out = 0;
  // Instead of `out`: fp32 output, not rounded (a tensor-parallel rank's
  // partial sum, rounded once after the all-reduce).
  float* out_f32 = nullptr;
};
absl::Status LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_GEMM_MOE_H_
