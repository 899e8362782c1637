// The W4A16 streaming kernel (the stream configurations of
// w4a16_configs.h): packed 4-bit weights read straight from global memory
// into mma.sync fragments, for tiles of at most 8 tokens (one B fragment)
// or 16 (two: kNJ, each A fragment multiplied by both).
//
// Why: the decode kernel (w4a16_decode_kernel.cuh) copies each chunk
// through a per-warp shared-memory ring and splits K over blocks, whose
// partials, fence, counter and last-block sum end every small GEMM with a
// chain of round trips. The W8A16 streaming kernel (w8a16_stream.cu) showed
// on the same H200 that loading each lane's fragment words straight into
// registers, several chunks deep, with the K split inside the block (warps
// on disjoint K ranges, summed in shared memory in a fixed order) takes a
// one-token GEMM from ~65 % to 83-87 % of the copy roofline.
//
// Layout (w4_layout.h): a 16 x 64 chunk is 512 bytes, lane L's 16 bytes its
// four mma k-steps' A words; lane t's k-steps cover the chunk's columns
// [16t, 16t + 16), so its B registers are 32 contiguous bytes of a token's
// activations (two 16-byte loads; lane g's B column of fragment nj is token
// 8 nj + g of the tile, token 0 again past the tile's count: those products
// land in columns that are never stored, so the loads need no predicates).
// The cursor holds one activation pointer per fragment the tile has, so the
// 8-token instances compile to the same code as before the 16-token ones
// existed (sm_90 SASS compared, 2026-12-04).
//
// A block is kWarps warps on kMI 16-row fragments (16 kMI packed rows);
// warp w streams chunks [w C / kWarps, (w + 1) C / kWarps) of all of them,
// kDepth chunks a round: every load of the round (weights, activations,
// the chunks' int4 scales and zero points or NVFP4 block scales) is written
// before the first use. (ptxas does not keep them all there: in the sm_90
// code of W4SM2D3W4 int4, 12 of a round's 39 loads, scales, come after the
// round's first mma; pinning them there with strong loads measured no
// faster: int4 within 1 %, NVFP4 1-5 % slower, 2026-12-04 session 25.)
// Int4: each chunk's products go into a zero accumulator and are scaled
// into the sum once (so a K range may start or end inside a group, and any
// group that is a multiple of 64 works); the chunk's group is tracked by a
// running counter, not a division. NVFP4: the block scales are in the
// widened weights, the global scale is applied at the end. Dequantization
// is the decode kernel's (exact, w4a16_gemm.h).
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/load_streamed.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/w4a16_block_steps.cuh"
#include "kernels/cuda/gemm/w4a16_configs.h"
#include "kernels/cuda/gemm/w4a16_decode_kernel.cuh"

