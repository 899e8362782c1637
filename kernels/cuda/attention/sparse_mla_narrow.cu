#include "kernels/cuda/common/arch.cuh"
// Sparse MLA over FP8 latent rows for narrow head tiles (8 or 16 heads per
// CTA): the decode shape of GLM-5 / DeepSeek-V3.2 at tensor parallelism 8
// (64 / 8 and 128 / 8 heads), where every gathered 656-byte row serves few
// heads, so the kernel's cost is the instructions spent per row byte, not
// the tensor cores. Compared with the wide-tile kernel (sparse_mla.cu):
//
// - Scores are computed transposed, Sᵀ = K·Qᵀ: keys are the mma's M (two
//   16-key m-tiles per 32-key block), heads its N (one n-tile per 8 heads),
//   so 8 heads need no padding rows and K is the A operand.
// - Warp w owns dims [64w, 64w + 64) of the 512 e4m3 lanes in both phases:
//   its four k-steps of Sᵀ, and the same 64 columns of the output. The rope
//   lanes (four bf16 k-steps) go to warps 0-3.
// - P·V takes V from registers: the widened K fragment of a 16-key x 16-dim
//   block is, after four movmatrix transposes, the A fragment of Vᵀ for
//   Oᵀ = Vᵀ·Pᵀ (dims x heads). Each e4m3 byte is read from shared memory
//   and widened once per CTA.
// - Two barriers per 32-key block: P·V of block b shares a phase with the
//   scores of block b + 1; the stage a block used is refilled as soon as
//   its softmax is done.
// - 8 threads gather one row (one slot lookup, 16-byte cp.async at fixed
//   offsets).
//
// Column order: a dot product may sum its terms in any order if Q and K
// agree, so lane t of a quad loads the 8 contiguous e4m3 bytes [8t, 8t + 8)
// of each 32-byte half of the warp's 64 dims of a key (one conflict-free
// 8-byte load, rows 672 bytes apart in shared memory); each 4-byte half is
// one k-step's two registers of that key, and Q is read in the same order.
// The rows of Oᵀ (output columns) then come permuted, which the epilogue
// undoes while staging O through shared memory for coalesced stores.
//
// Scales: the codes widen to bf16 times 2^-120 (fp8_sm80.cuh); the query's
// e4m3 lanes carry 2^60, and each warp's partial scores (in one 128-column
// scale block) are multiplied by the key's scale times 2^60; the four
// copies of P (one per 128-column block of V) carry the key's scale times
// 2^104, the output the remaining 2^16.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/sparse_mla_args.cuh"
#include "kernels/cuda/attention/sparse_mla_config.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/reduce.cuh"

