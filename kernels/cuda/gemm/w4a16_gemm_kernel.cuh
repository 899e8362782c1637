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
  const int64_t prow0 = static_cast<int64_t>(bt.row_tile) * kBR;  // first packed row
  const int64_t chunks = p.k / 64;
  const int64_t c_begin = split * chunks / p.splits, c_end = (split + 1) * chunks / p.splits;
  const int nst = static_cast<int>((c_end - c_begin + kSub - 1) / kSub);

  // ---- per-thread copy slots (fixed over the K loop) --------------------
  // Every copy a thread issues has its source and shared destination worked
  // out here, once; a stage only adds its K offset. (Worked out per copy and
  // stage, with a 64-bit division per scale copy and a 64-bit modulo per
  // chunk, the int4 tile issued ~11 instructions per mma against the FP8
  // tile's ~5, 2026-12-07: tools/sass_local.sh.) Stage st holds the split's
  // chunks [st kSub, st kSub + kSub); a thread's chunk u within a stage is
  // the same for all its copies of a kind (kThreads is a multiple of the
  // copies per chunk row), so one bound check a kind per stage.
  const int nch = static_cast<int>(c_end - c_begin);  // chunks of this split
  const uint32_t sbase = cuda::SmemAddress(smem);
  // Weights: piece j = tid + s kThreads of a stage is 16 bytes q of chunk u
  // of fragment row block i.
  constexpr int kWSlots = T::kWPieces / kThreads;
  static_assert(kThreads % (kSub * 32) == 0, "a thread's weight chunk is the same in every slot");
  const int w_u = (tid / 32) % kSub;
  const uint8_t* const wsrc = values + ((prow0 / 16) * chunks + c_begin + w_u) * 512 + (tid % 32) * 16;
  uint32_t wofs[kWSlots];  // from wsrc; fragment row blocks are `chunks` chunks apart
  uint32_t wdst[kWSlots];
