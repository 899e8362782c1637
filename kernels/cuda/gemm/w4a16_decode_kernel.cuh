// The W4A16 decode kernel (internal to kernels/cuda/gemm; w4a16_decode.cu
// instantiates it): M <= 16 tokens, where the GEMM is a stream of weight
// bytes and the tile kernel's block-wide pipeline (a barrier per stage,
// 64 rows sharing one stage) leaves most of the bandwidth unused.
//
// Each warp owns kMI 16-row fragments of the packed matrix (w4_layout.h:
// lane L's 16 bytes of a 16 x 64 chunk are already its four mma A-register
// words) and streams them along its split of K through a ring of kStages
// slots in shared memory that only it uses. Every lane copies with cp.async
// exactly the bytes it will read back — its weight words, its 32 bytes of
// each token's activations (the K permutation of w4_layout.h) — so no block
// barrier is needed anywhere in the K loop; the group scales, zero points
// and NVFP4 block scales are copied by one lane of each quad into the same
// slot and read by the quad after a warp barrier. A block is kWarps warps
// on consecutive fragments: they read the same activations (from L1).
//
// Dequantization as in the tile kernel (exact, see w4a16_gemm.h), with
// fewer instructions, because at decode the kernel is bound by the integer
// pipe (ncu: math-pipe throttle and wait stalls, 0.5 issues per scheduler
// per cycle): int4 masks the nibbles and ORs in 128.0 with one LOP3 per
// register (the compiler emits two for the two constants); NVFP4 moves sign
// and magnitude with two shifts and two LOP3 per register and takes one
// bf16 multiply instead of two: the e2m1 bits placed in bf16 (value x
// 2^-126) times the block scale x 2^110 is the exact product x 2^-16, and
// the global scale applied at the end carries the 2^16.
//
// Tokens: kNJ 8-token fragments (8 or 16 tokens), or with kNJ = 1 only the
// first kXTok tokens (1, 2, 4 or 8): a one-token step then copies and
// stores one token's activations, not eight.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_DECODE_KERNEL_CUH_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_DECODE_KERNEL_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/w4a16_kernel_params.h"
#include "kernels/cuda/gemm/w4a16_block_steps.cuh"

