// The W8A16 tile GEMM kernel (internal to kernels/cuda/gemm; included by the
// per-configuration .cu files).
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
// Block scales: a block's weight rows lie in one 128-row scale block (two
// in SiLU·mul mode: gate and up), and a 64-column stage in one 128-column
// block, so the scale is constant per stage and per fragment half. The
// accumulator is kept in units of the current block's scale and rescaled by
// old/new when the 128-column block changes (one multiply per accumulator
// per 128 columns); products stay exact (e4m3 -> bf16 is exact).
//
// Pipeline: cp.async multi-stage (weights 64 B/row/stage, activations 128
// B/token/stage XOR-swizzled so fragment reads are conflict-free), then the
// epilogue goes through shared memory (fp32 tile, token-major) for split-K
// partials, SiLU·mul pairing, residual add and coalesced stores.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_KERNEL_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_KERNEL_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/grouped_block_order.h"
#include "kernels/cuda/gemm/grouped_work.cuh"
#include "kernels/cuda/gemm/split_k_sum.cuh"

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
template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub>
struct GemmTile {
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

// kKTail: X has fewer columns (k_valid) than the weights' rows (k) and the
// stage loads zero-fill past them. A separate instance, so shapes without a
// tail run the loads without the extra predicate (it cost 3-6 % of their
// time, measured on the H200 running this sm80 code).
// kFold: e4m3 weights widen to value * 2^-120 (no bf16 multiply in the mma
// loop) and the epilogue applies the 2^120 with the block scale. The mma's
// products are then 2^120 smaller than the true ones: one with |w * x| <
// 2^-6 (w the e4m3 value) is an fp32 subnormal, kept to 2^-29 absolute,
// far below a bf16 output's resolution -- provided the tensor cores keep
// subnormal inputs and products, which the GPU tests check (folded against
// unfolded twins; e4m3 weights of exponent 0 and 1, whose folded values
// and products are all subnormal).
template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, int kMinBlocks, bool kFold, bool kKTail>
__global__ void __launch_bounds__(kWR* kWT * 32, kMinBlocks) W8A16GemmKernel(const KernelParams p) {
  using Tile = GemmTile<kBT, kBR, kWR, kWT, kStages, kSub>;
  constexpr int kThreads = Tile::kThreads;
  constexpr int kMI = Tile::kMI;
  constexpr int kNJ = Tile::kNJ;
  constexpr int kPitchC = Tile::kPitchC;

  extern __shared__ __align__(128) unsigned char smem[];
  // [kStages][kSub][2]: scale of the gate/lo and up/hi rows per 64-byte slice.
  float* s_scale = reinterpret_cast<float*>(smem + Tile::kRegionBytes);
  __shared__ int s_is_last;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;  // mma group: fragment row (weights) / column (tokens)
  const int t = lane & 3;   // thread in group: owns a 16-byte K span
  const int wr0 = (warp % kWR) * Tile::kWarpRows;
  const int wt0 = (warp / kWR) * Tile::kWarpTokens;

  // ---- Phase 0: which tile this block computes ----------------------------
  const bool grouped = p.work != nullptr;
  KernelSegment seg = p.seg[0];
  int64_t row0_out;  // first output row (dense: token; grouped: permuted row)
  int tok_count;
  int tile_in_seg;
  int split = 0;
  int64_t tile_id = 0;
  if (grouped) {
    // One entry's output tiles run together (grouped_block_order.h).
    const GroupedBlock block = GroupedBlockAt(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y);
    if (static_cast<int>(block.entry) >= *p.work_count) return;
    const GroupedWork work = ApplyWorkEntry(p, block.entry, seg);
    row0_out = work.first_row;
    tok_count = work.rows;
    tile_in_seg = static_cast<int>(block.row_tile);
    split = blockIdx.z;
    tile_id = static_cast<int64_t>(block.entry) * p.total_row_tiles + tile_in_seg;
  } else {
#pragma unroll
    for (int s = 1; s < kMaxGemmSegments; ++s) {
      if (s < p.num_segments && static_cast<int>(blockIdx.y) >= p.seg[s].first_tile) seg = p.seg[s];
    }
    row0_out = static_cast<int64_t>(blockIdx.x) * kBT;
    tok_count = static_cast<int>(MinOf<int64_t>(kBT, p.m - row0_out));
    tile_in_seg = blockIdx.y - seg.first_tile;
    split = blockIdx.z;
    tile_id = static_cast<int64_t>(blockIdx.x) * p.total_row_tiles + blockIdx.y;
  }
  const bool fp8 = seg.is_fp8 != 0;
  const bool silu = p.silu != 0;
  const int64_t k = p.k;
  const int64_t row_bytes = fp8 ? k : 2 * k;
  const int64_t scale_ld = (k + 127) / 128;
  const int cols_per_tile = silu ? kBR / 2 : kBR;
  const int64_t col0 = static_cast<int64_t>(tile_in_seg) * cols_per_tile;  // first segment column
  const float* srow_lo = seg.scale + (col0 / 128) * scale_ld;
  const float* srow_hi = silu ? seg.scale_up + (col0 / 128) * scale_ld : srow_lo;

  // Stages of kSub x 64 bytes per weight row (the launcher checks that they
  // divide the row).
  const int64_t kst_total = row_bytes / Tile::kWPitch;
  const int64_t ks_begin = split * kst_total / p.splits;
  const int64_t ks_end = (split + 1) * kst_total / p.splits;
  const int nst = static_cast<int>(ks_end - ks_begin);

  // ---- Phase 1: per-thread copy slots (fixed over the K loop) ------------
  // Weight tile row r: plain mode segment row col0 + r; SiLU·mul mode rows
  // 16q..16q+7 are gate rows col0 + 8q.., rows 16q+8.. the matching up rows,
  // so one 16-row fragment holds gate and up of the same 8 outputs.
  const int64_t row_blocks = (seg.n + kTileRows - 1) / kTileRows;  // tiled across rows: tiles a span
  // A stage's step along each weight row: kSub spans (tiled along K: kSub
  // tiles; across rows: kSub columns of tiles).
  const int64_t wstep = seg.tiled == kTiledAlongK      ? kSub * kTileBytes
                        : seg.tiled == kTiledAcrossRows ? kSub * row_blocks * kTileBytes
                                                        : Tile::kWPitch;
  const unsigned char* wsrc[Tile::kWChunks];
  uint32_t wdst[Tile::kWChunks];
  bool wvalid[Tile::kWChunks];
#pragma unroll
  for (int c = 0; c < Tile::kWChunks; ++c) {
    const int idx = tid + c * kThreads;
    const int r = idx / (4 * kSub);
    const int ch = idx % (4 * kSub);
    int64_t j;
    const uint8_t* base;
    if (silu) {
      j = col0 + (r >> 4) * 8 + (r & 7);
      base = (r & 8) ? seg.w_up : seg.w;
    } else {
      j = col0 + r;
      base = seg.w;
    }
    wvalid[c] = j < seg.n;
    const int64_t jr = wvalid[c] ? j : 0;
    // Row-major: byte 16 ch of row jr's stage slice. Tiled (w8a16_tiles.h):
    // the slice's span ch / 4 is the tile of (jr's 16-row block, that span),
    // [row block][span] along K or [span][row block] across rows, jr's 64
    // bytes at (jr % 16) * 64 in it.
    const int64_t in_tile = (jr & 15) * 64 + (ch & 3) * 16;
    if (seg.tiled == kTiledAlongK) {
      wsrc[c] = base + (jr >> 4) * (kTileRows * row_bytes) + (ch >> 2) * kTileBytes + in_tile;
    } else if (seg.tiled == kTiledAcrossRows) {
      wsrc[c] = base + ((ch >> 2) * row_blocks + (jr >> 4)) * kTileBytes + in_tile;
    } else {
      wsrc[c] = base + jr * row_bytes + ch * 16;
    }
    wdst[c] = r * Tile::kWPitch + ((ch ^ ParitySwizzle<kSub>(r)) << 4);
  }
  // ---- Phase 2 state: the accumulators, in units of the current scales ----
  float acc[kMI][kNJ][4];
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
  float cur_lo = 1.0f, cur_hi = 1.0f;  // scale the accumulator is expressed in

  // The activation copies and the K loop, compiled once for e4m3 weights and
  // once for bf16 ones (fused_a's last segment): with the activation pitch
  // and which slots copy known at compile time, a stage of the e4m3 path
  // issues no run-time pitch arithmetic or slot predicates.
  auto k_loop = [&](auto fp8_tag) {
    constexpr bool kFp8 = decltype(fp8_tag)::value;
    constexpr int x_chunks_per_row = (kFp8 ? 8 : 4) * kSub;  // 16-byte chunks per token per stage
    constexpr int x_pitch = x_chunks_per_row * 16;
    // Activation slots keep a 32-bit row index, not a pointer: registers are
    // the limiting resource of the 128x128 tile. Every slot of a thread has
    // the same 16-byte chunk (kThreads is a multiple of x_chunks_per_row).
    int32_t xrow[Tile::kXSlots];
    uint32_t xdst[Tile::kXSlots];
    uint32_t xmask = 0;  // bit c: slot c copies a valid row; bit 8 + c: slot c is in the tile
    const unsigned char* xbase = reinterpret_cast<const unsigned char*>(p.x);
    const int64_t ldx_bytes = p.ldx * 2;
    const int x_chunk = tid % x_chunks_per_row;
    // K tails: X columns past k_valid are zero-filled. k_valid is a multiple
    // of 8, so a thread's 16-byte chunk is wholly inside or outside a row, and
    // it is inside for the first x_stages stages (precomputed: a per-stage
    // byte clamp cost 10-20 % of the GEMM time).
    const int64_t x_stages_wide = (p.k_valid * 2 - x_chunk * 16 + x_pitch - 1) / x_pitch;
    const int64_t x_stages = kKTail ? (x_stages_wide > 0 ? x_stages_wide : 0) : INT64_MAX;
    // Slot c is in the tile in every thread when the tile's chunks fill it
    // whole (all slots on the e4m3 path of the large tiles): known at compile
    // time, so those slots' setup and copies carry no test.
    auto slot_in_every_thread = [](int c) { return (c + 1) * kThreads <= kBT * x_chunks_per_row; };
#pragma unroll
    for (int c = 0; c < Tile::kXSlots; ++c) {
      const int idx = tid + c * kThreads;
      const int r = idx / x_chunks_per_row;
      const bool active = slot_in_every_thread(c) || idx < kBT * x_chunks_per_row;
      const bool valid = active && r < tok_count;
      int64_t row = 0;
      if (valid) {
        row = row0_out + r;
        if (p.x_row_index != nullptr) row = p.x_row_index[row];
      }
      xrow[c] = static_cast<int32_t>(row);
      xmask |= (valid ? 1u << c : 0u) | (active ? 1u << (8 + c) : 0u);
      // e4m3 stages: each 128-byte slice XORs its chunk with (row & 7), so the
      // fragment reads of 8 tokens x 4 lanes hit 32 distinct banks; bf16
      // stages: 64-byte slices, odd rows swap halves when the pitch is >= 128.
      xdst[c] = kFp8 ? r * x_pitch + ((x_chunk & ~7) << 4) + (((x_chunk & 7) ^ (r & 7)) << 4)
                    : r * x_pitch + ((x_chunk ^ ParitySwizzle<kSub>(r)) << 4);
    }

    auto load_stage = [&](int64_t ks, int buf) {
      unsigned char* sw = smem + buf * Tile::kStageBytes;
      unsigned char* sx = sw + Tile::kWStageBytes;
#pragma unroll
      for (int c = 0; c < Tile::kWChunks; ++c) {
        cuda::CpAsync16(sw + wdst[c], wsrc[c] + ks * wstep, wvalid[c] ? 16 : 0);
      }
      // Past the tail the copy reads nothing (size 0) from the row's start.
      const bool x_in_row = !kKTail || ks < x_stages;
      const unsigned char* xk = xbase + (x_in_row ? x_chunk * 16 + ks * x_pitch : 0);
#pragma unroll
      for (int c = 0; c < Tile::kXSlots; ++c) {
        if (slot_in_every_thread(c) || (xmask & (1u << (8 + c)))) {
          cuda::CpAsync16(sx + xdst[c], xk + xrow[c] * ldx_bytes, ((xmask >> c) & 1u) && x_in_row ? 16 : 0);
        }
      }
      // One scale per 64-byte slice and fragment half (slice q of the row is
      // columns [64q, 64q + 64): 128-column block q / 2).
      if (kFp8 && tid < 2 * kSub) {
        const int u = tid >> 1;
        cuda::CpAsync4(&s_scale[(buf * kSub + u) * 2 + (tid & 1)],
                 ((tid & 1) ? srow_hi : srow_lo) + ((ks * kSub + u) >> 1));
      }
    };

    // ---- Phase 2: main loop --------------------------------------------------

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < nst) load_stage(ks_begin + s, s);
      cuda::CpAsyncCommit();
    }