#pragma unroll
  for (int s = 0; s < kWSlots; ++s) {
    const int j = tid + s * kThreads;
    const int i = j / (kSub * 32);
    wofs[s] = static_cast<uint32_t>(i * chunks * 512);
    wdst[s] = static_cast<uint32_t>((i * kSub + w_u) * 512 + (j % 32) * 16);
  }
  // Activations: piece j = tid + s kThreads is 16 bytes q of chunk u of
  // token row r, stored XOR-swizzled by the row.
  static_assert(kThreads % (kSub * 8) == 0, "a thread's activation chunk is the same in every slot");
  const unsigned char* xbase = reinterpret_cast<const unsigned char*>(p.x);
  const int64_t ldx_bytes = p.ldx * 2;
  const int x_u = (tid / 8) % kSub, x_q = tid % 8;
  const int x_r0 = tid / (kSub * 8);
  constexpr int kXRowsApart = kThreads / (kSub * 8);  // token rows from a slot to the next
  // Slot s's destination in a stage: token row x_r0 + s kXRowsApart (one
  // swizzle for all slots when the rows lie a multiple of 8 apart).
  auto XDst = [&](int s) -> uint32_t {
    const int r = x_r0 + s * kXRowsApart;
    const int swz = kXRowsApart % 8 == 0 ? x_r0 & 7 : r & 7;
    return static_cast<uint32_t>(T::kWBytes + r * T::kXPitch + x_u * 128 + ((x_q ^ swz) << 4));
  };
  const unsigned char* const xsrc = xbase + (c_begin + x_u) * 128 + x_q * 16;
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
  // int4 scales and zero points: thread tid < kSub x kPer copies piece
  // sz_q of chunk sz_u's group (kBR / 4 scale pieces of 4 rows, then kBR /
  // 16 zero pieces of 16 rows). The group index advances with the stages
  // (load_stage runs for st = 0, 1, 2, ... in order), no division.
  constexpr int kPer = kBR / 4 + kBR / 16;
  static_assert(kFp4 || kSub * kPer <= kThreads, "one scale or zero copy a thread");
  const int cpg = kFp4 ? 1 : static_cast<int>(p.group / 64);  // chunks a group (group % 64 == 0)
  const int sz_u = tid / kPer, sz_q = tid % kPer;
  const bool sz_copies = !kFp4 && tid < kSub * kPer;
  const unsigned char* sz_src = nullptr;
  uint32_t sz_dst = 0;
  int sz_gi = 0, sz_rem = 0;  // group of chunk c_begin + st kSub + sz_u, and its chunk in the group
  if (sz_copies) {
    const int c0 = static_cast<int>(c_begin) + sz_u;  // chunks of a row fit an int (the planner's k)
    sz_gi = c0 / cpg;
    sz_rem = c0 % cpg;
    if (sz_q < kBR / 4) {
      sz_src = reinterpret_cast<const unsigned char*>(scales + prow0 + sz_q * 4);
      sz_dst = static_cast<uint32_t>(T::kWBytes + T::kXBytes + (sz_u * kBR + sz_q * 4) * 4);
    } else {
      sz_src = zeros + prow0 + (sz_q - kBR / 4) * 16;
      sz_dst = static_cast<uint32_t>(T::kWBytes + T::kXBytes + T::kSBytes + sz_u * kBR + (sz_q - kBR / 4) * 16);
    }
  }
  const int64_t sz_pitch = p.rows_padded * (sz_q < kBR / 4 ? 4 : 1);  // bytes from a group's row to the next
  // NVFP4 block scales: piece j = tid + s kThreads is row r's 4 bytes of
  // chunk u.
  constexpr int kFSlots = kFp4 ? (kBR * kSub + kThreads - 1) / kThreads : 0;
  static_assert(!kFp4 || kThreads % kSub == 0, "a thread's NVFP4 scale chunk is the same in every slot");
  const int f_u = tid % kSub;
  const uint8_t* const fsrc = kFp4 ? fp4s + prow0 * (p.k / 16) + (c_begin + f_u) * 4 : nullptr;

  auto load_stage = [&](int st, int buf) {
    const uint32_t stage = sbase + buf * T::kStageBytes;
    const int cw = st * kSub;  // the stage's first chunk in the split
    if (cw + w_u < nch) {
#pragma unroll
      for (int s = 0; s < kWSlots; ++s) cuda::CpAsync16At(stage + wdst[s], wsrc + wofs[s] + cw * 512);
    }
    if (cw + x_u < nch) {
      const unsigned char* const xs = xsrc + static_cast<int64_t>(cw) * 128;
#pragma unroll
      for (int s = 0; s < T::kXSlots; ++s) {
        if (T::kXPieces % kThreads == 0 || tid + s * kThreads < T::kXPieces) {
          cuda::CpAsync16At(stage + XDst(s), xs + xrow[s] * ldx_bytes, ((xvalid >> s) & 1u) ? 16 : 0);
        }
      }
    }
    if constexpr (!kFp4) {
      if (sz_copies) {
        if (cw + sz_u < nch) cuda::CpAsync16At(stage + sz_dst, sz_src + sz_gi * sz_pitch);
        // The next stage's chunk is kSub chunks on.
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          if (++sz_rem == cpg) {
            sz_rem = 0;
            ++sz_gi;
          }
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < kFSlots; ++s) {
        const int j = tid + s * kThreads;
        if (j < kBR * kSub && cw + f_u < nch) {
          cuda::CpAsync4At(stage + T::kWBytes + T::kXBytes + j * 4, fsrc + (j / kSub) * (p.k / 16) + cw * 4);
        }
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
  // int4: chunks left in the current group (its sum is scaled when it ends).
  int group_left = cpg - static_cast<int>(c_begin) % cpg;
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
      const int cl = it * kSub + u;  // chunk of the split
      if (cl >= nch) break;          // the same for the whole block
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
              a[mi][r] = Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(wq[mi][s] >> (4 * r)), (r & 1) ? hi[mi] : lo[mi]);
            }
          }
        }
        MmaStep<kMI, kNJ, kFp4>(acc, accg, a, xb, s);
      }
      if constexpr (!kFp4) {
        // The group ends with this chunk (or the split does): scale its sum.
        if (--group_left == 0 || cl + 1 == nch) {
          group_left = cpg;
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
  StoreTile<kBT, kBR, kThreads>(p, sc, tok_count, row0_out, split, tile_id, bt.row_tile, gs_a, gs_b, &s_is_last);
}

template <int kBT, int kBR, int kWR, int kWT, int kStages, int kSub, bool kFp4, int kMinBlocks>
cudaError_t LaunchW4Tile(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  using T = Tile<kBT, kBR, kWR, kWT, kStages, kSub, kFp4>;
  return cuda::LaunchWithSmem<W4A16GemmKernel<kBT, kBR, kWR, kWT, kStages, kSub, kFp4, kMinBlocks>>(
      grid, T::kThreads, T::kSmemBytes, stream, p);
}

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_GEMM_KERNEL_CUH_
