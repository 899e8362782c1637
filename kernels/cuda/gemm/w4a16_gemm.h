// W4A16 GEMM for sm80: Y[m, n] = X[m, k] (bf16) · W[n, k]ᵀ with W 4-bit in
// the layout of w4_layout.h (repacked once at load from AWQ, GPTQ,
// compressed-tensors int4 or ModelOpt NVFP4), fp32 accumulate, bf16 or fp32
// out. Dense (one matrix, split-K for few output tiles) and grouped MoE
// (one matrix per expert, rows permuted by expert as in moe.h). Three
// kernels share the layout and the epilogue: up to 8 tokens per tile the
// streaming kernel (w4a16_stream.cu: each lane loads its fragment words
// straight into registers, a block's warps split K, no split over blocks),
// up to 16 the decode kernel (w4a16_decode_kernel.cuh: each warp streams
// its own rows through a private cp.async ring), beyond that the tile
// kernel (w4a16_gemm_kernel.cuh).
//
// Exactness: int4 codes become (code - zero) in bf16 registers by the magic
// number trick (OR the nibble into the mantissa of bf16 128.0, subtract
// 128 + zero: exact small integers), so every product with the bf16
// activation is exact; each group's fp32 partial sum is multiplied by its
// fp32 scale once (the group spans whole 64-column chunks: group % 64 == 0).
// NVFP4: the e2m1 nibble is placed into bf16 bits and scaled by 2^126
// (exact, subnormals included), times its e4m3 block scale widened to bf16
// (the product has <= 5 significant bits: exact); the fp32 global scale is
// applied to the finished sum. So the result equals kernels/ref's
// dequantize-then-GEMM up to fp32 summation order.
//
// SiLU·mul: a weight packed with PackW4SiluPair (gate and up interleaved by
// 8 rows) gives out[:, j] = silu(x·gate_jᵀ) · (x·up_jᵀ).
//
// Split-K workspace: as the W8A16 GEMM's (counters in the first 64 KB,
// zeroed once; every launch leaves them zero), which it may share when the
// two never run concurrently. Thread-safety: functions are thread-safe.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_H_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace spar {

enum class W4WeightType : int {
  kInt4 = 0,   // codes, fp32 scale + uint8 zero per (row, group)
  kNvfp4 = 1,  // e2m1 codes, e4m3 scale per 16, fp32 global scale
};

// One packed matrix (w4_layout.h), device pointers, all 16-byte aligned.
struct W4GemmWeight {
  W4WeightType type = W4WeightType::kInt4;
  const uint8_t* values = nullptr;      // rows_padded * k / 2 bytes
  const float* scales = nullptr;        // int4: [k / group][rows_padded]
  const uint8_t* zeros = nullptr;       // int4: [k / group][rows_padded]
  const uint8_t* fp4_scales = nullptr;  // nvfp4: [rows_padded][k / 16]
  const float* global_scale = nullptr;  // nvfp4: device fp32 (grouped: one per expert)
  int64_t n = 0;                        // output columns (SiLU pair: gate rows)
  int64_t rows_padded = 0;              // packed rows, a multiple of 64
  int64_t group = 0;                    // int4: columns per scale, a multiple of 64
  bool silu_pair = false;               // packed with PackW4SiluPair
};

struct W4A16GemmParams {
  int64_t m = 0;  // tokens; 0 is a no-op
  int64_t k = 0;  // multiple of 64
  const __nv_bfloat16* x = nullptr;  // [m, k], row stride ldx (multiple of 8), 16-byte aligned
  int64_t ldx = 0;
  W4GemmWeight w;
  void* y = nullptr;  // [m, n] bf16, or fp32 if y_fp32; row stride ldy (may be a column range of a wider Y)
  int64_t ldy = 0;
  bool y_fp32 = false;
  void* workspace = nullptr;  // split-K partials + counters (zeroed once), or nullptr
  size_t workspace_bytes = 0;
  int num_sms = 0;  // 0: read from the current device
  // Tests and benchmarks: force a tile configuration (>= 0) and split factor
  // (<= 0: the planner's split for the forced configuration).
  int force_config = -1;
  int force_splits = 1;
};

// Workspace bytes for the best plan of these shapes (unlimited workspace).
size_t W4A16GemmWorkspaceBytes(const W4A16GemmParams& p);
absl::Status LaunchW4A16Gemm(const W4A16GemmParams& p, cudaStream_t stream);

