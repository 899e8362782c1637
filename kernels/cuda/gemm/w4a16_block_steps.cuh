// The steps the two W4A16 kernels (w4a16_gemm_kernel.cuh: the tile kernel,
// w4a16_decode_kernel.cuh: the decode kernel) take the same way: which tile
// a block computes (dense or a grouped work entry); one k-step of mma over
// the warp's fragments and an int4 group's scaling; at the end the warps' fp32
// accumulators go to shared memory token-major, split-K blocks publish
// partials and the last block of a tile sums them in split order (bitwise
// the same whatever order the splits finish in), then the global scale,
// SiLU·mul pairing and coalesced 8-wide stores.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_BLOCK_STEPS_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_BLOCK_STEPS_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/grouped_block_order.h"
#include "kernels/cuda/gemm/nvfp4_word.h"
#include "kernels/cuda/gemm/split_k_sum.cuh"
#include "kernels/cuda/gemm/w4a16_kernel_params.h"

namespace spar::gemm::w4 {

// bf16x2 arithmetic on raw register words (the dequantized weights).
__device__ __forceinline__ uint32_t Bf16x2Sub(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

__device__ __forceinline__ uint32_t Bf16x2Mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

// (a & b) | c in one LOP3 (the compiler splits the two constants into two):
// the int4 widening's nibble mask and bf16 magic number.
template <uint32_t kAnd, uint32_t kOr>
__device__ __forceinline__ uint32_t AndOr(uint32_t a) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "n"(kAnd), "n"(kOr));
  return r;
}

// An e4m3 block scale times 2^110 as bf16 in both halves (exact: e4m3
// values have 4 significant bits and 2^110 keeps them in bf16's range). Times
// nvfp4_word's e2m1 bits (value x 2^-126) it gives value x scale x 2^-16:
// the kernels multiply the global scale by 2^16.
__device__ __forceinline__ uint32_t E4m3Pow2_110PairBf16(uint32_t byte) {
  const float scaled = __uint_as_float((byte & 0x80u) << 24 | (byte & 0x7fu) << 20);  // e4m3 x 2^-120, exact
  const uint32_t h = __float_as_uint(scaled * 0x1p115f * 0x1p115f) >> 16;
  return h | (h << 16);
}

// The tile of block (blockIdx.x, blockIdx.y, blockIdx.z): its matrix (a
// grouped entry's expert), its first output row and token count, its row
// tile, its split.
struct BlockTile {
  const uint8_t* values;
  const float* scales;
  const uint8_t* zeros;
  const uint8_t* fp4_scales;
  const float* global_scale;
  int64_t row0_out;  // dense: first token; grouped: first permuted row
  int tok_count;
  int row_tile;     // which kBR packed rows
  int split;
  int64_t tile_id;  // split-K counter and partials slot
};

// False when the block has nothing to do (a grouped entry past the count).
template <int kBT, bool kFp4>
__device__ __forceinline__ bool LocateBlockTile(const KernelParams& p, BlockTile& b) {
  b = {p.values, p.scales, p.zeros, p.fp4_scales, p.global_scale, 0, 0, 0, 0, 0};
  if (p.work != nullptr) {
    // One entry's output tiles run together (grouped_block_order.h).
    const GroupedBlock block = GroupedBlockAt(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y);
    if (static_cast<int>(block.entry) >= *p.work_count) return false;
    b.row_tile = static_cast<int>(block.row_tile);
    const int4 wk = reinterpret_cast<const int4*>(p.work)[block.entry];
    b.values += wk.x * p.values_stride;
    if constexpr (kFp4) {
      b.fp4_scales += wk.x * p.fp4_stride;
      b.global_scale += wk.x * (p.silu ? 2 : 1);
    } else {
      b.scales += wk.x * p.scales_stride;
      b.zeros += wk.x * p.zeros_stride;
    }
    b.row0_out = wk.y;
    b.tok_count = wk.z;
  } else {
    b.row0_out = static_cast<int64_t>(blockIdx.x) * kBT;
    b.row_tile = static_cast<int>(blockIdx.y);
    b.tok_count = static_cast<int>(p.m - b.row0_out < kBT ? p.m - b.row0_out : kBT);
    b.split = blockIdx.z;
    b.tile_id = static_cast<int64_t>(blockIdx.x) * p.row_tiles + blockIdx.y;
  }
  return true;
}

// One k-step: every (fragment, token fragment) product. NVFP4 sums into
// acc directly (its scales are in the weights); int4 into accg, the group's
// sum in units of its scale.
template <int kMI, int kNJ, bool kFp4>
__device__ __forceinline__ void MmaStep(float (&acc)[kMI][kNJ][4], float (&accg)[kMI][kNJ][4],
                                        const uint32_t (&a)[kMI][4], const uint32_t (&xb)[kNJ][8], int ks) {
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    const uint32_t b[2] = {xb[nj][2 * ks], xb[nj][2 * ks + 1]};
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      if constexpr (kFp4) {
        cuda::MmaBf16M16N8K16(acc[mi][nj], a[mi], b, acc[mi][nj]);
      } else {
        cuda::MmaBf16M16N8K16(accg[mi][nj], a[mi], b, accg[mi][nj]);
      }
    }
  }
}

