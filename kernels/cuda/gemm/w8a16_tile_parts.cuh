// The parts of the W8A16 tile kernel (internal to kernels/cuda/gemm;
// w8a16_gemm_kernel.cuh composes them): a tile's shape (GemmTile), its
// copies (WeightSlots, RowSlots: which 16-byte chunks of the weight rows,
// block scales and activation rows a thread moves into a pipeline stage,
// worked out once per tile) and one stage's mma work (MmaStage). Apart, each
// reads as one concept and the kernel as its phases (ptxas's K loops came
// out within 3 % of the inline version's length, and the prefill GEMMs ran
// 1-3 % faster: bench/results, session 49).
//
// Orientation: Yᵀ = W·Xᵀ. Weight rows are the mma.m16n8k16 "A" operand (16
// rows per fragment), tokens the "B" operand (8 per fragment), so a decode
// step with one token wastes 7/8 of a tiny mma instead of 15/16, and the
// weight bytes go straight from shared memory into A fragments.
//
// K permutation: a dot product may sum its K terms in any order as long as
// A and B agree. Within each 64-byte stage slice of a weight row, lane t of
// a quad owns the 16 contiguous bytes [16t, 16t+16) (e4m3: 16 values = 4
// mma k-steps; bf16: 8 values = 2 k-steps), loaded with one 16-byte LDS.
// For k-step s the fragment's logical columns {2t, 2t+1} and {2t+8, 2t+9}
// hold the real columns 4s'+{0,1} and 4s'+{2,3} of that lane's span (s' the
// step within the span), and the activation fragment is read with the same
// mapping (again 16-byte LDS). So no weight byte is shuffled: one e4m3 word
// (4 values) widens to exactly the two bf16x2 registers a k-step needs.
//
// Block scales: a tile's weight rows lie in one 128-row scale block (two in
// SiLU·mul mode: gate and up), and a 64-column slice in one 128-column
// block, so the scale is constant per slice and per fragment half. The
// accumulator is kept in units of the current block's scale and rescaled by
// old/new when the 128-column block changes (one multiply per accumulator
// per 128 columns); products stay exact (e4m3 -> bf16 is exact).
//
// Stages: cp.async, weights 64·kSub B/row, activations 128·kSub B/token
// (e4m3 weights; bf16 ones half) XOR-swizzled so fragment reads are
// conflict-free.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_TILE_PARTS_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_TILE_PARTS_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/gemm_launch_internal.h"