namespace spar::mla {
namespace {

// The query's e4m3 lanes carry 2^60 (bf16 bit pattern: exponent field 187)
// and the key scales the other 2^60 of the widening's 2^-120.
constexpr uint16_t kBf16Pow2_60 = 0x5d80;
constexpr float kPow2_60 = 1.152921504606846976e18f;

template <int HN>
struct Narrow {
  static constexpr NarrowTileConfig kTile{HN};
  static constexpr int kNT = HN / 8;  // n-tiles of 8 heads
  static constexpr int kStages = NarrowTileConfig::kStages;
  static constexpr int kStageBytes = kTile.StageBytes();
  static constexpr int kGatherBytes = kTile.GatherBytes();
  static constexpr int kSmem = kTile.SmemBytes();
  static constexpr int kSredPitch = NarrowTileConfig::kSredPitch;
  static constexpr int kPPitch = NarrowTileConfig::kPPitch;
  static constexpr int kOPitch = NarrowTileConfig::kOPitch;
  // The query tile is staged at the end of the gather area.
  static constexpr int kQOffset = kGatherBytes - kTile.QTileBytes();
  static constexpr int kWarpDims = kDimV / kWarps;    // 64 e4m3 lanes / output columns per warp
  static constexpr int kWarpKSteps = kWarpDims / 16;  // 4
  static constexpr int kRowPitch = NarrowTileConfig::kSmemRowBytes;
  // Every thread issues part of the gather, 8 per row (issuing it from the
  // four warps without rope work measured 8 % slower, H200).
  static constexpr int kRowThreads = kThreads / kBlockKeys;
  static constexpr int kThreadChunks = (kFp8RowBytes / 16 + kRowThreads - 1) / kRowThreads;  // per block
  static_assert(HN == 8 || HN == 16, "narrow tiles are 8 or 16 heads");
  static_assert(kQOffset >= (kStages - 1) * kStageBytes, "the query tile may only cover the last stage");
  static_assert(HN * kOPitch * 4 <= kGatherBytes, "the output staging fits the gather area");
  static_assert(kRopeKSteps <= kWarps, "one rope k-step per warp at most");
  static_assert(kWarpDims <= 128 && 128 % kWarpDims == 0, "a warp's columns lie in one scale block");
  static_assert(kSmem <= 166912, "must fit an A100's 163 KB per block");
};

__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  cuda::MmaBf16M16N8K16(d, a, b, d);
}

template <int HN>
__global__ void __launch_bounds__(kThreads, NarrowTileConfig{HN}.MaxCtasByRegisters()) NarrowFp8Kernel(const MlaArgs a) {
  using C = Narrow<HN>;
  constexpr int kNT = C::kNT;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const gather = smem;
  float* const sred = reinterpret_cast<float*>(smem + C::kGatherBytes);
  __nv_bfloat16* const sp = reinterpret_cast<__nv_bfloat16*>(smem + C::kGatherBytes + C::kTile.SredBytes());
  float* const salpha = reinterpret_cast<float*>(smem + C::kGatherBytes + C::kTile.SredBytes() + C::kTile.PBytes());
  float* const sfin_m = salpha + HN;
  float* const sfin_l = sfin_m + HN;
  int32_t* const sidx = reinterpret_cast<int32_t*>(sfin_l + HN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const CtaWork work = LocateCta(a, HN, kBlockKeys);
  const int split = work.split, head0 = work.head0, t = work.t, nblocks = work.nblocks;

  // Block b's 32 raw rows into its stage: thread tid copies 16-byte chunks
  // tid % 8, + 8, ... of row tid / 8; skipped slots are zero-filled (their
  // scores are masked).
  const int grow = tid / C::kRowThreads, gsub = tid % C::kRowThreads;
  const uint8_t* const gsrc = a.cache + gsub * 16;
  uint8_t* const gdst = gather + grow * C::kRowPitch + gsub * 16;
  auto issue = [&](int b, int c_begin, int c_end) {
    if (b >= nblocks) return;
    constexpr int kChunks = kFp8RowBytes / 16;  // 41
    const int32_t slot = sidx[b * kBlockKeys + grow];
    const uint8_t* const src = gsrc + static_cast<int64_t>(max(slot, 0)) * kFp8RowBytes;
    uint8_t* const dst = gdst + (b % C::kStages) * C::kStageBytes;
#pragma unroll
    for (int c = c_begin; c < c_end; ++c) {
      if (gsub + c * C::kRowThreads < kChunks) {
        cuda::CpAsync16(dst + c * C::kRowThreads * 16, src + c * C::kRowThreads * 16, slot < 0 ? 0 : 16);
      }
    }
  };

  // The query tile (rows past `heads` zero-filled) flies while the slots are
  // resolved; then the blocks whose stages it does not cover.
  uint8_t* const qstage = gather + C::kQOffset;
  StageQueryTile(a, t, head0, HN, kRowBytes, qstage);
  cuda::CpAsyncCommit();
  ResolveSlots(a, t, work.k_begin, work.k_end, nblocks * kBlockKeys, sidx);
  __syncthreads();
#pragma unroll
  for (int b = 0; b < C::kStages - 1; ++b) {
    issue(b, 0, C::kThreadChunks);
    cuda::CpAsyncCommit();
  }
  cuda::CpAsyncWait<C::kStages - 1>();  // the query group, the oldest
  __syncthreads();

  // Qᵀ fragments (B operand of Sᵀ) of this warp's four e4m3 k-steps and its
  // rope k-step, kept in registers: b0 = the first two and b1 = the last two
  // of lane t's four dims of the k-step (the order the codes are loaded in),
  // for head g of each n-tile. The e4m3 k-steps' query lanes
  // carry 2^60 (exact: a power of two), so one multiply by the key's scale
  // times 2^60 takes the 2^-120 of the widening back.
  const __nv_bfloat162 q_pow2_60 = __halves2bfloat162(__ushort_as_bfloat16(kBf16Pow2_60), __ushort_as_bfloat16(kBf16Pow2_60));
  uint32_t qf[C::kWarpKSteps + 1][kNT][2];
#pragma unroll
  for (int kk = 0; kk <= C::kWarpKSteps; ++kk) {
    // e4m3 k-step kk = 2h + i: lane t's dims 32h + 4i + 8t + 0..3 of the
    // warp's 64 (two k-steps per 8-byte load); rope: dims 4t + 0..3.
    const int dim_t = kk < C::kWarpKSteps ? warp * C::kWarpDims + (kk >> 1) * 32 + (kk & 1) * 4 + tq * 8
                                          : kDimV + warp * 16 + tq * 4;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      qf[kk][nt][0] = qf[kk][nt][1] = 0;
      if (kk < C::kWarpKSteps || warp < kRopeKSteps) {
        uint2 v = LoadShared<uint2>(qstage + (nt * 8 + g) * kRowBytes + dim_t * 2);
        if (kk < C::kWarpKSteps) {
          __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
          h[0] = __hmul2(h[0], q_pow2_60);
          h[1] = __hmul2(h[1], q_pow2_60);
        }
        qf[kk][nt][0] = v.x;
        qf[kk][nt][1] = v.y;
      }
    }
  }
  __syncthreads();  // the query tile's area is free for the last stage
  issue(C::kStages - 1, 0, C::kThreadChunks);
  cuda::CpAsyncCommit();
  cuda::CpAsyncWait<C::kStages - 1>();  // block 0
  __syncthreads();

  // Vᵀ fragments of the block between its scores and its P·V: [16-key half]
  // [k-step][register].
  uint32_t vf[2][C::kWarpKSteps][4];

  // Partial scores of block b over this warp's dims into sred[warp][head][key],
  // and the block's Vᵀ fragments into vf.
  auto scores = [&](int b) {
    const uint8_t* const tile = gather + (b % C::kStages) * C::kStageBytes;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      float sacc[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[nt][e] = 0.0f;
      // A fragment: keys g and g + 8 of the m-tile, 4 contiguous codes each.
      const uint8_t* const key_g = tile + (mt * 16 + g) * C::kRowPitch;
      const uint8_t* const codes = key_g + warp * C::kWarpDims + tq * 8;
      uint2 raw_g[2], raw_g8[2];  // [h]: k-steps 2h (.x) and 2h + 1 (.y)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        raw_g[h] = LoadShared<uint2>(codes + h * 32);
        raw_g8[h] = LoadShared<uint2>(codes + 8 * C::kRowPitch + h * 32);
      }
#pragma unroll
      for (int kk = 0; kk < C::kWarpKSteps; ++kk) {
        uint32_t af[4];
        const uint2 v = raw_g[kk >> 1], v8 = raw_g8[kk >> 1];
        cuda::E4m3x4ToScaledBf16x4(kk & 1 ? v.y : v.x, af[0], af[2]);
        cuda::E4m3x4ToScaledBf16x4(kk & 1 ? v8.y : v8.x, af[1], af[3]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) Mma(sacc[nt], af, qf[kk][nt][0], qf[kk][nt][1]);
        // Rows of Vᵀ: dims g (a0/a2) and g + 8 (a1/a3); columns: keys.
        vf[mt][kk][0] = cuda::MovMatrixTrans(af[0]);
        vf[mt][kk][1] = cuda::MovMatrixTrans(af[2]);
        vf[mt][kk][2] = cuda::MovMatrixTrans(af[1]);
        vf[mt][kk][3] = cuda::MovMatrixTrans(af[3]);
      }
      // The keys' scales for this warp's 128-column block, times the 2^60
      // the products still lack (finite for any scale below 2^68).
      const int scale_off = kDimV + (warp * C::kWarpDims / 128) * 4;
      const float s0 = LoadShared<float>(key_g + scale_off) * kPow2_60;
      const float s1 = LoadShared<float>(key_g + 8 * C::kRowPitch + scale_off) * kPow2_60;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        sacc[nt][0] *= s0;
        sacc[nt][1] *= s0;
        sacc[nt][2] *= s1;
        sacc[nt][3] *= s1;
      }
      if (warp < kRopeKSteps) {  // rope lanes, bf16, the same column order
        const uint8_t* const rope = key_g + kFp8RopeOffset + warp * 32 + tq * 8;
        const uint2 x = LoadShared<uint2>(rope), y = LoadShared<uint2>(rope + 8 * C::kRowPitch);
        const uint32_t af[4] = {x.x, y.x, x.y, y.y};
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) Mma(sacc[nt], af, qf[C::kWarpKSteps][nt][0], qf[C::kWarpKSteps][nt][1]);
      }
      // c0/c1: key g, heads 2t / 2t+1; c2/c3: key g + 8.
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        float* const sr = sred + (warp * HN + nt * 8 + 2 * tq) * C::kSredPitch + mt * 16 + g;
        sr[0] = sacc[nt][0];
        sr[C::kSredPitch] = sacc[nt][1];
        sr[8] = sacc[nt][2];
        sr[C::kSredPitch + 8] = sacc[nt][3];
      }
    }
  };

  // Online softmax of block b: warp w takes heads w (and w + 8), lane = key.
  // Partial scores are summed in warp order, so the result does not depend
  // on scheduling. The running maximum is lazy: p = exp2(s - m) against the
  // current m, which is raised (and O and the normaliser rescaled) only when
  // a score of the block exceeds it by more than kLazyLog2, so p <= 2^8,
  // far inside fp32 and bf16; most blocks skip the maximum's shuffles and
  // the rescale. Each lane keeps its part of the normaliser, summed once at
  // the end.
  constexpr float kLazyLog2 = 8.0f;
  float m_run[kNT], l_lane[kNT];
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    m_run[j] = -INFINITY;
    l_lane[j] = 0.0f;
  }
  auto softmax = [&](int b) {
    const uint8_t* const row = gather + (b % C::kStages) * C::kStageBytes + lane * C::kRowPitch;
    const float4 sc = LoadShared<float4>(row + kDimV);
    const bool valid = sidx[b * kBlockKeys + lane] >= 0;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int h = warp + 8 * j;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += sred[(w * HN + h) * C::kSredPitch + lane];
      s = valid ? s * a.scale_log2 : -INFINITY;
      float alpha = 1.0f;
      if (__any_sync(0xffffffffu, s > m_run[j] + kLazyLog2)) {  // m_run = -inf: any valid key
        const float m_new = fmaxf(m_run[j], cuda::WarpMax(s));  // finite
        alpha = exp2f(m_run[j] - m_new);         // 0 while nothing was seen
        m_run[j] = m_new;
        l_lane[j] *= alpha;
      }
      const float p = s == -INFINITY ? 0.0f : exp2f(s - m_run[j]);  // masked keys, empty rows: 0
      l_lane[j] += p;
      // One copy of P per 128-column block of V: p times the key's scale for
      // the block (and 2^104), rounded once. The normaliser sums p itself.
      __nv_bfloat16* const prow = sp + h * C::kPPitch + lane;
      prow[0] = __float2bfloat16_rn(p * (sc.x * kPow2_104));
      prow[HN * C::kPPitch] = __float2bfloat16_rn(p * (sc.y * kPow2_104));
      prow[2 * HN * C::kPPitch] = __float2bfloat16_rn(p * (sc.z * kPow2_104));
      prow[3 * HN * C::kPPitch] = __float2bfloat16_rn(p * (sc.w * kPow2_104));
      if (lane == 0) salpha[h] = alpha;
    }
  };

  // Oᵀ += Vᵀ·Pᵀ over this warp's 64 columns after scaling by alpha:
  // oacc[k-step][n-tile]: c0/c1 = column g of the k-step, heads 2t / 2t+1;
  // c2/c3 = column g + 8.
  float oacc[C::kWarpKSteps][kNT][4];