namespace spar::gemm::w4 {
namespace {

constexpr int kChunkBytes = 512;  // one 16 x 64 fragment chunk
constexpr int kMaxTokenFrags = 2;  // 8-token B fragments a tile (8 or 16 tokens)

// Activations and metadata: re-read by every block of the tile, so via L1.
__device__ __forceinline__ uint4 LoadActivations(const uint16_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// One chunk's loads for kMI fragments: the lane's weight words, the 32
// bytes of activations of its token g, and its rows' metadata (int4: scale
// and zero point of rows g and g + 8; nvfp4: their e4m3 block scales of
// block 4 chunk + t).
template <int kMI, int kNJ>
struct ChunkLoads {
  uint4 w[kMI];
  uint4 xa[kNJ], xb[kNJ];  // token fragment nj: token 8 nj + g
  float s_lo[kMI], s_hi[kMI];      // int4
  uint32_t z_lo[kMI], z_hi[kMI];  // int4: zero bytes; nvfp4: block-scale bytes
};

// Where a lane's streams stand (advanced one chunk at a time).
template <int kNJ>
struct LaneCursor {
  const unsigned char* w;  // fragment 0's chunk; fragment mi at + mi * frag_stride
  const uint16_t* x[kNJ];  // the chunk's 16 activations of this lane, per token fragment
  const float* scale;      // int4: the chunk's group row of scales, at row lo of fragment 0
  const uint8_t* zero;     // int4: same for zero points
  const uint8_t* fp4;      // nvfp4: row lo of fragment 0, this lane's block of the chunk
  int in_group;            // int4: chunks of the current group already passed
};

struct StreamGeometry {
  int64_t frag_stride;        // bytes between fragments' chunk rows
  int64_t meta_group_stride;  // int4: elements between groups (rows_padded)
  int64_t fp4_row;            // nvfp4: bytes between rows of block scales (k / 16)
  int group_chunks;           // int4: chunks a group
};

template <int kMI, int kNJ, bool kFp4>
__device__ __forceinline__ void IssueChunk(const LaneCursor<kNJ>& c, const StreamGeometry& geo, ChunkLoads<kMI, kNJ>& l) {
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) l.w[mi] = cuda::LoadStreamed16(c.w + mi * geo.frag_stride);
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    l.xa[nj] = LoadActivations(c.x[nj]);
    l.xb[nj] = LoadActivations(c.x[nj] + 8);
  }
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
    if constexpr (kFp4) {
      l.z_lo[mi] = __ldg(c.fp4 + (mi * 16) * geo.fp4_row);
      l.z_hi[mi] = __ldg(c.fp4 + (mi * 16 + 8) * geo.fp4_row);
    } else {
      l.s_lo[mi] = __ldg(c.scale + mi * 16);
      l.s_hi[mi] = __ldg(c.scale + mi * 16 + 8);
      l.z_lo[mi] = __ldg(c.zero + mi * 16);
      l.z_hi[mi] = __ldg(c.zero + mi * 16 + 8);
    }
  }
}

template <int kNJ, bool kFp4>
__device__ __forceinline__ void AdvanceChunk(LaneCursor<kNJ>& c, const StreamGeometry& geo) {
  c.w += kChunkBytes;
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) c.x[nj] += 64;
  if constexpr (kFp4) {
    c.fp4 += 4;
  } else if (++c.in_group == geo.group_chunks) {
    c.in_group = 0;
    c.scale += geo.meta_group_stride;
    c.zero += geo.meta_group_stride;
  }
}

// The chunk's products into acc (rows g / g + 8 of fragment mi, tokens
// 8 nj + 2t, 8 nj + 2t + 1 of the tile: the mma C layout).
template <int kMI, int kNJ, bool kFp4>
__device__ __forceinline__ void ComputeChunk(const ChunkLoads<kMI, kNJ>& l, float (&acc)[kMI][kNJ][4]) {
  uint32_t xw[kNJ][8];
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    const uint32_t w8[8] = {l.xa[nj].x, l.xa[nj].y, l.xa[nj].z, l.xa[nj].w,
                            l.xb[nj].x, l.xb[nj].y, l.xb[nj].z, l.xb[nj].w};
#pragma unroll
    for (int j = 0; j < 8; ++j) xw[nj][j] = w8[j];
  }
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
    const uint32_t words[4] = {l.w[mi].x, l.w[mi].y, l.w[mi].z, l.w[mi].w};
    if constexpr (kFp4) {
      const uint32_t f_lo = E4m3Pow2_110PairBf16(l.z_lo[mi]);
      const uint32_t f_hi = E4m3Pow2_110PairBf16(l.z_hi[mi]);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint32_t w = words[ks];
        const uint32_t a[4] = {Bf16x2Mul(nvfp4_word::E2m1PairBits<0>(w), f_lo),
                               Bf16x2Mul(nvfp4_word::E2m1PairBits<1>(w), f_hi),
                               Bf16x2Mul(nvfp4_word::E2m1PairBits<2>(w), f_lo),
                               Bf16x2Mul(nvfp4_word::E2m1PairBits<3>(w), f_hi)};
#pragma unroll
        for (int nj = 0; nj < kNJ; ++nj) {
          const uint32_t b[2] = {xw[nj][2 * ks], xw[nj][2 * ks + 1]};
          cuda::MmaBf16M16N8K16(acc[mi][nj], a, b, acc[mi][nj]);
        }
      }
    } else {
      // 0x4300 | nibble = bf16 (128 + code); minus (128 + zero): exact.
      const uint32_t z_lo = (0x4300u + l.z_lo[mi]) * 0x10001u;
      const uint32_t z_hi = (0x4300u + l.z_hi[mi]) * 0x10001u;
      float part[kNJ][4] = {};
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint32_t w = words[ks];
        const uint32_t a[4] = {Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(w), z_lo),
                               Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(w >> 4), z_hi),
                               Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(w >> 8), z_lo),
                               Bf16x2Sub(AndOr<0x000F000Fu, 0x43004300u>(w >> 12), z_hi)};
