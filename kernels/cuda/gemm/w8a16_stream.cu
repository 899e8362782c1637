// The W8A16 streaming decode kernel (gemm_launch_internal.h): block-FP8 (or
// bf16) weights read straight from global memory into mma.sync fragments,
// for dense GEMMs of at most 32 tokens (grouped work entries: 8).
//
// Why another kernel: at one token the tile kernel (w8a16_gemm_kernel.cuh)
// spends most of a small GEMM on fixed costs, not on bytes: each block
// copies 64-byte slices of its rows through shared memory (cp.async, a
// barrier and a 16-byte LDS per fragment per stage), and the small shapes
// need split-K over blocks, whose partials, fence, counter and last-block
// sum add a chain of memory round trips at the end. The fused A projection
// took ~12 us for 17 MB whether its weights came from DRAM or from L2 (ncu,
// H200 running sm80 code, 2026-12-04): the time is in the kernel's
// structure. Here every lane loads its 16-byte pieces of the weight rows
// with plain 16-byte loads, several spans deep, straight into the registers
// the mma's A fragment is widened from; the K split lives inside the block
// (warps on disjoint K ranges, summed in shared memory in a fixed order), so
// a block writes its outputs itself, once.
//
// Fragments (mma.m16n8k16, K permutation as in the tile kernel): within a
// 64-byte span of a weight row, lane t of a quad owns bytes [16t, 16t + 16)
// = 4 k-steps; for k-step s its A registers are the e4m3 word s widened to
// two bf16x2 (real columns 16t + 4s + {0,1} and {2,3}), and its B registers
// the bf16 words 2s and 2s + 1 of X's same 16 columns (bf16 weights: lane t
// owns the 8 columns [8t, 8t + 8) = 2 k-steps, as in the tile kernel).
// Two layouts of the 16 fragment rows (kStreams):
//   1: rows g and g + 8 are 16 output rows, B's 8 columns are 8 tokens
//      (9-32 tokens: kNJ = 2-4 B fragments, each widened A fragment feeding
//      kNJ mma: the weights are read and widened once for all);
//   2: rows g and g + 8 are the same 8 output rows over two halves of the
//      block's K range, B's columns 0-3 are 4 tokens over the first half and
//      4-7 the same tokens over the second; the outputs are C[g][n] +
//      C[g + 8][n + 4] (a quad's lanes t and t + 2). Twice the blocks for
//      the same rows at up to 4 tokens: small GEMMs fill the GPU.
// Scales: a tile's rows lie in one 128-row scale block and a span in one
// 128-column block, so each span's products (4 mma into a zero accumulator)
// are scaled once, per fragment row half.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/load_streamed.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/grouped_work.cuh"