#pragma unroll
  for (int kk = 0; kk < C::kWarpKSteps; ++kk)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[kk][nt][e] = 0.0f;
  const uint8_t* const pcopy =
      reinterpret_cast<const uint8_t*>(sp + (warp * C::kWarpDims / 128) * HN * C::kPPitch);
  auto accumulate = [&]() {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 al = *reinterpret_cast<const float2*>(salpha + nt * 8 + 2 * tq);
      if (!__any_sync(0xffffffffu, al.x != 1.0f || al.y != 1.0f)) continue;  // no head's maximum moved
#pragma unroll
      for (int kk = 0; kk < C::kWarpKSteps; ++kk) {
        oacc[kk][nt][0] *= al.x;
        oacc[kk][nt][1] *= al.y;
        oacc[kk][nt][2] *= al.x;
        oacc[kk][nt][3] *= al.y;
      }
    }
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      // Pᵀ fragment: keys 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of head g.
      uint32_t pb[kNT][2];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint8_t* const prow = pcopy + ((nt * 8 + g) * C::kPPitch + kv * 16 + 2 * tq) * 2;
        pb[nt][0] = LoadShared<uint32_t>(prow);
        pb[nt][1] = LoadShared<uint32_t>(prow + 16);
      }
#pragma unroll
      for (int kk = 0; kk < C::kWarpKSteps; ++kk)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) Mma(oacc[kk][nt], vf[kv][kk], pb[nt][0], pb[nt][1]);
    }
  };

  // Block b's P·V and block b + 1's scores share a phase; the stage of block
  // b is refilled (block b + kStages) once its softmax is done.
  if (nblocks > 0) {
    scores(0);
    __syncthreads();
    softmax(0);
    cuda::CpAsyncWait<C::kStages - 2>();
    __syncthreads();
  }
  for (int b = 0; b < nblocks; ++b) {
    // The next block's copies in two halves around the P·V, so the warps'
    // cp.async do not all queue for the memory pipe at once.
    issue(b + C::kStages, 0, C::kThreadChunks / 2);
    accumulate();
    issue(b + C::kStages, C::kThreadChunks / 2, C::kThreadChunks);
    cuda::CpAsyncCommit();
    if (b + 1 < nblocks) scores(b + 1);
    __syncthreads();
    if (b + 1 < nblocks) softmax(b + 1);
    cuda::CpAsyncWait<C::kStages - 2>();  // block b + 2
    __syncthreads();
  }

  // Epilogue: stage the unnormalised O in shared memory (the gather area is
  // idle: every read of it came before the last barrier), then normalise and
  // write rows of 512 columns with 16-byte (fp32) / 8-byte (bf16) stores.
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    const float l = cuda::WarpSum(l_lane[j]);
    if (lane == 0) {
      sfin_m[warp + 8 * j] = m_run[j];
      sfin_l[warp + 8 * j] = l;
    }
  }
  float* const ofin = reinterpret_cast<float*>(gather);
