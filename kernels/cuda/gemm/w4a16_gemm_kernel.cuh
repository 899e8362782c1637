// The W4A16 tile kernel (internal to kernels/cuda/gemm; w4a16_gemm.cu
// instantiates it). Same orientation as the W8A16 kernel: Yᵀ = W·Xᵀ, weight
// rows are the mma.m16n8k16 A operand, tokens the B operand.
//
// Per 64-column chunk a lane loads its 16 bytes of each 16-row fragment
// (w4_layout.h: four 32-bit words, one per k-step, already in A-register
// order) and its 32 contiguous activation bytes per 8-token fragment (two
// 16-byte LDS, XOR-swizzled by token so 8 tokens x 4 lanes hit distinct
// banks). Dequantization is register arithmetic only:
//   int4:  (w >> 4p) & 0x000F000F | 0x43004300 is bf16x2 (128 + code); minus
//          bf16x2 (128 + zero) gives code - zero exactly; the fp32 sum of a
//          group is multiplied by its scale when the group's last chunk ends.
//   nvfp4: each code's sign and 3 magnitude bits go to bf16 bits 15 and
//          6..8 (a bf16 2^-126 too small, subnormal for e = 0; the word's
//          bits are placed for that, nvfp4_word.h) times the e4m3 block
//          scale x 2^110 as bf16: exact, value x scale x 2^-16; the global
//          scale x 2^16 multiplies the finished sum.
// Pipeline: cp.async multi-stage over kSub chunks per stage (weights,
// activations, the stage's scales and zeros); split-K over chunks; the
// epilogue goes through shared memory (fp32, token-major) for split-K,
// SiLU·mul pairing and coalesced stores.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_KERNEL_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_KERNEL_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/w4a16_kernel_params.h"
#include "kernels/cuda/gemm/w4a16_block_steps.cuh"