namespace spar::gemm::internal {
namespace {

constexpr int kSpanBytes = 64;  // K bytes of a row a quad reads per step

// Spans a lane keeps in flight: 4 x (2 weight + 2 activation 16-byte loads)
// with one token fragment; 3 with two (2 + 4 loads a span), 2 with three or
// four: the registers.
template <int kNJ>
constexpr int kDepth = kNJ == 1 ? 4 : kNJ == 2 ? 3 : 2;

// Activations: every block re-reads X, so through L1.
__device__ __forceinline__ uint4 LoadActivation(const uint16_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// Where a lane reads: its two fragment rows' K ranges (lo: fragment row
// g, hi: g + 8), in spans, and its B columns' tokens (one a token
// fragment: token 8 nj + g) and half.
template <int kNJ>
struct LaneStreams {
  const uint8_t* w_lo;  // fragment row lo's weight row, at K 0
  const uint8_t* w_hi;
  const float* scale_lo;  // its 128-row block's scale row
  const float* scale_hi;
  const uint16_t* x[kNJ];  // the B columns' activation rows, at K 0
  int64_t w_step;     // tiled across rows: bytes from a span's tiles to the next span's
  int64_t begin_lo, count_lo, begin_hi, count_hi;
  bool x_hi;
};

// The sum over this lane's spans of its fragment's products (acc[nj]: C's
// four registers of token fragment nj; each widened A fragment feeds kNJ
// mma). kFp8: spans of 64 e4m3 values with block scales; else 32 bf16
// values. Rows past n and tokens past m read row 0 / token 0 instead: their
// products land in fragment rows and columns that are never stored, so the
// loads need no predicates.
// kLayout (KernelSegment::tiled): row-major, a row's next span is the next
// 64 bytes; tiled along K (w8a16_tiles.h) the next 1 KB tile; tiled across
// rows the tile a column of tiles further (ls.w_step bytes).
template <bool kFp8, int kLayout, int kNJ>
__device__ __forceinline__ void StreamSpans(const LaneStreams<kNJ>& ls, int t, float (&acc)[kNJ][4]) {
  constexpr int kValues = kFp8 ? 64 : 32;  // K columns a span
  constexpr int kKSteps = kValues / 16;
  constexpr int kD = kDepth<kNJ>;
  // Bytes from a row's span to its next.
  const int64_t w_step = kLayout == kTiledAlongK ? kTileBytes : kLayout == kTiledAcrossRows ? ls.w_step : kSpanBytes;
  const uint8_t* w_lo = ls.w_lo + ls.begin_lo * w_step + 16 * t;
  const uint8_t* w_hi = ls.w_hi + ls.begin_hi * w_step + 16 * t;
  const float* s_lo = kFp8 ? ls.scale_lo + ls.begin_lo / 2 : nullptr;
  const float* s_hi = kFp8 ? ls.scale_hi + ls.begin_hi / 2 : nullptr;
  const int64_t x_begin = (ls.x_hi ? ls.begin_hi : ls.begin_lo) * kValues + (kValues / 4) * t;
  const uint16_t* xp[kNJ];
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) xp[nj] = ls.x[nj] + x_begin;

  // One span's products into acc: rows lo at scale sl, rows hi at sh.
  auto span_mma = [&](const uint4& wl, const uint4& wh, const uint4 (&xa)[kNJ], const uint4 (&xb)[kNJ], float sl,
                      float sh) {
    const uint32_t wlw[4] = {wl.x, wl.y, wl.z, wl.w};
    const uint32_t whw[4] = {wh.x, wh.y, wh.z, wh.w};
    float span[kNJ][4];
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) span[nj][e] = 0.f;
    }
#pragma unroll
    for (int s = 0; s < kKSteps; ++s) {
      uint32_t a[4];
      if constexpr (kFp8) {
        cuda::E4m3x4ToScaledBf16x4(wlw[s], a[0], a[2]);
        cuda::E4m3x4ToScaledBf16x4(whw[s], a[1], a[3]);
      } else {
        a[0] = wlw[2 * s];
        a[2] = wlw[2 * s + 1];
        a[1] = whw[2 * s];
        a[3] = whw[2 * s + 1];
      }
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        const uint32_t xw[8] = {xa[nj].x, xa[nj].y, xa[nj].z, xa[nj].w, xb[nj].x, xb[nj].y, xb[nj].z, xb[nj].w};
        const uint32_t b[2] = {xw[2 * s], xw[2 * s + 1]};
        cuda::MmaBf16M16N8K16(span[nj], a, b, span[nj]);
      }
    }
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      if constexpr (kFp8) {
        // The products are in units of 2^-120 (the widening's fold): back to
        // real units first (exact), then the block scale.
        acc[nj][0] += span[nj][0] * cuda::kPow2_120 * sl;
        acc[nj][1] += span[nj][1] * cuda::kPow2_120 * sl;
        acc[nj][2] += span[nj][2] * cuda::kPow2_120 * sh;
        acc[nj][3] += span[nj][3] * cuda::kPow2_120 * sh;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nj][e] += span[nj][e];
      }
    }
  };

  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Whole rounds of kD spans in both halves: every load issued first, at
  // fixed offsets from pointers bumped once a round. Span d of a round is
  // in 128-column block (begin + i + d) / 2 (a round of 3 spans moves the
  // scale pointers by one block and the parity of begin by one).
  const int64_t both = ls.count_lo < ls.count_hi ? ls.count_lo : ls.count_hi;
  int64_t i = 0;
  int64_t begin_lo = ls.begin_lo, begin_hi = ls.begin_hi;
  for (; i + kD <= both; i += kD) {
    uint4 wl[kD], wh[kD], xa[kD][kNJ], xb[kD][kNJ];
    float sl[kD], sh[kD];
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      wl[d] = cuda::LoadStreamed16(w_lo + d * w_step);
      wh[d] = cuda::LoadStreamed16(w_hi + d * w_step);
#pragma unroll
      for (int nj = 0; nj < kNJ; ++nj) {
        xa[d][nj] = LoadActivation(xp[nj] + d * kValues);
        xb[d][nj] = kFp8 ? LoadActivation(xp[nj] + d * kValues + 8) : zero;
      }
      sl[d] = kFp8 ? __ldg(s_lo + (((begin_lo & 1) + d) >> 1)) : 1.f;
      sh[d] = kFp8 ? __ldg(s_hi + (((begin_hi & 1) + d) >> 1)) : 1.f;
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) span_mma(wl[d], wh[d], xa[d], xb[d], sl[d], sh[d]);
    w_lo += kD * w_step;
    w_hi += kD * w_step;
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) xp[nj] += kD * kValues;
    // An even depth keeps begin's parity: fixed steps, as the one-fragment
    // instances always compiled; an odd one carries the parity along.
    if constexpr (kFp8 && kD % 2 == 0) {
      s_lo += kD / 2;
      s_hi += kD / 2;
    } else if constexpr (kFp8) {
      s_lo += ((begin_lo & 1) + kD) >> 1;
      s_hi += ((begin_hi & 1) + kD) >> 1;
      begin_lo += kD;
      begin_hi += kD;
    }
  }
  // The rest, a span at a time (a half may have one span more than the
  // other: the shorter one's weights and scale count as zero).
  const int64_t iters = ls.count_lo > ls.count_hi ? ls.count_lo : ls.count_hi;
  const int64_t x_count = ls.x_hi ? ls.count_hi : ls.count_lo;
  for (int d = 0; i < iters; ++i, ++d) {
    const bool in_lo = i < ls.count_lo, in_hi = i < ls.count_hi, in_x = i < x_count;
    const uint4 wl = in_lo ? cuda::LoadStreamed16(w_lo + d * w_step) : zero;
    const uint4 wh = in_hi ? cuda::LoadStreamed16(w_hi + d * w_step) : zero;
    uint4 xa[kNJ], xb[kNJ];
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
      xa[nj] = in_x ? LoadActivation(xp[nj] + d * kValues) : zero;
      xb[nj] = kFp8 && in_x ? LoadActivation(xp[nj] + d * kValues + 8) : zero;
    }
    float sl = 1.f, sh = 1.f;
    if constexpr (kFp8) {
      sl = in_lo ? __ldg(s_lo + (((begin_lo & 1) + d) >> 1)) : 0.f;
      sh = in_hi ? __ldg(s_hi + (((begin_hi & 1) + d) >> 1)) : 0.f;
    }
    span_mma(wl, wh, xa, xb, sl, sh);
  }
}