// The grouped (MoE) form: rows [offsets[e], offsets[e+1]) of the permuted
// batch use expert e's matrix, at expert_*_stride from expert 0's.
struct W4MoeGroupedGemmParams {
  int num_experts = 0;                      // local experts, <= 1024
  const int32_t* expert_offsets = nullptr;  // [num_experts + 1] device
  int64_t max_rows = 0;                     // permuted-row capacity
  int64_t expected_rows_per_expert = 1;     // host hint for the tile choice
  // Host hint: no expert gets more rows than this (0: unknown). With top-k
  // routing over distinct experts it is the token count, and 1 lets a
  // one-token step use the one-token plan. Only speed depends on it: a
  // forced one-row tile still gives an expert with more rows one entry per
  // row.
  int64_t max_rows_per_expert = 0;
  int64_t k = 0;
  const __nv_bfloat16* x = nullptr;
  int64_t ldx = 0;
  const int32_t* x_row_index = nullptr;  // [max_rows] X row of permuted row, or nullptr
  W4GemmWeight weight;                   // expert 0 (global_scale: one per expert)
  int64_t values_stride = 0;             // bytes between experts' values
  int64_t scales_stride = 0;             // int4: floats between experts' scales
  int64_t zeros_stride = 0;              // int4: bytes between experts' zeros
  int64_t fp4_scales_stride = 0;         // nvfp4: bytes between experts' block scales
  void* y = nullptr;                     // [max_rows, n], row p = permuted row
  int64_t ldy = 0;
  bool y_fp32 = false;
  void* workspace = nullptr;  // MoeGroupedGemmWorkspaceBytes(max_rows, num_experts) (moe.h)
  size_t workspace_bytes = 0;
  int num_sms = 0;
  int force_config = -1;
  // Optional: the work list the permutation wrote (MoePermuteParams::work,
  // moe.h) for entries of work_block_tokens rows. The launch reads it when
  // that is its tile height (W4MoeGroupedGemmBlockTokens) and builds none
  // itself: one launch fewer. Otherwise it is ignored.
  const void* work = nullptr;
  int work_block_tokens = 0;
  // The tail split (W4MoeGroupedGemmTailPlan): -1 automatic, 0 never, > 0
  // that bound on a tail's rows (tests and benchmarks).
  int tail_rows = -1;
  int force_tail_config = -1;  // tests and benchmarks: the tail launch's configuration
};
absl::Status LaunchW4MoeGroupedGemm(const W4MoeGroupedGemmParams& p, cudaStream_t stream);
// Rows per work entry of the launch `p` plans (its tile height; 0 for an
// empty launch): the height of the permutation's list it would read.
// Reads no device memory.
int W4MoeGroupedGemmBlockTokens(const W4MoeGroupedGemmParams& p);
// The tail split, as the FP8 grouped GEMM's (moe.h, MoeGroupedGemmTailPlan):
// where the 128 x 128 prefill tile is planned (its cost is the widening of
// every weight it holds, whatever its rows), an expert's last partial tile
// of fewer than `below` rows runs in a second launch of `config`'s tile,
// which streams the weights at memory speed. Automatic with the planned
// prefill tile and when both work lists fit the workspace; then the launch
// builds its own lists (W4MoeGroupedGemmBlockTokens returns 0). H100 running
// sm80 code (2026-12-06), gate/up + down at 4096 tokens with even routing:
// int4 17776 -> 13230 us, NVFP4 14438 -> 11743; the AWQ GLM-5 layer's
// prefill 1.22x (bench/RESULTS.md, "The tail split").
struct W4MoeTailPlan {
  int below = 0;  // 0: no tail launch
  int config = -1;
};
W4MoeTailPlan W4MoeGroupedGemmTailPlan(const W4MoeGroupedGemmParams& p);

// Tile configurations (for tests and benchmarks that force one): the tile
// kernel's (any M), the decode kernel's (M <= 16 per tile) and the
// streaming kernel's (M <= 16 per tile); which the plans pick: w4a16_gemm.cu.
inline constexpr int kW4NumConfigs = 17;
const char* W4ConfigName(int config);
int W4ConfigNamed(const char* name);  // the configuration of that name, or -1
bool W4ConfigIsDecode(int config);
bool W4ConfigIsStream(int config);  // the streaming kernel (<= 16 tokens a tile, no split-K)
// The configuration the launchers would run (reads no device memory; -1
// for an empty launch). The dense plan reads the SM count from num_sms, or
// the current device when it is 0.
int W4A16GemmPlannedConfig(const W4A16GemmParams& p);
int W4MoeGroupedGemmPlannedConfig(const W4MoeGroupedGemmParams& p);
int W4ConfigBlockTokens(int config);  // rows per tile (grouped: per work entry)
// Whether a forced configuration can run a matrix of rows_padded packed rows.
bool W4ConfigTiles(int config, int64_t rows_padded);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_H_
