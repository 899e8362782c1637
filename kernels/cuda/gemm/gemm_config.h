// Tile configurations of the W8A16 GEMM and the host-side heuristic that
// picks one (plus the split-K factor) from the problem shape.
//
// Pure host code, no CUDA: unit-tested on the CPU (tests/kernels/gemm/
// gemm_config_test.cc). Thread-safe (no state).
//
// The kernel computes Yᵀ = W·Xᵀ: weight rows are the mma "M" side (16-row
// fragments), tokens the "N" side (8-token fragments). A block owns
// `block_rows` weight rows × `block_tokens` tokens and streams K in stages
// of 64 bytes per weight row (64 e4m3 or 32 bf16 values).
#ifndef SPAR_KERNELS_CUDA_GEMM_GEMM_CONFIG_H_
#define SPAR_KERNELS_CUDA_GEMM_GEMM_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace spar::gemm {

enum class TileConfigId : int {
  kT8 = 0,      // decode, M <= 8: 64 rows x 8 tokens, 4 warps (16x8 each), 64 B/row/stage
  kT16 = 1,     // decode, M <= 16: 64 x 16, 4 warps (16x16)
  kT32 = 2,     // M <= 32: 64 x 32, 4 warps (16x32)
  kT64 = 3,     // M <= 64: 64 x 64, 2x2 warps (32x32)
  kT128 = 4,    // prefill: 128 x 128, 4x2 warps (32x64), one block per SM
  kT8W4 = 5,    // kT8 with 256 B/row/stage (wide stages: better DRAM bursts)
  kT16W4 = 6,   // kT16 with 256 B/row/stage
  kT64W2 = 7,   // kT64 with 128 B/row/stage
  kT128B2 = 8,  // kT128 capped at 128 registers: two blocks per SM
  kT128W2 = 9,  // kT128 with 128 B/row/stage (half the barriers per K)
  // 12-16 warps per SM at decode (measured 2026-12-02: 1.2-1.3x faster than
  // kT8W4/kT16W4 on the large GLM-5 projections, see kTileConfigs).
  kT16W4F = 10,     // kT16W4 with 3 stages (two blocks fit an A100), 2^120 folded
  kT8W2Q = 11,      // 64 x 8, 128 B/row/stage, 3 stages: 4 blocks per SM
  kT8W2QF = 12,     // kT8W2Q, 2^120 folded into the block scale
  kT8R128M2F = 13,  // 128 rows x 8, 4 warps of two 16-row fragments, folded
  kT128W2F = 14,    // kT128W2 with 2^120 folded: the prefill tile (2026-12-03)
  // 64 tokens on the prefill tile's 32 x 64 warp tile (4x1 warps), so each
  // widened weight fragment feeds 8 token fragments, not kT64's 4.
  kT64R4F = 15,    // 128 rows x 64 tokens, 64 B/row/stage, 4 stages: two blocks fit an A100
  kT64R4W2F = 16,  // kT64R4F with 128 B/row/stage, 3 stages
};
inline constexpr int kNumTileConfigs = 17;

struct TileConfig {
  TileConfigId id;
  const char* name;
  int block_tokens;  // tokens per block (mma N side)
  int block_rows;    // weight rows per block (mma M side); SiLU·mul: half gate, half up
  int warps_rows;
  int warps_tokens;
  int stages;        // cp.async pipeline depth
  int sub;           // 64-byte slices per weight row per stage (k must divide)
  int min_blocks_per_sm;  // __launch_bounds__ occupancy hint (caps registers)
  // Relative tensor-core efficiency when compute-bound (fraction of the
  // mma.sync peak the tile shape can sustain; smaller tiles re-read more
  // shared memory per mma). Only ranks configurations against each other.
  double mma_efficiency;