namespace spar::gemm::internal {

__device__ __forceinline__ void Lds128(uint32_t (&r)[4], const unsigned char* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  r[0] = v.x;
  r[1] = v.y;
  r[2] = v.z;
  r[3] = v.w;
}

template <class T>
__device__ __forceinline__ T MinOf(T a, T b) {
  return a < b ? a : b;
}

__device__ __forceinline__ uint32_t PackBf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// kSub: 64-byte slices per weight row per pipeline stage. kSub = 1 gives the
// smallest stages; kSub = 4 makes every weight row contribute 256 contiguous
// bytes per stage, which HBM serves far better than 64-byte pieces of 64
// different rows (decode reads nothing else).
template <int kBT_, int kBR_, int kWR_, int kWT_, int kStages_, int kSub_>
struct GemmTile {
  static constexpr int kBT = kBT_;  // tokens (mma N side)
  static constexpr int kBR = kBR_;  // weight rows (mma M side)
  static constexpr int kWR = kWR_;  // warps along rows
  static constexpr int kWT = kWT_;  // warps along tokens
  static constexpr int kStages = kStages_;
  static constexpr int kSub = kSub_;
  static constexpr int kThreads = kWR * kWT * 32;
  static constexpr int kWarpRows = kBR / kWR;
  static constexpr int kMI = kWarpRows / 16;  // 16-row fragments per warp
  static constexpr int kWarpTokens = kBT / kWT;
  static constexpr int kNJ = kWarpTokens / 8;  // 8-token fragments per warp
  static constexpr int kWPitch = 64 * kSub;    // weight tile row pitch (bytes)
  static constexpr int kXPitch = 128 * kSub;   // activation row pitch (e4m3 stages; bf16 uses half)
  static constexpr int kWStageBytes = kBR * kWPitch;
  static constexpr int kXStageBytes = kBT * kXPitch;
  static constexpr int kStageBytes = kWStageBytes + kXStageBytes;
  static constexpr int kPitchC = kBR + 4;  // fp32 epilogue tile pitch (bank spread)
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kEpilogueBytes = kBT * kPitchC * 4;
  static constexpr int kRegionBytes = kPipelineBytes > kEpilogueBytes ? kPipelineBytes : kEpilogueBytes;
  static constexpr int kSmemBytes = kRegionBytes + kStages * kSub * 2 * 4 + 16;
  static constexpr int kWChunks = kBR * 4 * kSub / kThreads;  // 16-byte weight chunks per thread per stage
  static constexpr int kXSlots = (kBT * 8 * kSub + kThreads - 1) / kThreads;
  static_assert(kWarpRows % 16 == 0 && kWarpTokens % 8 == 0, "warp tile");
  static_assert((kBR * 4 * kSub) % kThreads == 0, "weight chunks per thread");
  static_assert(kThreads % (8 * kSub) == 0 && kXSlots <= 8, "activation slots");
  static_assert(kSub == 1 || kSub == 2 || kSub == 4 || kSub == 8, "sub-stages");
  static_assert(128 % kBR == 0 || kBR == 128, "a tile must sit inside one 128-row scale block");
};

// Row-parity swizzle for tiles whose row pitch is a multiple of 128 bytes:
// odd rows swap their 64-byte halves of each 128 bytes, so lanes reading
// rows g and g + 1 at the same column hit different banks.
template <int kSub>
__device__ __forceinline__ int ParitySwizzle(int row) {
  return kSub >= 2 ? (row & 1) << 2 : 0;
}

// A thread's copies of one tile's weight rows and their block scales (set
// once per tile with Aim), then of stage ks into pipeline buffer buf.
template <class Tile>
struct WeightSlots {
  const unsigned char* src[Tile::kWChunks];
  uint32_t dst[Tile::kWChunks];
  bool valid[Tile::kWChunks];
  int64_t step;  // a stage's step along each weight row
  const float* srow_lo;
  const float* srow_hi;

  // Weight tile row r: plain mode segment row col0 + r; SiLU·mul mode rows
  // 16q..16q+7 are gate rows col0 + 8q.., rows 16q+8.. the matching up rows,
  // so one 16-row fragment holds gate and up of the same 8 outputs.
  __device__ __forceinline__ void Aim(const KernelSegment& seg, int64_t col0, bool silu, int64_t k, int tid) {
    const int64_t row_bytes = seg.is_fp8 != 0 ? k : 2 * k;
    const int64_t row_blocks = (seg.n + kTileRows - 1) / kTileRows;  // tiled across rows: tiles a span
    // A stage's step along each weight row: kSub spans (tiled along K: kSub
    // tiles; across rows: kSub columns of tiles).
    step = seg.tiled == kTiledAlongK      ? Tile::kSub * kTileBytes
           : seg.tiled == kTiledAcrossRows ? Tile::kSub * row_blocks * kTileBytes
                                           : Tile::kWPitch;
#pragma unroll
    for (int c = 0; c < Tile::kWChunks; ++c) {
      const int idx = tid + c * Tile::kThreads;
      const int r = idx / (4 * Tile::kSub);
      const int ch = idx % (4 * Tile::kSub);
      int64_t j;
      const uint8_t* base;
      if (silu) {
        j = col0 + (r >> 4) * 8 + (r & 7);
        base = (r & 8) ? seg.w_up : seg.w;
      } else {
        j = col0 + r;
        base = seg.w;
      }
      valid[c] = j < seg.n;
      const int64_t jr = valid[c] ? j : 0;
      // Row-major: byte 16 ch of row jr's stage slice. Tiled (w8a16_tiles.h):
      // the slice's span ch / 4 is the tile of (jr's 16-row block, that span),
      // [row block][span] along K or [span][row block] across rows, jr's 64
      // bytes at (jr % 16) * 64 in it.
      const int64_t in_tile = (jr & 15) * 64 + (ch & 3) * 16;
      if (seg.tiled == kTiledAlongK) {
        src[c] = base + (jr >> 4) * (kTileRows * row_bytes) + (ch >> 2) * kTileBytes + in_tile;
      } else if (seg.tiled == kTiledAcrossRows) {
        src[c] = base + ((ch >> 2) * row_blocks + (jr >> 4)) * kTileBytes + in_tile;
      } else {
        src[c] = base + jr * row_bytes + ch * 16;
      }
      dst[c] = r * Tile::kWPitch + ((ch ^ ParitySwizzle<Tile::kSub>(r)) << 4);
    }
    const int64_t scale_ld = (k + 127) / 128;
    srow_lo = seg.scale + (col0 / 128) * scale_ld;
    srow_hi = silu ? seg.scale_up + (col0 / 128) * scale_ld : srow_lo;
  }