// Block: kWarps warps splitting the tile's K range (kWarps * kStreams equal
// parts, in spans). kStreamWarpsPerSm warps an SM bound the registers (16:
// 128 a thread).
// Dense: block x = row tile. Grouped (p.work): block x = work entry {expert,
// first permuted row, rows <= 8}, block y = row tile. SiLU·mul (kStreams 1
// only): fragment rows g and g + 8 are the gate and up rows of 8 outputs.
// Where row `row` starts: row-major, row * row_bytes; tiled, its 64 bytes
// in the first tile (span 0) of its 16-row block.
template <int kLayout>
__device__ __forceinline__ const uint8_t* RowStart(const uint8_t* w, int64_t row, int64_t row_bytes) {
  const int64_t in_tile = (row % kTileRows) * kSpanBytes;
  if constexpr (kLayout == kTiledAlongK) return w + (row / kTileRows) * (kTileRows * row_bytes) + in_tile;
  if constexpr (kLayout == kTiledAcrossRows) return w + (row / kTileRows) * kTileBytes + in_tile;
  return w + row * row_bytes;
}

// This lane's results of one token fragment (acc: its C registers; tokens
// tok0 + 2t and tok0 + 2t + 1 of the tile) into Y: two K halves added
// (kStreams 2), SiLU·mul pairs, the residual, bf16 or fp32.
template <int kStreams>
__device__ __forceinline__ void StoreStreamOutputs(const KernelParams& p, const KernelSegment& seg,
                                                   const float (&acc)[4], bool silu, int64_t out_row0, int64_t m,
                                                   int64_t row_lo, int64_t row_hi, int tok0, int t) {
  // out[j]: (row, token) of this lane's results.
  float out[4] = {0.f, 0.f, 0.f, 0.f};
  int64_t out_row[4] = {row_lo, row_lo, row_hi, row_hi};
  int out_tok[4] = {tok0 + 2 * t, tok0 + 2 * t + 1, tok0 + 2 * t, tok0 + 2 * t + 1};
  int n_out = 4;
  if (kStreams == 2) {
    const float hi0 = __shfl_xor_sync(0xffffffffu, acc[2], 2);
    const float hi1 = __shfl_xor_sync(0xffffffffu, acc[3], 2);
    n_out = t < 2 ? 2 : 0;
    out[0] = acc[0] + hi0;
    out[1] = acc[1] + hi1;
  } else if (silu) {
    n_out = 2;
    out[0] = acc[0] / (1.0f + expf(-acc[0])) * acc[2];
    out[1] = acc[1] / (1.0f + expf(-acc[1])) * acc[3];
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = acc[e];
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (j >= n_out || out_row[j] >= seg.n || out_tok[j] >= m) continue;
    float v = out[j];
    const int64_t row = out_row0 + out_tok[j];
    const int64_t col = seg.out_col0 + out_row[j];
    if (p.residual != nullptr) v += __uint_as_float(static_cast<uint32_t>(p.residual[row * p.ldr + col]) << 16);
    if (p.y_fp32) {
      static_cast<float*>(p.y)[row * p.ldy + col] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.y)[row * p.ldy + col] = __float2bfloat16_rn(v);
    }
  }
}