  int threads() const { return 32 * warps_rows * warps_tokens; }
  // Fraction of the copy bandwidth the stage shape can draw from DRAM
  // (64-byte pieces of many rows are served worse than long bursts).
  double dram_efficiency;
  // e4m3 weights widen to bf16 * 2^-120 (two integer ops per pair) and the
  // 2^120 is applied with the fp32 block scale in the epilogue, instead of
  // a bf16 multiply per pair in the mma loop (fp8_sm80.cuh).
  bool fold_pow2 = false;

  int64_t row_bytes_per_stage() const { return int64_t{64} * sub; }
  // Bytes of one pipeline stage: weight tile (64·sub B per row) +
  // activation tile (128·sub B per token).
  int64_t stage_bytes() const { return (int64_t{block_rows} * 64 + int64_t{block_tokens} * 128) * sub; }
  // Epilogue tile (fp32, tokens x (rows + 4)), aliased onto the pipeline.
  int64_t epilogue_bytes() const { return int64_t{block_tokens} * (block_rows + 4) * 4; }
  int64_t smem_bytes() const;
};

// The configurations, written once: the heuristic below ranks them and the
// kernel translation units instantiate the kernel of each from the same
// fields (w8a16_gemm_tiles.cuh), so the two cannot drift apart.
//
// Efficiencies were fitted (bench/gemm/calibration/fit_heuristic.py) to
// sweeps of every (configuration, split) over the GLM-5 projection shapes on
// the H200 test GPU running this sm80 code: M in {1, 16, 64, 256, 2048}
// (2026-11-30) and M in {1, 4, 8, 16} with the decode tiles below
// (2026-12-02, which replaces the first at M = 1, 16), then M in {64, 128,
// 256} with the 64-token warp tiles (2026-12-07, which replaces the first
// there). The fitted model picks plans 2.3 % slower than the best measured
// on average, 1.17x worst (bench/results/gemm.md). They only rank
// configurations: T8R128M2F's DRAM efficiency of 1 says it streams best,
// not that it reaches the copy rate.
// mma efficiency: fraction of the tensor rate a compute-bound tile
// reaches; DRAM efficiency: fraction of the copy rate a streaming tile
// reaches (wider stages stream better). Register notes:
// kT128 runs one block of 8 warps per SM (~180 registers per thread, no
// spills); kT128B2 caps registers at 128 for two blocks per SM (ptxas spills
// ~130 bytes).
// Fields: id, name, tokens, rows, warps rows x tokens, stages, sub, min
// blocks per SM, mma efficiency, DRAM efficiency[, fold_pow2].
inline constexpr TileConfig kTileConfigs[kNumTileConfigs] = {
    {TileConfigId::kT8, "T8", 8, 64, 4, 1, 8, 1, 4, 0.3, 0.751},
    {TileConfigId::kT16, "T16", 16, 64, 4, 1, 8, 1, 4, 0.45, 0.718},
    {TileConfigId::kT32, "T32", 32, 64, 4, 1, 6, 1, 4, 0.24, 0.96},
    {TileConfigId::kT64, "T64", 64, 64, 2, 2, 6, 1, 3, 0.198, 0.932},
    {TileConfigId::kT128, "T128", 128, 128, 4, 2, 5, 1, 1, 0.357, 0.79},
    {TileConfigId::kT8W4, "T8W4", 8, 64, 4, 1, 4, 4, 2, 0.3, 0.783},
    {TileConfigId::kT16W4, "T16W4", 16, 64, 4, 1, 4, 4, 2, 0.45, 0.948},
    {TileConfigId::kT64W2, "T64W2", 64, 64, 2, 2, 4, 2, 2, 0.43, 0.83},
    {TileConfigId::kT128B2, "T128B2", 128, 128, 4, 2, 4, 1, 2, 0.394, 0.79},
    {TileConfigId::kT128W2, "T128W2", 128, 128, 4, 2, 3, 2, 1, 0.41, 0.79},
    // Decode tiles added 2026-12-02. The M <= 16 GEMMs were bound by
    // instructions and latency on the SM side (ncu, 2026-11-30: ~320 warp
    // instructions per 2 KB of weights, warps stalled waiting on shared
    // memory), not by DRAM: these put 12-16 warps on an SM instead of 8
    // (Q: four 64-row blocks; M2: each warp two independent fragments of a
    // 128-row block; T16W4F: three blocks), and F removes the bf16 multiply
    // of the widening (8 instead of 10 instructions per 16 weight bytes; it
    // measured within 1 % either way). Occupancies hold on the A100's 164 KB
    // (gemm_config_test). Efficiencies: fitted, see above.
    {TileConfigId::kT16W4F, "T16W4F", 16, 64, 4, 1, 3, 4, 2, 0.45, 0.822, true},
    {TileConfigId::kT8W2Q, "T8W2Q", 8, 64, 4, 1, 3, 2, 4, 0.3, 0.863, false},
    {TileConfigId::kT8W2QF, "T8W2QF", 8, 64, 4, 1, 3, 2, 4, 0.3, 0.903, true},
    {TileConfigId::kT8R128M2F, "T8R128M2F", 8, 128, 4, 1, 4, 2, 2, 0.3, 1.0, true},
    // The prefill tile with the widening's bf16 multiply folded into the
    // block scale (3 instead of 4 instructions per widened register; the
    // multiply was 8.8 % of the tile's instructions under ncu): 2-6 % faster
    // than kT128W2 on every GLM-5 projection at M = 256-2048 and 3-8 % on
    // the grouped MoE at 4096 tokens (H200 running this sm80 code, sweep of
    // 2026-12-03, bench/results/gemm.md). Its mma efficiency is kT128W2's
    // times the measured 1.05; kT128W2 stays as its unfolded twin in the tests.
    {TileConfigId::kT128W2F, "T128W2F", 128, 128, 4, 2, 3, 2, 1, 0.43, 0.79, true},
    // 64 tokens on the prefill tile's 32 x 64 warp tiles (4 x 1 warps of 32
    // rows x 64 tokens), so each widened weight fragment feeds 8 token
    // fragments where T64 / T64W2 (2 x 2 warps of 32 x 32) feed 4. At M = 64
    // T64R4W2F took 56.2 us on the dense gate/up (T64W2 75.6) and 70.1 on
    // o_proj (T64W2 96.0); at 128-256 tokens it was 1-8 % ahead of T128W2F,
    // which the model does not resolve (H200 running this sm80 code, weights
    // tiled across rows, bench/gemm/calibration/h200_sweep_2026-12-07_t64r4.txt).
    // Efficiencies fitted to that sweep with every other constant held
    // (FIT_ONLY=T64R4F,T64R4W2F fit_heuristic.py ...). Grouped plans take
    // them too: the grouped MoE of a 2048-token chunk (64 rows an expert) ran
    // gate/up on T64R4W2F in 4310 us against T128W2F's 5843 and down on
    // T64R4F / T64R4W2F in 2545 / 2590 against 3035 (H100 running this sm80
    // code, every configuration forced, 2026-12-07 session 44,
    // bench/gemm/calibration/h100_sweep_2026-12-07_grouped2048.txt). At 4096
    // tokens the model puts gate/up on T64R4W2F, not T128W2F with the tail
    // split (moe.h): 1.5 % slower with gemm_bench's even routing (128 +- 11
    // rows an expert, where the tail takes the few rows past 128), but the
    // FP8 layer's 4096-token prefill chunk ran 1.09x faster with it than with
    // a model that counts the tail split and keeps T128W2F there (engine_bench's
    // router spreads the rows unevenly, so remainders fall anywhere in a tile).
    {TileConfigId::kT64R4F, "T64R4F", 64, 128, 4, 1, 4, 1, 2, 0.332, 0.768, true},
    {TileConfigId::kT64R4W2F, "T64R4W2F", 64, 128, 4, 1, 3, 2, 1, 0.364, 1.0, true},
};