#pragma unroll
  for (int kk = 0; kk < C::kWarpKSteps; ++kk) {
    // Row g of k-step kk: lane g / 2's code g % 2 (see the Q fragments).
    const int col = warp * C::kWarpDims + (kk >> 1) * 32 + (kk & 1) * 4 + 8 * (g >> 1) + (g & 1);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      float* const o = ofin + (nt * 8 + 2 * tq) * C::kOPitch + col;
      o[0] = oacc[kk][nt][0];
      o[C::kOPitch] = oacc[kk][nt][1];
      o[2] = oacc[kk][nt][2];  // row g + 8 of the k-step: two columns on
      o[C::kOPitch + 2] = oacc[kk][nt][3];
    }
  }
  __syncthreads();
  const bool partial = a.ws_o != nullptr;
  const int64_t th_base = static_cast<int64_t>(t) * a.heads;
  constexpr int kQuads = kDimV / 4;
  for (int i = tid; i < HN * kQuads; i += kThreads) {
    const int h = i / kQuads, col = (i - h * kQuads) * 4;
    if (head0 + h >= a.heads) continue;
    const float l = sfin_l[h];
    // O is 2^16 below its value (the scaled widening, see the top).
    const float inv = l > 0.0f ? kPow2_16 / l : 0.0f;
    const float4 v = *reinterpret_cast<const float4*>(ofin + h * C::kOPitch + col);
    if (partial) {
      float* dst = a.ws_o + (static_cast<int64_t>(split) * a.tokens * a.heads + th_base + head0 + h) * kDimV + col;
      *reinterpret_cast<float4*>(dst) = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    } else {
      __nv_bfloat16* dst = a.out + t * a.o_ts + (head0 + h) * a.o_hs + col;  // 8-byte aligned
      *reinterpret_cast<uint2*>(dst) = make_uint2(PackBf16(v.x * inv, v.y * inv), PackBf16(v.z * inv, v.w * inv));
    }
  }
  if (tid < HN && head0 + tid < a.heads) {
    const float l = sfin_l[tid];
    const float lse = l > 0.0f ? (sfin_m[tid] + log2f(l)) * 0.69314718055994531f : (partial ? -INFINITY : INFINITY);
    if (partial) {
      a.ws_lse[static_cast<int64_t>(split) * a.tokens * a.heads + th_base + head0 + tid] = lse;
    } else if (a.lse != nullptr) {
      a.lse[th_base + head0 + tid] = lse;
    }
  }
}

template <int HN>
absl::Status LaunchNarrow(const MlaArgs& args, int64_t grid, cudaStream_t stream) {
  using C = Narrow<HN>;
  SPAR_CUDA_RETURN_IF_ERROR_NAMED(
      cuda::LaunchWithSmem<NarrowFp8Kernel<HN>>(dim3(static_cast<unsigned>(grid)), kThreads, C::kSmem, stream, args),
      "NarrowFp8Kernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchNarrowFp8(const MlaArgs& args, int head_tile, int64_t grid, cudaStream_t stream) {
  return head_tile == 8 ? LaunchNarrow<8>(args, grid, stream) : LaunchNarrow<16>(args, grid, stream);
}

}  // namespace spar::mla