  // s_scale: [kStages][kSub][2], the gate/lo and up/hi rows' scale per
  // 64-byte slice (one per slice and fragment half: slice q of the row is
  // columns [64q, 64q + 64), 128-column block q / 2). kFp8: e4m3 weights.
  template <bool kFp8>
  __device__ __forceinline__ void Load(unsigned char* smem, float* s_scale, int64_t ks, int buf, int tid) const {
    unsigned char* sw = smem + buf * Tile::kStageBytes;
#pragma unroll
    for (int c = 0; c < Tile::kWChunks; ++c) {
      cuda::CpAsync16(sw + dst[c], src[c] + ks * step, valid[c] ? 16 : 0);
    }
    if (kFp8 && tid < 2 * Tile::kSub) {
      const int u = tid >> 1;
      cuda::CpAsync4(&s_scale[(buf * Tile::kSub + u) * 2 + (tid & 1)],
                     ((tid & 1) ? srow_hi : srow_lo) + ((ks * Tile::kSub + u) >> 1));
    }
  }
};

// A thread's copies of one tile's activation rows (X, or the rows
// x_row_index picks in a grouped launch): set once per tile with Aim, then
// of stage ks into pipeline buffer buf. kFp8: the stage of e4m3 weights
// (128 K values; bf16 weights: 64). kKTail: X has fewer columns (k_valid)
// than the weights' rows (k) and the stage loads zero-fill past them; a
// separate instance, so shapes without a tail run the loads without the
// extra predicate (it cost 3-6 % of their time, measured on the H200
// running this sm80 code).
template <class Tile, bool kFp8, bool kKTail>
struct RowSlots {
  static constexpr int kChunksPerRow = (kFp8 ? 8 : 4) * Tile::kSub;  // 16-byte chunks per token per stage
  static constexpr int kPitch = kChunksPerRow * 16;

  // Slots keep a 32-bit row index, not a pointer: registers are the
  // limiting resource of the 128x128 tile. Every slot of a thread has the
  // same 16-byte chunk (kThreads is a multiple of kChunksPerRow).
  int32_t row[Tile::kXSlots];
  uint32_t dst[Tile::kXSlots];
  uint32_t mask;  // bit c: slot c copies a valid row; bit 8 + c: slot c is in the tile
  int64_t stages;  // stages whose chunk of this thread lies inside k_valid
  int chunk;       // the 16-byte chunk of a token's stage this thread copies
  const unsigned char* base;
  int64_t ld_bytes;