namespace spar::gemm::w4 {

template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, bool kFp4>
struct Tile {
  static constexpr int kThreads = kWR * kWT * 32;
  static constexpr int kWarpRows = kBR / kWR;
  static constexpr int kMI = kWarpRows / 16;
  static constexpr int kWarpTokens = kBT / kWT;
  static constexpr int kNJ = kWarpTokens / 8;
  static constexpr int kWBytes = (kBR / 16) * kSub * 512;
  static constexpr int kXPitch = kSub * 128;
  static constexpr int kXBytes = kBT * kXPitch;
  static constexpr int kSBytes = kBR * kSub * 4;  // int4: fp32 scales; nvfp4: 4 block scales per row and chunk
  static constexpr int kZBytes = kFp4 ? 0 : kBR * kSub;
  static constexpr int kStageBytes = (kWBytes + kXBytes + kSBytes + kZBytes + 15) / 16 * 16;
  static constexpr int kPitchC = kBR + 4;
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kEpilogueBytes = kBT * kPitchC * 4;
  static constexpr int kSmemBytes = (kPipelineBytes > kEpilogueBytes ? kPipelineBytes : kEpilogueBytes) + 16;
  static constexpr int kWPieces = (kBR / 16) * kSub * 32;  // 16-byte copies per stage
  static constexpr int kXPieces = kBT * kSub * 8;
  static constexpr int kXSlots = (kXPieces + kThreads - 1) / kThreads;
  static_assert(kWarpRows % 16 == 0 && kWarpTokens % 8 == 0, "warp tile");
  static_assert(kWPieces % kThreads == 0, "weight copies per thread");
};

__device__ __forceinline__ void Lds128(uint32_t (&r)[4], const unsigned char* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  r[0] = v.x;
  r[1] = v.y;
  r[2] = v.z;
  r[3] = v.w;
}

template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, bool kFp4, int kMinBlocks>
__global__ void __launch_bounds__(kWR* kWT * 32, kMinBlocks) W4A16GemmKernel(const KernelParams p) {
  using T = Tile<kBT, kBR, kWR, kWT, kStages, kSub, kFp4>;
  constexpr int kThreads = T::kThreads, kMI = T::kMI, kNJ = T::kNJ, kPitchC = T::kPitchC;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_is_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wr0 = (warp % kWR) * T::kWarpRows;
  const int wt0 = (warp / kWR) * T::kWarpTokens;

  // ---- which tile --------------------------------------------------------
  BlockTile bt;
  if (!LocateBlockTile<kBT, kFp4>(p, bt)) return;
  const uint8_t* values = bt.values;
  const float* scales = bt.scales;
  const uint8_t* zeros = bt.zeros;
  const uint8_t* fp4s = bt.fp4_scales;
  const float* gscale = bt.global_scale;
  const int64_t row0_out = bt.row0_out;
  const int tok_count = bt.tok_count, split = bt.split;
  const int64_t tile_id = bt.tile_id;
  const int64_t prow0 = static_cast<int64_t>(blockIdx.y) * kBR;  // first packed row
  const int64_t chunks = p.k / 64;
  const int64_t c_begin = split * chunks / p.splits, c_end = (split + 1) * chunks / p.splits;
  const int nst = static_cast<int>((c_end - c_begin + kSub - 1) / kSub);

  // ---- per-thread activation slots (fixed over the K loop) ---------------
  const unsigned char* xbase = reinterpret_cast<const unsigned char*>(p.x);
  const int64_t ldx_bytes = p.ldx * 2;
  int32_t xrow[T::kXSlots];
  uint32_t xvalid = 0;
#pragma unroll
  for (int s = 0; s < T::kXSlots; ++s) {
    const int j = tid + s * kThreads;
    const int r = j / (kSub * 8);
    int64_t row = 0;
    if (j < T::kXPieces && r < tok_count) {
      row = row0_out + r;
      if (p.x_row_index != nullptr) row = p.x_row_index[row];
      xvalid |= 1u << s;
    }
    xrow[s] = static_cast<int32_t>(row);
  }

  auto load_stage = [&](int st, int buf) {
    unsigned char* sw = smem + buf * T::kStageBytes;
    unsigned char* sx = sw + T::kWBytes;
    unsigned char* ss = sx + T::kXBytes;
    unsigned char* sz = ss + T::kSBytes;
    const int64_t cs = c_begin + static_cast<int64_t>(st) * kSub;
#pragma unroll
    for (int s = 0; s < T::kWPieces / kThreads; ++s) {
      const int j = tid + s * kThreads;
      const int i = j / (kSub * 32), u = (j / 32) % kSub, q = j % 32;
      const int64_t c = cs + u;
      if (c < c_end) {
        cuda::CpAsync16(sw + (i * kSub + u) * 512 + q * 16, values + ((prow0 / 16 + i) * chunks + c) * 512 + q * 16);
      }
    }
#pragma unroll
    for (int s = 0; s < T::kXSlots; ++s) {
      const int j = tid + s * kThreads;
      const int r = j / (kSub * 8), u = (j / 8) % kSub, q = j % 8;
      const int64_t c = cs + u;
      if (j < T::kXPieces && c < c_end) {
        cuda::CpAsync16(sx + r * T::kXPitch + u * 128 + ((q ^ (r & 7)) << 4),
                        xbase + static_cast<int64_t>(xrow[s]) * ldx_bytes + c * 128 + q * 16, ((xvalid >> s) & 1u) ? 16 : 0);
      }
    }
    if constexpr (!kFp4) {
      constexpr int kPer = kBR / 4 + kBR / 16;  // scale pieces + zero pieces per chunk
      for (int j = tid; j < kSub * kPer; j += kThreads) {
        const int u = j / kPer, q = j % kPer;
        const int64_t c = cs + u;
        if (c >= c_end) continue;
        const int64_t gi = c * 64 / p.group;
        if (q < kBR / 4) {
          cuda::CpAsync16(ss + (u * kBR + q * 4) * 4, scales + gi * p.rows_padded + prow0 + q * 4);
        } else {
          const int qq = q - kBR / 4;
          cuda::CpAsync16(sz + u * kBR + qq * 16, zeros + gi * p.rows_padded + prow0 + qq * 16);
        }
      }
    } else {
      for (int j = tid; j < kBR * kSub; j += kThreads) {
        const int r = j / kSub, u = j % kSub;
        const int64_t c = cs + u;
        if (c < c_end) cuda::CpAsync4(ss + (r * kSub + u) * 4, fp4s + (prow0 + r) * (p.k / 16) + c * 4);
      }
    }
  };

  // ---- main loop ----------------------------------------------------------
  float acc[kMI][kNJ][4];
  float accg[kMI][kNJ][4];  // int4: the current group's sum
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = accg[mi][nj][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nst) load_stage(s, s);
    cuda::CpAsyncCommit();
  }
  for (int it = 0; it < nst; ++it) {
    cuda::CpAsyncWait<kStages - 2>();
    __syncthreads();
    {
      const int nxt = it + kStages - 1;
      if (nxt < nst) load_stage(nxt, nxt % kStages);
      cuda::CpAsyncCommit();
    }
    const unsigned char* sw = smem + (it % kStages) * T::kStageBytes;
    const unsigned char* sx = sw + T::kWBytes;
    const unsigned char* ss = sx + T::kXBytes;
    const unsigned char* sz = ss + T::kSBytes;
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      const int64_t c = c_begin + static_cast<int64_t>(it) * kSub + u;
      if (c >= c_end) break;  // the same for the whole block
      uint32_t wq[kMI][4], lo[kMI], hi[kMI];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        const int rt = (wr0 >> 4) + mi;
        Lds128(wq[mi], sw + (rt * kSub + u) * 512 + lane * 16);
        const int r_lo = wr0 + mi * 16 + g;
        if constexpr (kFp4) {
          lo[mi] = E4m3Pow2_110PairBf16(ss[(r_lo * kSub + u) * 4 + t]);
          hi[mi] = E4m3Pow2_110PairBf16(ss[((r_lo + 8) * kSub + u) * 4 + t]);
        } else {
          lo[mi] = (0x4300u + sz[u * kBR + r_lo]) * 0x10001u;
          hi[mi] = (0x4300u + sz[u * kBR + r_lo + 8]) * 0x10001u;
        }
      }
      uint32_t xb[kNJ][8];
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        const unsigned char* base = sx + (wt0 + nj * 8 + g) * T::kXPitch + u * 128;
        uint32_t a4[4], b4[4];
        Lds128(a4, base + (((2 * t) ^ g) << 4));
        Lds128(b4, base + (((2 * t + 1) ^ g) << 4));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          xb[nj][e] = a4[e];
          xb[nj][4 + e] = b4[e];
        }
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t a[kMI][4];
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            if constexpr (kFp4) {
              const uint32_t bits = nvfp4_word::E2m1PairBitsOf(wq[mi][s], r);
              a[mi][r] = Bf16x2Mul(bits, (r & 1) ? hi[mi] : lo[mi]);
            } else {
              const uint32_t v = (wq[mi][s] >> (4 * r)) & 0x000F000Fu;
              a[mi][r] = Bf16x2Sub(v | 0x43004300u, (r & 1) ? hi[mi] : lo[mi]);
            }
          }
        }
        MmaStep<kMI, kNJ, kFp4>(acc, accg, a, xb, s);
      }
      if constexpr (!kFp4) {
        // The group ends with this chunk (or the split does): scale its sum.
        if (((c + 1) * 64) % p.group == 0 || c + 1 == c_end) {
          const float* sf = reinterpret_cast<const float*>(ss) + u * kBR;
          float s_lo[kMI], s_hi[kMI];
#pragma unroll
          for (int mi = 0; mi < kMI; ++mi) {
            s_lo[mi] = sf[wr0 + mi * 16 + g];
            s_hi[mi] = sf[wr0 + mi * 16 + g + 8];
          }
          FoldGroup<kMI, kNJ>(acc, accg, s_lo, s_hi);
        }
      }
    }
  }
  cuda::CpAsyncWait<0>();
  __syncthreads();

  // ---- fp32 tile to shared memory, then split-K and the stores ----------
  float* sc = reinterpret_cast<float*>(smem);
  AccumulatorsToSmem<kMI, kNJ, kPitchC>(sc, acc, wr0, wt0, g, t);
  __syncthreads();
  float gs_a = 1.0f, gs_b = 1.0f;  // nvfp4: (gate or the only matrix, up)
  if constexpr (kFp4) {
    gs_a = gscale[0] * 0x1p16f;  // the block scales carried 2^-16
    gs_b = p.silu ? gscale[1] * 0x1p16f : gs_a;
  }
  StoreTile<kBT, kBR, kThreads>(p, sc, tok_count, row0_out, split, tile_id, blockIdx.y, gs_a, gs_b, &s_is_last);
}

template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, bool kFp4, int kMinBlocks>
cudaError_t LaunchW4Tile(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  using T = Tile<kBT, kBR, kWR, kWT, kStages, kSub, kFp4>;
  return cuda::LaunchWithSmem<W4A16GemmKernel<kBT, kBR, kWR, kWT, kStages, kSub, kFp4, kMinBlocks>>(
      grid, T::kThreads, T::kSmemBytes, stream, p);
}

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_KERNEL_CUH_