#pragma unroll
        for (int nj = 0; nj < kNJ; ++nj) {
          const uint32_t b[2] = {xw[nj][2 * ks], xw[nj][2 * ks + 1]};
          cuda::MmaBf16M16N8K16(part[nj], a, b, part[nj]);
        }
      }
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        acc[mi][nj][0] += part[nj][0] * l.s_lo[mi];
        acc[mi][nj][1] += part[nj][1] * l.s_lo[mi];
        acc[mi][nj][2] += part[nj][2] * l.s_hi[mi];
        acc[mi][nj][3] += part[nj][3] * l.s_hi[mi];
      }
    }
  }
}

// kCount chunks: every load issued, then every product (the round).
template <int kMI, int kNJ, int kCount, bool kFp4>
__device__ __forceinline__ void StreamRound(LaneCursor<kNJ>& cur, const StreamGeometry& geo, float (&acc)[kMI][kNJ][4]) {
  ChunkLoads<kMI, kNJ> l[kCount];
#pragma unroll
  for (int d = 0; d < kCount; ++d) {
    IssueChunk<kMI, kNJ, kFp4>(cur, geo, l[d]);
    AdvanceChunk<kNJ, kFp4>(cur, geo);
  }
#pragma unroll
  for (int d = 0; d < kCount; ++d) ComputeChunk<kMI, kNJ, kFp4>(l[d], acc);
}