  // Slot c is in the tile in every thread when the tile's chunks fill it
  // whole (all slots on the e4m3 path of the large tiles): known at compile
  // time, so those slots' setup and copies carry no test.
  static __device__ __forceinline__ constexpr bool InEveryThread(int c) {
    return (c + 1) * Tile::kThreads <= Tile::kBT * kChunksPerRow;
  }

  // K tails: X columns past k_valid are zero-filled. k_valid is a multiple
  // of 8, so a thread's 16-byte chunk is wholly inside or outside a row, and
  // it is inside for the first `stages` stages (precomputed: a per-stage
  // byte clamp cost 10-20 % of the GEMM time).
  __device__ __forceinline__ void Aim(const KernelParams& p, int64_t row0_out, int tok_count, int tid) {
    chunk = tid % kChunksPerRow;
    base = reinterpret_cast<const unsigned char*>(p.x);
    ld_bytes = p.ldx * 2;
    const int64_t wide = (p.k_valid * 2 - chunk * 16 + kPitch - 1) / kPitch;
    stages = kKTail ? (wide > 0 ? wide : 0) : INT64_MAX;
    mask = 0;
#pragma unroll
    for (int c = 0; c < Tile::kXSlots; ++c) {
      const int idx = tid + c * Tile::kThreads;
      const int r = idx / kChunksPerRow;
      const bool active = InEveryThread(c) || idx < Tile::kBT * kChunksPerRow;
      const bool valid = active && r < tok_count;
      int64_t x_row = 0;
      if (valid) {
        x_row = row0_out + r;
        if (p.x_row_index != nullptr) x_row = p.x_row_index[x_row];
      }
      row[c] = static_cast<int32_t>(x_row);
      mask |= (valid ? 1u << c : 0u) | (active ? 1u << (8 + c) : 0u);
      // e4m3 stages: each 128-byte slice XORs its chunk with (row & 7), so the
      // fragment reads of 8 tokens x 4 lanes hit 32 distinct banks; bf16
      // stages: 64-byte slices, odd rows swap halves when the pitch is >= 128.
      dst[c] = kFp8 ? r * kPitch + ((chunk & ~7) << 4) + (((chunk & 7) ^ (r & 7)) << 4)
                    : r * kPitch + ((chunk ^ ParitySwizzle<Tile::kSub>(r)) << 4);
    }
  }