namespace spar::gemm::w4 {

template <int kWarps, int kMI, int kNJ, int kXTok, int kStages, bool kFp4>
struct DecodeTile {
  static_assert(kMI == 1 || kMI == 2 || kMI == 4, "fragments per warp");
  static_assert(kNJ == 2 ? kXTok == 8 : (kNJ == 1 && (kXTok == 1 || kXTok == 2 || kXTok == 4 || kXTok == 8)),
                "tokens per block");
  static_assert(kStages >= 2, "ring depth");
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBT = kNJ * kXTok;           // tokens per block
  static constexpr int kBR = kWarps * 16 * kMI;     // packed rows per block
  static constexpr int kXLanes = 4 * kXTok;         // lanes holding a token (per fragment)
  // Slot layout (bytes): weights [mi][lane][16], activations [nj][half][lane < kXLanes][16],
  // metadata [mi][g][words][4] (int4: scale lo, scale hi, zero word lo, zero word hi;
  // nvfp4: block-scale word of row g, of row g + 8).
  static constexpr int kWBytes = kMI * 512;
  static constexpr int kXBytes = kNJ * 2 * kXLanes * 16;
  static constexpr int kMetaWords = kFp4 ? 2 : 4;
  static constexpr int kMetaBytes = kMI * 8 * kMetaWords * 4;
  static constexpr int kSlotBytes = kWBytes + kXBytes + kMetaBytes;
  static constexpr int kRingBytes = kStages * kSlotBytes;  // per warp
  static constexpr int kPitchC = kBR + 4;
  static constexpr int kEpilogueBytes = kBT * kPitchC * 4;
  static constexpr int kSmemBytes = (kWarps * kRingBytes > kEpilogueBytes ? kWarps * kRingBytes : kEpilogueBytes) + 16;
};

__device__ __forceinline__ uint4 Lds128(const unsigned char* p) { return *reinterpret_cast<const uint4*>(p); }

template <int kWarps, int kMI, int kNJ, int kXTok, int kStages, bool kFp4, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) W4A16DecodeKernel(const KernelParams p) {
  using T = DecodeTile<kWarps, kMI, kNJ, kXTok, kStages, kFp4>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_is_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  // ---- which tile ------------------------------------------------------
  BlockTile bt;
  if (!LocateBlockTile<T::kBT, kFp4>(p, bt)) return;
  const uint8_t* values = bt.values;
  const float* scales = bt.scales;
  const uint8_t* zeros = bt.zeros;
  const uint8_t* fp4s = bt.fp4_scales;
  const float* gscale = bt.global_scale;
  const int64_t row0_out = bt.row0_out;
  const int tok_count = bt.tok_count, split = bt.split;
  const int64_t tile_id = bt.tile_id;
  const int64_t chunks = p.k / 64;
  const int64_t c_begin = split * chunks / p.splits, c_end = (split + 1) * chunks / p.splits;
  const int n_chunks = static_cast<int>(c_end - c_begin);
  // This warp's first 16-row fragment; rows_padded is a multiple of 64, so
  // a warp's kMI (<= 4) fragments are all inside the matrix or all outside.
  const int64_t frag0 = static_cast<int64_t>(bt.row_tile) * (T::kBR / 16) + warp * kMI;
  const bool warp_active = frag0 * 16 < p.rows_padded;

  float acc[kMI][kNJ][4];
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;

  if (warp_active && n_chunks > 0) {
    unsigned char* ring = smem + warp * T::kRingBytes;
    // ---- the lane's sources, at chunk c_begin -----------------------------
    const unsigned char* wsrc = values + (frag0 * chunks + c_begin) * 512 + lane * 16;  // fragment mi: + mi * chunks * 512
    const int64_t frag_stride = chunks * 512;
    // Activations: token nj * 8 + g of the block (lanes with g < kXTok).
    const unsigned char* xsrc[kNJ];
    bool xvalid[kNJ];
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      const int tok = nj * 8 + g;
      xvalid[nj] = g < kXTok && tok < tok_count;
      int64_t row = 0;
      if (xvalid[nj]) {
        row = row0_out + tok;
        if (p.x_row_index != nullptr) row = p.x_row_index[row];
      }
      xsrc[nj] = reinterpret_cast<const unsigned char*>(p.x) + row * p.ldx * 2 + c_begin * 128 + t * 32;
    }
    // Metadata: lane t of each quad copies word t (int4: scale of row g,
    // of row g + 8, zero-point word of row g, of row g + 8) or the words
    // t + 4j (nvfp4: (fragment, lo/hi) = ((t + 4j) / 2, (t + 4j) % 2)).
    const int gc = kFp4 ? 1 : static_cast<int>(p.group / 64);  // chunks per int4 group
    int issue_in_group = kFp4 ? 0 : static_cast<int>(c_begin % gc);
    int64_t issue_group = kFp4 ? 0 : c_begin / gc;
    constexpr int kFp4Words = (2 * kMI + 3) / 4;  // nvfp4 words per lane
    const unsigned char* meta_src;
    int64_t meta_group_stride = 0, meta_frag_stride = 0;  // bytes
    int64_t fp4_off[kFp4Words];
    if constexpr (kFp4) {
      meta_src = fp4s + (frag0 * 16 + g) * (p.k / 16) + c_begin * 4;
#pragma unroll
      for (int j = 0; j < kFp4Words; ++j) {
        const int idx = t + 4 * j;
        fp4_off[j] = ((idx / 2) * 16 + (idx % 2) * 8) * (p.k / 16);
      }
    } else {
      const int64_t r = frag0 * 16 + g + ((t & 1) ? 8 : 0);
      const bool scale_word = t < 2;
      meta_src = scale_word ? reinterpret_cast<const unsigned char*>(scales + r) : zeros + (r & ~int64_t{3});
      meta_group_stride = p.rows_padded * (scale_word ? 4 : 1);
      meta_frag_stride = scale_word ? 64 : 16;
      (void)fp4_off;
    }

    // Copies the next chunk into slot `slot`. Chunks are issued in order, so
    // the sources are running pointers (no 64-bit index arithmetic per copy).
    const unsigned char* w_next = wsrc;
    const unsigned char* x_next[kNJ];
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) x_next[nj] = xsrc[nj];
    const unsigned char* meta_next = meta_src + (kFp4 ? 0 : issue_group * meta_group_stride);
    bool first_issue = true;
    auto issue = [&](int slot) {
      unsigned char* s = ring + slot * T::kSlotBytes;
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) cuda::CpAsync16(s + mi * 512 + lane * 16, w_next + mi * frag_stride);
      w_next += 512;
      unsigned char* sx = s + T::kWBytes;
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        if (xvalid[nj]) {  // g < kXTok: lane < kXLanes
          cuda::CpAsync16Ca(sx + (nj * 2 + 0) * T::kXLanes * 16 + lane * 16, x_next[nj]);
          cuda::CpAsync16Ca(sx + (nj * 2 + 1) * T::kXLanes * 16 + lane * 16, x_next[nj] + 16);
        }
        x_next[nj] += 128;
      }
      unsigned char* sm = sx + T::kXBytes;
      if constexpr (kFp4) {
#pragma unroll
        for (int j = 0; j < kFp4Words; ++j) {
          const int idx = t + 4 * j;  // word ((idx / 2) * 8 + g) * 2 + idx % 2: (fragment, lo/hi)
          if (idx < 2 * kMI) cuda::CpAsync4(sm + (((idx / 2) * 8 + g) * 2 + idx % 2) * 4, meta_next + fp4_off[j]);
        }
        meta_next += 4;
      } else {
        if (issue_in_group == 0 || first_issue) {
#pragma unroll
          for (int mi = 0; mi < kMI; ++mi) cuda::CpAsync4(sm + ((mi * 8 + g) * 4 + t) * 4, meta_next + mi * meta_frag_stride);
        }
        first_issue = false;
        if (++issue_in_group == gc) {
          issue_in_group = 0;
          meta_next += meta_group_stride;
        }
      }
    };

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_chunks) issue(s);
      cuda::CpAsyncCommit();
    }

    float accg[kMI][kNJ][4];  // int4: the current group's sum, scaled when the group ends
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) accg[mi][nj][e] = 0.0f;
    uint32_t zlo[kMI], zhi[kMI];  // int4: bf16x2 (128 + zero) of rows g, g + 8
    float slo[kMI], shi[kMI];     // int4: the group's scales of rows g, g + 8
    int in_group = kFp4 ? 0 : static_cast<int>(c_begin % gc);

    int slot = 0;
    for (int i = 0; i < n_chunks; ++i) {
      cuda::CpAsyncWait<kStages - 2>();
      __syncwarp();  // the quad's metadata words were copied by other lanes
      const unsigned char* s = ring + slot * T::kSlotBytes;
      uint4 wq[kMI];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) wq[mi] = Lds128(s + mi * 512 + lane * 16);
      uint32_t xb[kNJ][8];
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (xvalid[nj]) {
          lo = Lds128(s + T::kWBytes + (nj * 2 + 0) * T::kXLanes * 16 + lane * 16);
          hi = Lds128(s + T::kWBytes + (nj * 2 + 1) * T::kXLanes * 16 + lane * 16);
        }
        xb[nj][0] = lo.x, xb[nj][1] = lo.y, xb[nj][2] = lo.z, xb[nj][3] = lo.w;
        xb[nj][4] = hi.x, xb[nj][5] = hi.y, xb[nj][6] = hi.z, xb[nj][7] = hi.w;
      }
      const unsigned char* sm = s + T::kWBytes + T::kXBytes;
      uint32_t flo[kMI], fhi[kMI];  // nvfp4: bf16x2 block scale x 2^110 of rows g, g + 8
      if constexpr (kFp4) {
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          const uint2 wds = *reinterpret_cast<const uint2*>(sm + (mi * 8 + g) * 8);
          flo[mi] = E4m3Pow2_110PairBf16((wds.x >> (8 * t)) & 0xffu);
          fhi[mi] = E4m3Pow2_110PairBf16((wds.y >> (8 * t)) & 0xffu);
        }
      } else if (in_group == 0 || i == 0) {
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          const uint4 m4 = Lds128(sm + (mi * 8 + g) * 16);
          slo[mi] = __uint_as_float(m4.x);
          shi[mi] = __uint_as_float(m4.y);
          const int sh = 8 * (g & 3);  // rows g and g + 8 sit at the same byte of their words
          zlo[mi] = (0x4300u + ((m4.z >> sh) & 0xffu)) * 0x10001u;
          zhi[mi] = (0x4300u + ((m4.w >> sh) & 0xffu)) * 0x10001u;
        }
      }
      // Refill the slot the previous chunk used (its reads are consumed).
      {
        const int nxt = i + kStages - 1;
        if (nxt < n_chunks) issue(slot == 0 ? kStages - 1 : slot - 1);
        cuda::CpAsyncCommit();
      }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t a[kMI][4];
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          const uint32_t word = ks == 0 ? wq[mi].x : ks == 1 ? wq[mi].y : ks == 2 ? wq[mi].z : wq[mi].w;
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            if constexpr (kFp4) {
              a[mi][r] = Bf16x2Mul(nvfp4_word::E2m1PairBitsOf(word, r), (r & 1) ? fhi[mi] : flo[mi]);
            } else {
              // 0x4300 | nibble = bf16 (128 + code); minus (128 + zero): exact.
              a[mi][r] = Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(word >> (4 * r)), (r & 1) ? zhi[mi] : zlo[mi]);
            }
          }
        }
        MmaStep<kMI, kNJ, kFp4>(acc, accg, a, xb, ks);
      }
      if constexpr (!kFp4) {
        if (++in_group == gc || i + 1 == n_chunks) {  // the group (or the split) ends here
          in_group = in_group == gc ? 0 : in_group;
          FoldGroup<kMI, kNJ>(acc, accg, slo, shi);
        }
      }
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }
    cuda::CpAsyncWait<0>();
  }
  __syncthreads();  // every ring is done: the epilogue reuses the memory

  // ---- fp32 tile to shared memory, then split-K and the stores ------------
  float* sc = reinterpret_cast<float*>(smem);
  if constexpr (kNJ == 2 || kXTok == 8) {
    AccumulatorsToSmem<kMI, kNJ, T::kPitchC>(sc, acc, warp * 16 * kMI, 0, g, t);
  } else {
    // Fewer than 8 token columns in the tile: keep the ones that exist.
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int r = warp * 16 * kMI + mi * 16 + g;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 2 * t + e;
        if (c < kXTok) {
          sc[c * T::kPitchC + r] = acc[mi][0][e];
          sc[c * T::kPitchC + r + 8] = acc[mi][0][2 + e];
        }
      }
    }
  }
  __syncthreads();
  float gs_a = 1.0f, gs_b = 1.0f;
  if constexpr (kFp4) {
    gs_a = gscale[0] * 0x1p16f;  // the block scales carried 2^-16
    gs_b = p.silu ? gscale[1] * 0x1p16f : gs_a;
  }
  StoreTile<T::kBT, T::kBR, T::kThreads>(p, sc, tok_count, row0_out, split, tile_id, bt.row_tile, gs_a, gs_b, &s_is_last);
}

template <int kWarps, int kMI, int kNJ, int kXTok, int kStages, bool kFp4, int kMinBlocks>
cudaError_t LaunchW4Decode(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  using T = DecodeTile<kWarps, kMI, kNJ, kXTok, kStages, kFp4>;
  return cuda::LaunchWithSmem<W4A16DecodeKernel<kWarps, kMI, kNJ, kXTok, kStages, kFp4, kMinBlocks>>(
      grid, T::kThreads, T::kSmemBytes, stream, p);
}

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_DECODE_KERNEL_CUH_
