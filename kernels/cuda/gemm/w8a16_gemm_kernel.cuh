// The W8A16 tile GEMM kernel, one output tile a block (internal to
// kernels/cuda/gemm; included by the per-configuration .cu files). Its
// layout, K permutation, block scales and stages: w8a16_tile_parts.cuh.
//
// Pipeline: cp.async multi-stage, then the epilogue goes through shared
// memory (fp32 tile, token-major, aliased onto the pipeline) for split-K
// partials, SiLU·mul pairing, residual add and coalesced stores.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_KERNEL_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_KERNEL_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/grouped_block_order.h"
#include "kernels/cuda/gemm/grouped_work.cuh"
#include "kernels/cuda/gemm/split_k_sum.cuh"
#include "kernels/cuda/gemm/w8a16_tile_parts.cuh"

namespace spar::gemm::internal {

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
  const int64_t row_bytes = fp8 ? p.k : 2 * p.k;
  const int cols_per_tile = silu ? kBR / 2 : kBR;
  const int64_t col0 = static_cast<int64_t>(tile_in_seg) * cols_per_tile;  // first segment column

  // Stages of kSub x 64 bytes per weight row (the launcher checks that they
  // divide the row).
  const int64_t kst_total = row_bytes / Tile::kWPitch;
  const int64_t ks_begin = split * kst_total / p.splits;
  const int64_t ks_end = (split + 1) * kst_total / p.splits;
  const int nst = static_cast<int>(ks_end - ks_begin);

  // ---- Phase 2 state: the accumulators, in units of the current scales ----
  float acc[kMI][kNJ][4];
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
  float cur_lo = 1.0f, cur_hi = 1.0f;  // scale the accumulator is expressed in

  WeightSlots<Tile> weights;
  weights.Aim(seg, col0, silu, p.k, tid);

  // The activation copies and the K loop, compiled once for e4m3 weights
  // and once for bf16 ones (fused_a's last segment): with the activation
  // pitch and which slots copy known at compile time, a stage of the e4m3
  // path issues no run-time pitch arithmetic or slot predicates.
  auto k_loop = [&](auto fp8_tag) {
    constexpr bool kFp8 = decltype(fp8_tag)::value;
    RowSlots<Tile, kFp8, kKTail> rows;
    rows.Aim(p, row0_out, tok_count, tid);
    auto load_stage = [&](int64_t ks, int buf) {
      weights.template Load<kFp8>(smem, s_scale, ks, buf, tid);
      rows.Load(smem, ks, buf);
    };

    // ---- Phase 2: main loop --------------------------------------------------
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < nst) load_stage(ks_begin + s, s);
      cuda::CpAsyncCommit();
    }
    for (int it = 0; it < nst; ++it) {
      cuda::CpAsyncWait<kStages - 2>();
      __syncthreads();
      {
        const int nxt = it + kStages - 1;
        if (nxt < nst) load_stage(ks_begin + nxt, nxt % kStages);
        cuda::CpAsyncCommit();
      }
      MmaStage<Tile, kFp8, kFold>(acc, cur_lo, cur_hi, smem, s_scale, it % kStages, ks_begin + it, it == 0, wr0, wt0,
                                  g, t);
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