template <int kStreams, int kWarps, int kLayout, int kNJ>
__global__ void __launch_bounds__(kWarps * 32, kStreamWarpsPerSm / kWarps) W8A16StreamKernel(const KernelParams p) {
  static_assert(kNJ == 1 || (kNJ <= kStreamMaxTokenFrags && kStreams == 1), "several token fragments: one K stream");
  __shared__ float s_red[kWarps > 1 ? kWarps : 1][32][4 * kNJ];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const bool silu = kStreams == 1 && p.silu != 0;
  // Output rows a block, as the plan counted them (gemm::MakeStreamPlan).
  const int rows = kStreams == 2 || silu ? kStreamTileRows2 : kStreamTileRows1;

  KernelSegment seg = p.seg[0];
  int64_t tile, out_row0 = 0, m = p.m;
  if (p.work != nullptr) {
    if (static_cast<int>(blockIdx.x) >= *p.work_count) return;
    const GroupedWork work = ApplyWorkEntry(p, blockIdx.x, seg);
    out_row0 = work.first_row;
    m = work.rows;
    tile = blockIdx.y;
  } else {
#pragma unroll
    for (int s = 1; s < kMaxGemmSegments; ++s) {
      if (s < p.num_segments && static_cast<int>(blockIdx.x) >= p.seg[s].first_tile) seg = p.seg[s];
    }
    tile = blockIdx.x - seg.first_tile;
  }
  const int64_t r0 = tile * rows;
  const int64_t row_lo = r0 + g;
  const int64_t row_hi = kStreams == 2 || silu ? row_lo : row_lo + 8;
  const int64_t row_bytes = seg.is_fp8 ? p.k : 2 * p.k;
  const int64_t spans = row_bytes / kSpanBytes;
  const int64_t scale_row = (r0 / 128) * ((p.k + 127) / 128);
  LaneStreams<kNJ> ls;
  // Rows past n and tokens past m read row 0 / token 0 instead: their
  // products land in fragment rows and columns that are never stored, so
  // the loads need no predicates.
  ls.w_lo = RowStart<kLayout>(seg.w, row_lo < seg.n ? row_lo : 0, row_bytes);
  ls.w_hi = RowStart<kLayout>(silu ? seg.w_up : seg.w, row_hi < seg.n ? row_hi : 0, row_bytes);
  ls.w_step = (seg.n + kTileRows - 1) / kTileRows * kTileBytes;
  ls.scale_lo = seg.is_fp8 ? seg.scale + scale_row : nullptr;
  ls.scale_hi = seg.is_fp8 ? (silu ? seg.scale_up : seg.scale) + scale_row : nullptr;
  const int parts = kWarps * kStreams;
  const int part_lo = warp * kStreams;
  const int part_hi = part_lo + kStreams - 1;
  ls.begin_lo = part_lo * spans / parts;
  ls.count_lo = (part_lo + 1) * spans / parts - ls.begin_lo;
  ls.begin_hi = part_hi * spans / parts;
  ls.count_hi = (part_hi + 1) * spans / parts - ls.begin_hi;
  // This lane's B columns: a token (token fragment nj: token 8 nj + g),
  // over the first (lo) or second (hi) half.
  ls.x_hi = kStreams == 2 && g >= 4;
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    const int tok = kStreams == 2 ? (g & 3) : 8 * nj + g;
    int64_t x_row = out_row0 + (tok < m ? tok : 0);
    if (p.x_row_index != nullptr) x_row = p.x_row_index[x_row];
    ls.x[nj] = p.x + x_row * p.ldx;
  }

  float acc[kNJ][4];
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nj][e] = 0.f;
  }
  if (seg.is_fp8) {
    StreamSpans<true, kLayout, kNJ>(ls, t, acc);
  } else {
    StreamSpans<false, kLayout, kNJ>(ls, t, acc);
  }

  if constexpr (kWarps > 1) {
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s_red[warp][lane][4 * nj + e] = acc[nj][e];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int nj = 0; nj < kNJ; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = s_red[0][lane][4 * nj + e];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) sum += s_red[w][lane][4 * nj + e];  // fixed order
        acc[nj][e] = sum;
      }
    }
  }