  __device__ __forceinline__ void Load(unsigned char* smem, int64_t ks, int buf) const {
    unsigned char* sx = smem + buf * Tile::kStageBytes + Tile::kWStageBytes;
    // Past the tail the copy reads nothing (size 0) from the row's start.
    const bool in_row = !kKTail || ks < stages;
    const unsigned char* xk = base + (in_row ? chunk * 16 + ks * kPitch : 0);
#pragma unroll
    for (int c = 0; c < Tile::kXSlots; ++c) {
      if (InEveryThread(c) || (mask & (1u << (8 + c)))) {
        cuda::CpAsync16(sx + dst[c], xk + row[c] * ld_bytes, ((mask >> c) & 1u) && in_row ? 16 : 0);
      }
    }
  }
};

// One stage's mma work of a warp: its kMI x kNJ fragments over the stage's
// kSub slices (buffer buf; ks: the stage's index along the weights' rows;
// first: the tile's first stage, which sets the accumulators' scale). kFold:
// e4m3 weights widen to value * 2^-120 (no bf16 multiply in the mma loop)
// and the epilogue applies the 2^120 with the block scale (see
// W8A16GemmKernel).
template <class Tile, bool kFp8, bool kFold>
__device__ __forceinline__ void MmaStage(float (&acc)[Tile::kMI][Tile::kNJ][4], float& cur_lo, float& cur_hi,
                                         const unsigned char* smem, const float* s_scale, int buf, int64_t ks,
                                         bool first, int wr0, int wt0, int g, int t) {
  constexpr int kMI = Tile::kMI;
  constexpr int kNJ = Tile::kNJ;
  const unsigned char* sw = smem + buf * Tile::kStageBytes;
  const unsigned char* sx = sw + Tile::kWStageBytes;
  const int wswz = ParitySwizzle<Tile::kSub>(g);  // rows g and g + 8 have g's parity
#pragma unroll
  for (int u = 0; u < Tile::kSub; ++u) {
    // Weight bytes of this lane: rows g and g+8 of each 16-row fragment.
    uint32_t wr[kMI][2][4];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int row = wr0 + mi * 16 + g;
      const int off = (((u * 4 + t) ^ wswz) << 4);
      Lds128(wr[mi][0], sw + row * Tile::kWPitch + off);
      Lds128(wr[mi][1], sw + (row + 8) * Tile::kWPitch + off);
    }

    if constexpr (kFp8) {
      const float s_lo = s_scale[(buf * Tile::kSub + u) * 2];
      const float s_hi = s_scale[(buf * Tile::kSub + u) * 2 + 1];
      if (first && u == 0) {
        cur_lo = s_lo;
        cur_hi = s_hi;
      } else if (((ks * Tile::kSub + u) & 1) == 0) {  // entering a new 128-column block
        const float r_lo = cur_lo / s_lo;
        const float r_hi = cur_hi / s_hi;
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
          for (int nj = 0; nj < kNJ; ++nj) {
            acc[mi][nj][0] *= r_lo;
            acc[mi][nj][1] *= r_lo;
            acc[mi][nj][2] *= r_hi;
            acc[mi][nj][3] *= r_hi;
          }
        cur_lo = s_lo;
        cur_hi = s_hi;
      }
      // 64 columns = 4 k-steps, processed as two pairs; each pair reads
      // one 16-byte activation chunk per 8-token fragment.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t a[2][kMI][4];
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int mi = 0; mi < kMI; ++mi) {
            if constexpr (kFold) {
              cuda::E4m3x4ToScaledBf16x4(wr[mi][0][2 * h + j], a[j][mi][0], a[j][mi][2]);
              cuda::E4m3x4ToScaledBf16x4(wr[mi][1][2 * h + j], a[j][mi][1], a[j][mi][3]);
            } else {
              cuda::E4m3x4ToBf16x4(wr[mi][0][2 * h + j], a[j][mi][0], a[j][mi][2]);
              cuda::E4m3x4ToBf16x4(wr[mi][1][2 * h + j], a[j][mi][1], a[j][mi][3]);
            }
          }
#pragma unroll
        for (int nj = 0; nj < kNJ; ++nj) {
          const int tok = wt0 + nj * 8 + g;  // tok & 7 == g
          uint32_t xb[4];
          Lds128(xb, sx + tok * Tile::kXPitch + u * 128 + (((2 * t + h) ^ g) << 4));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const uint32_t b[2] = {xb[2 * j], xb[2 * j + 1]};
#pragma unroll
            for (int mi = 0; mi < kMI; ++mi) cuda::MmaBf16M16N8K16(acc[mi][nj], a[j][mi], b, acc[mi][nj]);
          }
        }
      }
    } else {
      // bf16: 32 columns = 2 k-steps; lane t owns columns [8t, 8t+8).
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        const int tok = wt0 + nj * 8 + g;
        uint32_t xb[4];
        Lds128(xb, sx + tok * (Tile::kXPitch / 2) + (((u * 4 + t) ^ wswz) << 4));
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t b[2] = {xb[2 * j], xb[2 * j + 1]};
#pragma unroll
          for (int mi = 0; mi < kMI; ++mi) {
            const uint32_t a[4] = {wr[mi][0][2 * j], wr[mi][1][2 * j], wr[mi][0][2 * j + 1], wr[mi][1][2 * j + 1]};
            cuda::MmaBf16M16N8K16(acc[mi][nj], a, b, acc[mi][nj]);
          }
        }
      }
    }
  }
}

}  // namespace spar::gemm::internal

#endif  // SPAR_KERNELS_CUDA_GEMM_W8A16_TILE_PARTS_CUH_
