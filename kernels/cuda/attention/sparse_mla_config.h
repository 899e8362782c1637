// Tile constants of the sparse MLA kernel, shared by the kernel (.cu) and
// the planner (plain C++, CPU-tested), so the planner knows each variant's
// shared-memory footprint without a GPU. Internal to kernels/cuda/attention.
#ifndef SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_CONFIG_H_
#define SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_CONFIG_H_

namespace spar::mla {

inline constexpr int kThreads = 256;  // 8 warps
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kBlockKeys = 32;  // keys gathered per pipeline stage
inline constexpr int kDim = 576;       // q·k width
inline constexpr int kDimV = 512;      // value width
inline constexpr int kKSteps = kDim / 16;
inline constexpr int kNopeKSteps = kDimV / 16;            // e4m3 lanes of an FP8 row
inline constexpr int kRopeKSteps = kKSteps - kNopeKSteps;  // bf16 rope lanes
// Smem rows of 584 bf16 (1168 B = 292 words, 292 mod 32 = 4): eight
// consecutive rows start 16 B apart in the banks, so ldmatrix is
// conflict-free.
inline constexpr int kRowElems = kDim + 8;
inline constexpr int kRowBytes = kRowElems * 2;
inline constexpr int kBf16RowBytes = kDim * 2;  // 1152 in the cache
inline constexpr int kFp8RowBytes = 656;        // 512 e4m3 | 4 fp32 | 64 bf16
inline constexpr int kFp8RopeOffset = kDimV + 16;  // the bf16 rope lanes in an FP8 row
inline constexpr int kMaxKeysPerCta = 2048;     // resolved slots kept in smem
inline constexpr int kMaxSplits = 256;          // merge kernel's smem weights
inline constexpr int kPStride = 40;             // bf16 per probability row
// Partial scores in the mma accumulator order: a group is one n-tile (8
// keys) of 8 rows, 64 floats plus 4 of padding (which puts the 8-float runs
// of two rows' four n-tiles in distinct banks); a slab is 16 rows x 32 keys.
inline constexpr int kSredGroupFloats = 68;
inline constexpr int kSredSlabFloats = 8 * kSredGroupFloats;

// Heads per CTA (16, 32, 64) and cache format fix the layout of the wide-tile
// kernel (sparse_mla.cu; FP8 rows use it for 32 and 64 heads only).
struct TileConfig {
  int head_tile;
  bool fp8;
  // 16-head tiles are gather-bound: two stages keep them at ~105 KB so two
  // CTAs share a 228 KB multiprocessor (H100/H200; one on an A100).
  constexpr int Stages() const { return head_tile == 16 ? 2 : 3; }
  constexpr int TileBytes() const { return kBlockKeys * kRowBytes; }
  constexpr int RawStageBytes() const { return kBlockKeys * kFp8RowBytes; }
  constexpr int QTileBytes() const { return head_tile * kRowBytes; }
  // bf16: Stages() tiles gathered in place; fp8: Stages() raw tiles, read
  // straight into mma fragments. The query tile is staged through this
  // area too (at its end), so the area is at least that large.
  constexpr int GatherBytes() const {
    const int stages = Stages() * (fp8 ? RawStageBytes() : TileBytes());
    return stages > QTileBytes() ? stages : QTileBytes();
  }
  // One 16-row slab of partial scores per warp (16 heads x its k-slice).
  constexpr int SredBytes() const { return kWarps * kSredSlabFloats * 4; }
  // The bf16 64-head tile (three stages) runs block b's P·V in the same
  // barrier interval as block b+1's softmax, so its probabilities and
  // rescale factors are double-buffered. At 32 heads this loop measured 3-4 %
  // slower than the three-barrier one (H100 running sm80 code, 2026-12-07).
  constexpr bool Pipelined() const { return !fp8 && head_tile == 64; }
  constexpr int PBuffers() const { return Pipelined() ? 2 : 1; }
  // Probabilities in bf16; fp8: one copy per 128-column scale block of V,
  // each key's probability times that key's scale for the block.
  constexpr int PCopies() const { return fp8 ? kDimV / 128 : 1; }
  constexpr int PBytes() const { return PBuffers() * PCopies() * head_tile * kPStride * 2; }
  // Registers allow two 256-thread CTAs per SM at 16 heads (ptxas -v: 127
  // registers) and one above (164-255 registers). The kernel's
  // __launch_bounds__ asks for exactly this, and the planner counts it.
  constexpr int MaxCtasByRegisters() const { return head_tile == 16 ? 2 : 1; }
  // The final max and sum per head (2 * head_tile floats) reuse the partial
  // score area after the key loop.
  constexpr int SmemBytes() const {
    return GatherBytes() + SredBytes() + PBytes() + PBuffers() * head_tile * 4 + kMaxKeysPerCta * 4;
  }
};

// The FP8 kernel for narrow head tiles (8 or 16 heads; sparse_mla_narrow.cu):
// scores are computed transposed (keys x heads, so 8 heads fill an mma's
// n = 8 without padding), each warp owns 64 of the 512 value columns in both
// phases, and P·V takes its V fragments from the widened K fragments by
// register transposes. Two barriers per 32-key block.
struct NarrowTileConfig {
  int head_tile;  // 8 or 16
  static constexpr int kStages = 2;
  static constexpr int kSredPitch = kBlockKeys + 4;  // floats per (warp, head) row of partial scores
  static constexpr int kPPitch = kBlockKeys + 8;     // bf16 per head row of P
  static constexpr int kOPitch = kDimV + 4;          // floats per head row of the output staging
  // Rows sit 672 bytes apart in shared memory (656 + 16): 8-byte loads of
  // eight rows' codes at one offset hit distinct banks.
  static constexpr int kSmemRowBytes = kFp8RowBytes + 16;
  constexpr int StageBytes() const { return kBlockKeys * kSmemRowBytes; }
  constexpr int GatherBytes() const { return kStages * StageBytes(); }
  constexpr int QTileBytes() const { return head_tile * kRowBytes; }
  constexpr int SredBytes() const { return kWarps * head_tile * kSredPitch * 4; }
  constexpr int PBytes() const { return (kDimV / 128) * head_tile * kPPitch * 2; }
  constexpr int SmemBytes() const {
    return GatherBytes() + SredBytes() + PBytes() + 3 * head_tile * 4 + kMaxKeysPerCta * 4;
  }
  // ptxas -v: 106 (8 heads) / 127 (16 heads) registers. Three 8-head CTAs
  // (80 registers, a few spilled) measured 7 % slower than two (H200).
  constexpr int MaxCtasByRegisters() const { return 2; }
};

}  // namespace spar::mla

#endif  // SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_CONFIG_H_
