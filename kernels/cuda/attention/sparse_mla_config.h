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
// Smem rows of 584 bf16 (1168 B = 292 words, 292 mod 32 = 4): eight
// consecutive rows start 16 B apart in the banks, so ldmatrix is
// conflict-free.
inline constexpr int kRowElems = kDim + 8;
inline constexpr int kRowBytes = kRowElems * 2;
inline constexpr int kBf16RowBytes = kDim * 2;  // 1152 in the cache
inline constexpr int kFp8RowBytes = 656;        // 512 e4m3 | 4 fp32 | 64 bf16
inline constexpr int kMaxKeysPerCta = 2048;     // resolved slots kept in smem
inline constexpr int kMaxSplits = 256;          // merge kernel's smem weights
inline constexpr int kSredStride = 40;          // floats per partial-score row
inline constexpr int kPStride = 40;             // bf16 per probability row

// Heads per CTA (16, 32, 64) and cache format fix the layout.
struct TileConfig {
  int head_tile;
  bool fp8;
  // 16-head tiles are gather-bound: two stages keep them at ~105 KB so two
  // CTAs share a 228 KB multiprocessor (H100/H200; one on an A100).
  constexpr int Stages() const { return head_tile == 16 ? 2 : 3; }
  constexpr int TileBytes() const { return kBlockKeys * kRowBytes; }
  constexpr int RawStageBytes() const { return kBlockKeys * kFp8RowBytes; }
  // bf16: Stages() tiles gathered in place; fp8: Stages() raw tiles plus one
  // dequantized bf16 tile. The query tile is staged through this area too.
  constexpr int GatherBytes() const {
    return fp8 ? Stages() * RawStageBytes() + TileBytes() : Stages() * TileBytes();
  }
  constexpr int SredBytes() const { return kWarps * 16 * kSredStride * 4; }
  constexpr int PBytes() const { return head_tile * kPStride * 2; }
  constexpr int SmemBytes() const {
    return GatherBytes() + SredBytes() + PBytes() + 3 * head_tile * 4 + kMaxKeysPerCta * 4;
  }
};

}  // namespace spar::mla

#endif  // SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_CONFIG_H_