// kStreamWarpsPerSm warps an SM bound the registers (16: 128 a thread).
// kNJ 8-token B fragments: tiles of 8 or 16 tokens.
template <int kWarps, int kMI, int kNJ, int kDepth, bool kFp4>
__global__ void __launch_bounds__(kWarps * 32, kStreamWarpsPerSm / kWarps) W4A16StreamKernel(const KernelParams p) {
  static_assert(kNJ >= 1 && kNJ <= kMaxTokenFrags, "token fragments");
  constexpr int kTokens = 8 * kNJ;
  constexpr int kBR = 16 * kMI;
  constexpr int kPitchC = kBR + 4;
  constexpr int kAcc = kMI * kNJ * 4;  // a lane's accumulators
  __shared__ float s_red[kWarps > 1 ? kWarps : 1][kAcc][32];
  __shared__ __align__(16) float s_tile[kTokens * kPitchC];
  __shared__ int s_is_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;

  BlockTile bt;
  if (!LocateBlockTile<kTokens, kFp4>(p, bt)) return;
  const int64_t chunks = p.k / 64;
  const int64_t c_begin = warp * chunks / kWarps;
  const int64_t n_chunks = (warp + 1) * chunks / kWarps - c_begin;
  const int64_t frag0 = static_cast<int64_t>(bt.row_tile) * kMI;
  const int64_t row_lo = frag0 * 16 + g;  // fragment 0's row g

  StreamGeometry geo;
  geo.frag_stride = chunks * kChunkBytes;
  geo.meta_group_stride = p.rows_padded;
  geo.fp4_row = p.k / 16;
  geo.group_chunks = kFp4 ? 1 : static_cast<int>(p.group / 64);
  LaneCursor<kNJ> cur;
  cur.w = bt.values + (frag0 * chunks + c_begin) * kChunkBytes + lane * 16;
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    // Token 8 nj + g of the tile; token 0 past the tile's count.
    const int tok = nj * 8 + g;
    int64_t x_row = bt.row0_out + (tok < bt.tok_count ? tok : 0);
    if (p.x_row_index != nullptr) x_row = p.x_row_index[x_row];
    cur.x[nj] = p.x + x_row * p.ldx + c_begin * 64 + t * 16;
  }
  if constexpr (kFp4) {
    cur.fp4 = bt.fp4_scales + row_lo * geo.fp4_row + c_begin * 4 + t;
    cur.scale = nullptr;
    cur.zero = nullptr;
    cur.in_group = 0;
  } else {
    const int64_t group = c_begin / geo.group_chunks;
    cur.scale = bt.scales + group * geo.meta_group_stride + row_lo;
    cur.zero = bt.zeros + group * geo.meta_group_stride + row_lo;
    cur.in_group = static_cast<int>(c_begin - group * geo.group_chunks);
    cur.fp4 = nullptr;
  }

  float acc[kMI][kNJ][4];  // the tile's 8-token fragments
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.f;
  int64_t i = 0;
  for (; i + kDepth <= n_chunks; i += kDepth) StreamRound<kMI, kNJ, kDepth, kFp4>(cur, geo, acc);
  for (; i < n_chunks; ++i) StreamRound<kMI, kNJ, 1, kFp4>(cur, geo, acc);

  // The warps' K ranges summed in warp order, into the token-major tile.
  if constexpr (kWarps > 1) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_red[warp][(mi * kNJ + nj) * 4 + e][lane] = acc[mi][nj][e];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int nj = 0; nj < kNJ; ++nj)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float sum = s_red[0][(mi * kNJ + nj) * 4 + e][lane];
#pragma unroll
            for (int w = 1; w < kWarps; ++w) sum += s_red[w][(mi * kNJ + nj) * 4 + e][lane];  // fixed order
            acc[mi][nj][e] = sum;
          }
    }
  }
  if (warp == 0) AccumulatorsToSmem<kMI, kNJ, kPitchC>(s_tile, acc, 0, 0, g, t);
  __syncthreads();
  float gs_a = 1.0f, gs_b = 1.0f;
  if constexpr (kFp4) {
    gs_a = bt.global_scale[0] * 0x1p16f;  // the block scales carried 2^-16
    gs_b = p.silu ? bt.global_scale[1] * 0x1p16f : gs_a;
  }
  // One split (the launcher's plan): StoreTile only pairs, scales and stores.
  StoreTile<kTokens, kBR, kWarps * 32>(p, s_tile, bt.tok_count, bt.row0_out, 0, 0, bt.row_tile, gs_a, gs_b, &s_is_last);
}

template <int... kIds>
cudaError_t LaunchStreamIn(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream,
                           std::integer_sequence<int, kIds...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        constexpr W4Config c = kW4Configs[kIds];
        if constexpr (c.stream) {
          if (id == kIds) {
            if (fp4) {
              W4A16StreamKernel<c.warps, c.mi, c.nj, c.stages, true><<<grid, c.warps * 32, 0, stream>>>(p);
            } else {
              W4A16StreamKernel<c.warps, c.mi, c.nj, c.stages, false><<<grid, c.warps * 32, 0, stream>>>(p);
            }
            result = cudaGetLastError();
          }
        }
      }(),
      ...);
  return result;
}

}  // namespace

cudaError_t LaunchStreamConfig(int id, bool fp4, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  if (p.splits != 1) return cudaErrorInvalidValue;
  return LaunchStreamIn(id, fp4, p, grid, stream, std::make_integer_sequence<int, kW4NumConfigs>{});
}

}  // namespace spar::gemm::w4