const TileConfig& GetTileConfig(TileConfigId id);
// The index of the configuration named `name` (TileConfig::name), or -1.
int FindTileConfig(const char* name);

// Token tiles of block_tokens one group (an expert's rows) fills on
// average when its row count N is Poisson with mean `mean_rows` (T tokens
// each routed to k of E experts: N ~ Binomial(T, k / E)), given N >= 1:
// E[ceil(N / block_tokens) | N >= 1]. A 4096-token chunk of GLM-5 (~128
// rows per expert) fills 1.48 tiles of 128 on average, not 1.
double ExpectedTokenTilesPerGroup(double mean_rows, int block_tokens);

inline constexpr int kMaxGemmSegments = 4;

// Grouped (MoE) work lists, for the W8A16 and W4A16 launchers alike:
// entries of block_tokens rows a list may need for max_rows permuted rows
// over num_experts experts (sum over experts of ceil(rows / block_tokens)
// <= max_rows / block_tokens + the experts with rows).
int64_t MaxGroupedWorkEntries(int64_t max_rows, int num_experts, int block_tokens);
// Entries a tail list may need (the tail split, moe.h): each expert with
// rows has at most one last partial main tile of fewer than
// min(below, main_tokens) rows, in entries of tail_tokens rows.
int64_t MaxGroupedTailEntries(int64_t max_rows, int num_experts, int below, int main_tokens, int tail_tokens);
// Workspace bytes of a tail split's two lists (16 bytes an entry, and a
// 16-byte count after each list).
inline size_t GroupedTailSplitBytes(int64_t main_entries, int64_t tail_entries) {
  return static_cast<size_t>(main_entries + 1 + tail_entries + 1) * 16;
}