    const int wswz = ParitySwizzle<kSub>(g);  // rows g and g + 8 have g's parity
    for (int it = 0; it < nst; ++it) {
      cuda::CpAsyncWait<kStages - 2>();
      __syncthreads();
      {
        const int nxt = it + kStages - 1;
        if (nxt < nst) load_stage(ks_begin + nxt, nxt % kStages);
        cuda::CpAsyncCommit();
      }
      const int buf = it % kStages;
      const unsigned char* sw = smem + buf * Tile::kStageBytes;
      const unsigned char* sx = sw + Tile::kWStageBytes;

#pragma unroll
      for (int u = 0; u < kSub; ++u) {
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
          const float s_lo = s_scale[(buf * kSub + u) * 2];
          const float s_hi = s_scale[(buf * kSub + u) * 2 + 1];
          if (it == 0 && u == 0) {
            cur_lo = s_lo;
            cur_hi = s_hi;
          } else if ((((ks_begin + it) * kSub + u) & 1) == 0) {  // entering a new 128-column block
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
                const uint32_t a[4] = {wr[mi][0][2 * j], wr[mi][1][2 * j], wr[mi][0][2 * j + 1],
                                       wr[mi][1][2 * j + 1]};
                cuda::MmaBf16M16N8K16(acc[mi][nj], a, b, acc[mi][nj]);
              }
            }
          }
        }
      }
    }
  };
  if (fp8) {
    k_loop(std::true_type{});
  } else {
    k_loop(std::false_type{});
  }
  cuda::CpAsyncWait<0>();
  __syncthreads();

  // ---- Phase 3: fp32 tile to shared memory, token-major -------------------
  // Folded weights: 2^120 first (the accumulator is in units of 2^-120),
  // then the scale, so neither product can overflow.
  const float unfold = kFold && fp8 ? cuda::kPow2_120 : 1.0f;
  float* sc = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      const int r = wr0 + mi * 16 + g;
      const int c = wt0 + nj * 8 + 2 * t;
      sc[c * kPitchC + r] = acc[mi][nj][0] * unfold * cur_lo;
      sc[(c + 1) * kPitchC + r] = acc[mi][nj][1] * unfold * cur_lo;
      sc[c * kPitchC + r + 8] = acc[mi][nj][2] * unfold * cur_hi;
      sc[(c + 1) * kPitchC + r + 8] = acc[mi][nj][3] * unfold * cur_hi;
    }
  __syncthreads();

  // ---- Phase 4: split-K: publish partials, the last block sums them ------
  if (p.splits > 1) {
    const int64_t tiles = static_cast<int64_t>(gridDim.x) * p.total_row_tiles;
    if (!SumSplitsInLastBlock<kBR, kPitchC, kThreads, kBT * kBR>(p, sc, split, tiles, tile_id, tok_count, tid, s_is_last)) {
      return;
    }
  }

  // ---- Phase 5: epilogue (activation, residual) and stores ----------------
  const int groups = cols_per_tile / 8;
  for (int i = tid; i < tok_count * groups; i += kThreads) {
    const int c = i / groups;
    const int j0 = (i % groups) * 8;
    const int64_t scol = col0 + j0;
    const int nvalid = static_cast<int>(MinOf<int64_t>(8, seg.n - scol));
    if (nvalid <= 0) continue;
    float v[8];
    const float* src = sc + c * kPitchC;
    if (silu) {
      const int q = j0 / 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float gt = src[q * 16 + e];
        const float up = src[q * 16 + 8 + e];
        v[e] = gt / (1.0f + expf(-gt)) * up;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = src[j0 + e];
    }
    const int64_t orow = row0_out + c;
    const int64_t col = seg.out_col0 + scol;
    if (p.residual != nullptr) {
      const uint16_t* rp = p.residual + orow * p.ldr + col;
      if (nvalid == 8 && (reinterpret_cast<uintptr_t>(rp) & 15) == 0) {
        const uint4 rv = *reinterpret_cast<const uint4*>(rp);
        const uint32_t rw[4] = {rv.x, rv.y, rv.z, rv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[2 * e] += __uint_as_float(rw[e] << 16);
          v[2 * e + 1] += __uint_as_float(rw[e] & 0xffff0000u);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (e < nvalid) v[e] += __uint_as_float(static_cast<uint32_t>(rp[e]) << 16);
        }
      }
    }
    if (p.y_fp32) {
      float* yp = static_cast<float*>(p.y) + orow * p.ldy + col;
      if (nvalid == 8 && (reinterpret_cast<uintptr_t>(yp) & 15) == 0) {
        *reinterpret_cast<float4*>(yp) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(yp + 4) = make_float4(v[4], v[5], v[6], v[7]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (e < nvalid) yp[e] = v[e];
        }
      }
    } else {
      __nv_bfloat16* yp = static_cast<__nv_bfloat16*>(p.y) + orow * p.ldy + col;
      if (nvalid == 8 && (reinterpret_cast<uintptr_t>(yp) & 15) == 0) {
        *reinterpret_cast<uint4*>(yp) =
            make_uint4(PackBf16x2(v[0], v[1]), PackBf16x2(v[2], v[3]), PackBf16x2(v[4], v[5]), PackBf16x2(v[6], v[7]));
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (e < nvalid) yp[e] = __float2bfloat16_rn(v[e]);
        }
      }
    }
  }
}

// One configuration's kernel with its shared memory (the limit raised once
// per device, kernels/cuda/common/launch_smem.cuh).
template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, int kMinBlocks, bool kFold, bool kKTail>
cudaError_t LaunchTileInstance(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  using Tile = GemmTile<kBT, kBR, kWR, kWT, kStages, kSub>;
  return cuda::LaunchWithSmem<W8A16GemmKernel<kBT, kBR, kWR, kWT, kStages, kSub, kMinBlocks, kFold, kKTail>>(
      grid, Tile::kThreads, Tile::kSmemBytes, stream, p);
}

template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, int kMinBlocks, bool kFold>
cudaError_t LaunchTile(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return p.k_valid < p.k
             ? LaunchTileInstance<kBT, kBR, kWR, kWT, kStages, kSub, kMinBlocks, kFold, true>(p, grid, stream)
             : LaunchTileInstance<kBT, kBR, kWR, kWT, kStages, kSub, kMinBlocks, kFold, false>(p, grid, stream);
}

}  // namespace spar::gemm::internal

#endif  // SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_KERNEL_CUH_