// An int4 group (or a split inside one) ends: acc += accg x its scale per
// row (rows g and g + 8 of fragment mi), accg restarts.
template <int kMI, int kNJ>
__device__ __forceinline__ void FoldGroup(float (&acc)[kMI][kNJ][4], float (&accg)[kMI][kNJ][4], const float (&s_lo)[kMI],
                                          const float (&s_hi)[kMI]) {
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      acc[mi][nj][0] += accg[mi][nj][0] * s_lo[mi];
      acc[mi][nj][1] += accg[mi][nj][1] * s_lo[mi];
      acc[mi][nj][2] += accg[mi][nj][2] * s_hi[mi];
      acc[mi][nj][3] += accg[mi][nj][3] * s_hi[mi];
#pragma unroll
      for (int e = 0; e < 4; ++e) accg[mi][nj][e] = 0.0f;
    }
}

__device__ __forceinline__ uint32_t PackBf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// acc[mi][nj] is the mma fragment of rows wr0 + 16 mi + {g, g + 8} and
// tokens wt0 + 8 nj + {2t, 2t + 1}; sc is [tokens][kPitchC] fp32.
template <int kMI, int kNJ, int kPitchC>
__device__ __forceinline__ void AccumulatorsToSmem(float* sc, const float (&acc)[kMI][kNJ][4], int wr0, int wt0, int g,
                                                   int t) {
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      const int r = wr0 + mi * 16 + g;
      const int c = wt0 + nj * 8 + 2 * t;
      sc[c * kPitchC + r] = acc[mi][nj][0];
      sc[(c + 1) * kPitchC + r] = acc[mi][nj][1];
      sc[c * kPitchC + r + 8] = acc[mi][nj][2];
      sc[(c + 1) * kPitchC + r + 8] = acc[mi][nj][3];
    }
}

// The tile of kBT tokens x kBR packed rows in sc (after a barrier), of row
// block `row_block`: split-K reduction, then Y. gs_a / gs_b multiply the
// gate (or only) and up sums (NVFP4's global scales; 1 for int4). Call with
// every thread of the block; returns early in blocks that are not the last
// split of their tile.
template <int kBT, int kBR, int kThreads>
__device__ __forceinline__ void StoreTile(const KernelParams& p, float* sc, int tok_count, int64_t row0_out, int split,
                                          int64_t tile_id, int64_t row_block, float gs_a, float gs_b, int* s_is_last) {
  constexpr int kPitchC = kBR + 4;
  const int tid = threadIdx.x;
  if (p.splits > 1) {
    const int64_t tiles = static_cast<int64_t>(gridDim.x) * p.row_tiles;
    if (!SumSplitsInLastBlock<kBR, kPitchC, kThreads, kBT * kBR>(p, sc, split, tiles, tile_id, tok_count, tid, *s_is_last)) {
      return;
    }
  }

  const bool silu = p.silu != 0;
  const int cols_per_tile = silu ? kBR / 2 : kBR;
  const int64_t col0 = row_block * cols_per_tile;
  const int groups8 = cols_per_tile / 8;
  for (int i = tid; i < tok_count * groups8; i += kThreads) {
    const int c = i / groups8;
    const int j0 = (i % groups8) * 8;
    const int64_t scol = col0 + j0;
    const int nvalid = static_cast<int>(p.n - scol < 8 ? p.n - scol : 8);
    if (nvalid <= 0) continue;
    float v[8];
    const float* src = sc + c * kPitchC;
    if (silu) {
      const int q = j0 / 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float gt = src[q * 16 + e] * gs_a;
        const float up = src[q * 16 + 8 + e] * gs_b;
        v[e] = gt / (1.0f + expf(-gt)) * up;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = src[j0 + e] * gs_a;
    }
    const int64_t orow = row0_out + c;
    if (p.y_fp32) {
      float* yp = static_cast<float*>(p.y) + orow * p.ldy + scol;
      if (nvalid == 8 && (reinterpret_cast<uintptr_t>(yp) & 15) == 0) {
        *reinterpret_cast<float4*>(yp) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(yp + 4) = make_float4(v[4], v[5], v[6], v[7]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (e < nvalid) yp[e] = v[e];  // unrolled: v stays in registers
        }
      }
    } else {
      __nv_bfloat16* yp = static_cast<__nv_bfloat16*>(p.y) + orow * p.ldy + scol;
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

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_BLOCK_STEPS_CUH_