// One weight matrix streamed by the launch (see w8a16_gemm.h).
struct GemmSegmentShape {
  int64_t rows = 0;       // output features (gate rows in SiLU·mul mode)
  int weight_bytes = 1;   // 1 = e4m3, 2 = bf16
};

struct GemmProblem {
  int64_t m = 0;  // dense: tokens; grouped: expected tokens per expert
  int64_t k = 0;
  GemmSegmentShape segments[kMaxGemmSegments];
  int num_segments = 1;
  bool silu_mul = false;  // each output reads a gate row and an up row
  // Grouped (MoE) launches: one GEMM per expert present (split-K too when
  // the workspace holds the partials of every tile the launch may have).
  bool grouped = false;
  int64_t groups = 1;     // expected experts with work
  int num_sms = 108;
  size_t workspace_bytes = 0;  // split-K partials must fit here
};

struct GemmPlan {
  TileConfigId config = TileConfigId::kT8;
  int splits = 1;              // split-K factor (blockIdx.z)
  int64_t token_tiles = 0;     // dense: ceil(m / block_tokens)
  int64_t row_tiles = 0;       // summed over segments
  size_t workspace_bytes = 0;  // needed by this plan (0 when splits == 1)
  double cost = 0;             // model estimate (arbitrary units), for tests/logs
};

// Output columns one block produces for a segment.
int64_t OutputColumnsPerTile(const TileConfig& c, bool silu_mul);
int64_t RowTiles(const GemmProblem& p, const TileConfig& c);
// K stages of a segment: k * weight_bytes / (64 * sub).
int64_t KStages(int64_t k, int weight_bytes, int sub = 1);
// True if every segment's row (k * weight_bytes) is a whole number of the
// configuration's stages.
bool ConfigSupports(const GemmProblem& p, const TileConfig& c);

// Split-K workspace layout: kSplitCounterBytes of per-tile counters at
// offset 0 (the same place for every plan, so one zeroed workspace serves
// any sequence of launches), then the fp32 partial tiles
// [splits][tiles][block_tokens * block_rows].
inline constexpr size_t kSplitCounterBytes = 64 * 1024;
inline constexpr int64_t kMaxSplitTiles = kSplitCounterBytes / 4;
// Bytes a split-K plan needs (0 for splits == 1; SIZE_MAX when the tile
// count exceeds kMaxSplitTiles).
size_t SplitWorkspaceBytes(const TileConfig& c, int64_t tiles, int splits);