#pragma unroll
  for (int nj = 0; nj < kNJ; ++nj) {
    StoreStreamOutputs<kStreams>(p, seg, acc[nj], silu, out_row0, m, row_lo, row_hi, 8 * nj, t);
  }
}

template <int kStreams, int kWarps, int kNJ>
cudaError_t LaunchStream(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  // One layout a launch (the launcher checks): segment 0's.
  if (p.seg[0].tiled == kTiledAlongK) {
    W8A16StreamKernel<kStreams, kWarps, kTiledAlongK, kNJ><<<grid, kWarps * 32, 0, stream>>>(p);
  } else if (p.seg[0].tiled == kTiledAcrossRows) {
    W8A16StreamKernel<kStreams, kWarps, kTiledAcrossRows, kNJ><<<grid, kWarps * 32, 0, stream>>>(p);
  } else {
    W8A16StreamKernel<kStreams, kWarps, 0, kNJ><<<grid, kWarps * 32, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <int kStreams, int kNJ>
cudaError_t LaunchStreamWarps(int warps, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  switch (warps) {
    case 1: return LaunchStream<kStreams, 1, kNJ>(p, grid, stream);
    case 2: return LaunchStream<kStreams, 2, kNJ>(p, grid, stream);
    case 4: return LaunchStream<kStreams, 4, kNJ>(p, grid, stream);
    case 8: return LaunchStream<kStreams, 8, kNJ>(p, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchStreamKernel(const StreamPlan& plan, const KernelParams& p, dim3 grid, cudaStream_t stream) {
  if (plan.streams == 2 && (p.silu != 0 || plan.token_frags != 1)) return cudaErrorInvalidValue;
  if (plan.streams == 2) return LaunchStreamWarps<2, 1>(plan.warps, p, grid, stream);
  if (plan.streams != 1) return cudaErrorInvalidValue;
  if (plan.token_frags == 4) return LaunchStreamWarps<1, 4>(plan.warps, p, grid, stream);
  if (plan.token_frags == 3) return LaunchStreamWarps<1, 3>(plan.warps, p, grid, stream);
  if (plan.token_frags == 2) return LaunchStreamWarps<1, 2>(plan.warps, p, grid, stream);
  if (plan.token_frags == 1) return LaunchStreamWarps<1, 1>(plan.warps, p, grid, stream);
  return cudaErrorInvalidValue;
}

}  // namespace spar::gemm::internal