// Chooses the configuration and split factor minimising a simple model:
// per-SM time = (blocks on the busiest SM) x max(weight+activation bytes
// over the SM's bandwidth share, mma work over the SM's tensor rate x
// config efficiency), plus the split-K partial traffic. Deterministic.
GemmPlan ChooseGemmPlan(const GemmProblem& p);

// The plan for a given configuration and split factor (clamped to
// [1, fewest K stages of a segment]). Used by
// tests and benchmarks to exercise every configuration; check
// ConfigSupports first.
GemmPlan MakeGemmPlan(const GemmProblem& p, TileConfigId id, int splits);

std::ostream& operator<<(std::ostream& os, const GemmPlan& plan);

// The streaming decode kernel (w8a16_stream.cu: weights straight from
// global memory into mma fragments, K split over the warps of a block, no
// split-K over blocks): tiles of at most kStreamMaxTokens tokens (a grouped
// launch's work entries), dense launches of at most kStreamMaxDenseTokens
// (beyond 8 tokens: one 8-token B fragment per 8 tokens, StreamPlan::
// token_frags).
inline constexpr int kStreamMaxTokens = 8;
inline constexpr int kStreamMaxTokenFrags = 4;
inline constexpr int kStreamMaxDenseTokens = kStreamMaxTokens * kStreamMaxTokenFrags;
// Output rows of a block: 16 (one row per fragment row, 8 tokens) or 8 (two
// K halves per row, at most kStreamTwoHalvesMaxTokens tokens; or SiLU·mul:
// a gate and an up row per output).
inline constexpr int kStreamTileRows1 = 16;
inline constexpr int kStreamTileRows2 = 8;
inline constexpr int kStreamTwoHalvesMaxTokens = 4;
// Warps an SM holds of the kernel (its registers: <= 128 a thread).
inline constexpr int kStreamWarpsPerSm = 16;
// What the launchers' force_stream_warps may be: -1 (the tile kernel), 0
// (the plan's width) or a block width the kernel is instantiated for.
inline bool ValidForcedStreamWarps(int w) { return w == -1 || w == 0 || w == 1 || w == 2 || w == 4 || w == 8; }

struct StreamPlan {
  int streams = 1;  // K halves per fragment (1 or 2)
  int warps = 1;    // warps of a block, each on its own part of K (1, 2, 4, 8)
  int64_t row_tiles = 0;
  int tile_rows = kStreamTileRows1;  // output columns a block
  int token_frags = 1;  // 8-token B fragments (ceil(m / 8); > 1: one K stream)
};

// The shape of the problem: `m` tokens (a grouped launch: up to
// kStreamMaxTokens a work entry, so one K half), each segment's `rows`,
// SiLU·mul.
struct StreamProblem {
  int64_t m = 1;
  const int64_t* rows = nullptr;
  int num_segments = 1;
  bool silu = false;
  bool grouped = false;
};

// Two K halves up to kStreamTwoHalvesMaxTokens tokens (twice the blocks for
// the same rows; not with SiLU·mul or grouped); then the most warps a block
// (1-8) for which every block is resident at once (row tiles x warps <=
// SMs x kStreamWarpsPerSm): more loads in flight per row without a second
// wave. Dense launches only (the grouped one takes moe.h's width).
StreamPlan ChooseStreamPlan(const StreamProblem& p, int num_sms);
// The same with the block's warps given (tests and benchmarks).
StreamPlan MakeStreamPlan(const StreamProblem& p, int warps);

}  // namespace spar::gemm

#endif  // SPAR_KERNELS_CUDA_GEMM_GEMM_CONFIG_H_
