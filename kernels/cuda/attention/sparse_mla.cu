#include "kernels/cuda/common/arch.cuh"
// Sparse MLA attention (absorbed form). FP8 rows with 8- or 16-head tiles go
// to sparse_mla_narrow.cu; the split-K log-sum-exp merge is sparse_mla_merge.cu.
//
// One CTA computes [HM heads, 576] @ [keys of one index-list range, 576]ᵀ for
// one token, in blocks of 32 gathered rows:
//   S = Q·Kᵀ (warp tiles of 16 heads x 32 keys; the 576-wide
//       reduction is cut into kNK slices across warps, partial scores summed
//       in a fixed order in smem)
//   online softmax per head (exp2 domain), P rounded to bf16
//   O += P·V, V = the first 512 lanes of the same smem rows (8 warps split
//       O's 512 columns; accumulators stay in registers all along)
// The bf16 64-head tile runs block b's P·V and block b+1's softmax in one
// barrier interval (two barriers a block instead of three).
// Each warp keeps its slice of Q in registers for the whole key loop, so Q
// needs no shared memory and the K/V stages get it all (cp.async gather).
//
// FP8 rows (656 B: 512 e4m3, 4 fp32 scales, 64 bf16 rope lanes) are gathered
// raw and read straight into mma fragments, widened in registers: no bf16
// copy of the tile, no extra barrier. S = Q·Kᵀ: a dot product may sum its
// terms in any order if Q and K agree, so lane t of a quad reads the 4
// contiguous e4m3 bytes [4t, 4t+4) of a k-step (one 32-bit load that widens
// to exactly its two B registers) and Q's fragments are loaded with the
// same column order; each 128-column block's partial score is multiplied by
// the key's fp32 scale. O = P·V: keys stay in mma order and the 512 output
// columns are permuted instead (lane g of n-tile j of a 32-column group
// owns column 4g + j), so four 32-bit loads from four key rows transpose,
// with byte permutes, into the B registers of four n-tiles; V's per-key
// scale is folded into P, one bf16 copy of P per 128-column block.
// The codes widen to bf16 times 2^-120 (no multiply; fp8_sm80.cuh): S's
// partials take the 2^120 back with the scale, P's copies carry 2^104 of it
// and the output the remaining 2^16. Products then land 2^120 (S) or 2^16
// (O) below their true size, so tiny ones are fp32 subnormals, which the
// tensor cores keep (gemm_gpu_test's SubnormalWeightsSurviveTheFold).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/cuda/attention/sparse_mla_args.cuh"
#include "kernels/cuda/attention/sparse_mla_config.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/launch_smem.cuh"
#include "kernels/cuda/common/reduce.cuh"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"

namespace spar {
namespace {

using namespace mla;  // NOLINT: the tile constants

template <int HM, bool kFp8>
struct Cfg {
  static constexpr TileConfig kTile{HM, kFp8};
  static constexpr int kStages = kTile.Stages();
  static constexpr int kStageBytes = kFp8 ? kTile.RawStageBytes() : kTile.TileBytes();
  static constexpr int kGatherBytes = kTile.GatherBytes();
  static constexpr int kSmem = kTile.SmemBytes();
  // The query tile is staged at the end of the gather area; stages below it
  // can be filled at the same time.
  static constexpr int kQOffset = kGatherBytes - HM * kRowBytes;
  // S phase: kNM groups of 16 heads x kNK slices of the 36 k-steps.
  static constexpr int kNM = HM / 16;
  static constexpr int kNK = kWarps / kNM;
  static constexpr int kMaxQSteps = (kKSteps + kNK - 1) / kNK;
  // fp8 S phase: e4m3 k-steps per warp (4, 8 or 16: inside one scale block
  // or two whole ones), then its share of the rope k-steps.
  static constexpr int kNopeSteps = kNopeKSteps / kNK;
  static_assert(kNopeSteps + (kRopeKSteps + kNK - 1) / kNK <= kMaxQSteps, "fp8 k-slices fit the Q registers");
  // O phase: warps tile [HM, 512] as kOGM x kOGN, each kOMT m-tiles x kONT n-tiles.
  static constexpr int kOMT = HM == 64 ? 2 : 1;
  static constexpr int kOGM = HM / (16 * kOMT);
  static constexpr int kOGN = kWarps / kOGM;
  static constexpr int kOCols = kDimV / kOGN;
  static constexpr int kONT = kOCols / 8;
  // Softmax: kTPR threads per head row, kKPT keys each.
  static constexpr int kTPR = kThreads / HM;
  static constexpr int kKPT = kBlockKeys / kTPR;
  static_assert(kQOffset >= 0, "query tile must fit the gather area");
  static_assert(kSmem <= 166912, "must fit an A100's 163 KB per block");
  static_assert(kNM * kNK == kWarps && kOGM * kOGN == kWarps, "warp tiling");
  static_assert(kNK * HM == kWarps * 16, "one 16-row partial-score slab per warp");
  static_assert(kKPT <= 8 && kKPT % 2 == 0, "a softmax thread's keys lie in one 8-key group (SredAt)");
  static_assert(!kTile.Pipelined() || kStages >= 3, "the pipelined loop keeps blocks b, b+1 and b+2 in stages");
  static_assert(!kFp8 || (kONT % 4 == 0 && 128 % kOCols == 0), "fp8 O phase: 32-column groups in one scale block");
};

// Index of (row, key) in the partial-score area, which keeps the mma
// accumulators' own order (sparse_mla_config.h): 16-row slabs of eight
// groups (8-key n-tile nt, rows 0-7 or 8-15), lane g * 4 + t's two keys at
// 2 * lane of its group. A fragment store is 64 contiguous floats from a
// per-lane base and compile-time offsets (no bank conflict, one address
// register); a row's 8 keys of an n-tile are 8 contiguous floats (g * 8).
__device__ __forceinline__ int SredAt(int row, int key) {
  return (row >> 4) * kSredSlabFloats + ((key >> 3) * 2 + ((row >> 3) & 1)) * kSredGroupFloats + (row & 7) * 8 +
         (key & 7);
}

__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  cuda::MmaBf16M16N8K16(d, a, b, d);
}

template <int HM, bool kFp8>
__global__ void __launch_bounds__(kThreads, Cfg<HM, kFp8>::kTile.MaxCtasByRegisters()) SparseMlaKernel(const MlaArgs a) {
  using C = Cfg<HM, kFp8>;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const gather = smem;
  float* const sred = reinterpret_cast<float*>(smem + C::kGatherBytes);
  __nv_bfloat16* const sp_bufs = reinterpret_cast<__nv_bfloat16*>(smem + C::kGatherBytes + C::kTile.SredBytes());
  float* const salpha_bufs = reinterpret_cast<float*>(smem + C::kGatherBytes + C::kTile.SredBytes() + C::kTile.PBytes());
  int32_t* const sidx = reinterpret_cast<int32_t*>(salpha_bufs + C::kTile.PBuffers() * HM);
  // After the key loop the partial-score area holds each head's final max and sum.
  float* const sfin_m = sred;
  float* const sfin_l = sred + HM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CtaWork work = LocateCta(a, HM, kBlockKeys);
  const int split = work.split, head0 = work.head0, t = work.t;
  const int k_begin = work.k_begin, k_end = work.k_end, nblocks = work.nblocks;

  // Gathers block b's 32 rows into its stage with 16-byte cp.async; skipped
  // slots are zero-filled (their scores are masked below).
  auto issue = [&](int b) {
    if (b >= nblocks) return;
    uint8_t* const dst = gather + (b % C::kStages) * C::kStageBytes;
    if constexpr (!kFp8) {
      constexpr int kChunks = kBf16RowBytes / 16;  // 72 per row
#pragma unroll
      for (int i = 0; i < kBlockKeys * kChunks / kThreads; ++i) {
        const int c = tid + i * kThreads;
        const int r = c / kChunks, cc = c - r * kChunks;
        const int32_t slot = sidx[b * kBlockKeys + r];
        const uint8_t* src = a.cache + (slot < 0 ? 0 : static_cast<int64_t>(slot) * kBf16RowBytes) + cc * 16;
        cuda::CpAsync16(dst + r * kRowBytes + cc * 16, src, slot < 0 ? 0 : 16);
      }
    } else {
      constexpr int kChunks = kFp8RowBytes / 16;  // 41 per row
#pragma unroll
      for (int i = 0; i < (kBlockKeys * kChunks + kThreads - 1) / kThreads; ++i) {
        const int c = tid + i * kThreads;
        if (c < kBlockKeys * kChunks) {
          const int r = c / kChunks, cc = c - r * kChunks;
          const int32_t slot = sidx[b * kBlockKeys + r];
          const uint8_t* src = a.cache + (slot < 0 ? 0 : static_cast<int64_t>(slot) * kFp8RowBytes) + cc * 16;
          cuda::CpAsync16(dst + r * kFp8RowBytes + cc * 16, src, slot < 0 ? 0 : 16);
        }
      }
    }
  };
  auto stage_free_of_q = [](int b) { return (b % C::kStages + 1) * C::kStageBytes <= C::kQOffset; };

  // Phase 0: copy the query tile (rows past `heads` zero-filled) into the
  // end of the gather area; it needs no index, so it flies while the slots
  // are resolved.
  uint8_t* const qstage = gather + C::kQOffset;
  StageQueryTile(a, t, head0, HM, kRowBytes, qstage);
  cuda::CpAsyncCommit();

  // Phase 1: resolve this CTA's range of the list to cache slots, -1 = skip.
  ResolveSlots(a, t, k_begin, k_end, nblocks * kBlockKeys, sidx);
  __syncthreads();

  // The first blocks whose stages the query tile does not cover, one
  // cp.async group per block (empty groups included), then wait for the
  // query group only (the oldest).
#pragma unroll
  for (int b = 0; b < C::kStages - 1; ++b) {
    if (stage_free_of_q(b)) issue(b);
    cuda::CpAsyncCommit();
  }
  cuda::CpAsyncWait<C::kStages - 1>();
  __syncthreads();

  // This warp's S-phase role and its query fragments (kept in registers).
  // bf16: k-steps [kstep0, kstep1). fp8: kNopeSteps e4m3 k-steps from
  // nope0 (whole 128-column scale blocks, or half of one), then the rope
  // k-steps [rope0, rope1).
  const int mg = warp % C::kNM, ks = warp / C::kNM;
  const int mrow0 = mg * 16;  // this warp's first head row in the S phase
  const int kstep0 = ks * kKSteps / C::kNK, kstep1 = (ks + 1) * kKSteps / C::kNK;
  const int nope0 = ks * C::kNopeSteps;
  const int rope0 = kNopeKSteps + ks * kRopeKSteps / C::kNK, rope1 = kNopeKSteps + (ks + 1) * kRopeKSteps / C::kNK;
  uint32_t qf[C::kMaxQSteps][4];
#pragma unroll
  for (int kk = 0; kk < C::kMaxQSteps; ++kk) {
    if constexpr (kFp8) {
      // Columns in the K order: lane t's a0/a2 are columns 4t..4t+3.
      const int step = kk < C::kNopeSteps ? nope0 + kk : rope0 + kk - C::kNopeSteps;
      if (kk < C::kNopeSteps || step < rope1) {
        const uint8_t* qrow = qstage + (mrow0 + (lane >> 2)) * kRowBytes + (step * 16 + (lane & 3) * 4) * 2;
        const uint2 lo = LoadShared<uint2>(qrow), hi = LoadShared<uint2>(qrow + 8 * kRowBytes);
        qf[kk][0] = lo.x;
        qf[kk][1] = hi.x;
        qf[kk][2] = lo.y;
        qf[kk][3] = hi.y;
      }
    } else if (kKSteps % C::kNK == 0 || kstep0 + kk < kstep1) {  // even slices: always
      cuda::LdMatrixX4(qf[kk], qstage + (mrow0 + (lane & 15)) * kRowBytes + ((kstep0 + kk) * 16 + (lane >> 4) * 8) * 2);
    }
  }
  __syncthreads();
  // Blocks whose stages held the query tile. Group accounting: each block
  // b < kStages-1 sits in its own group, so the loop's wait<kStages-2>
  // still finds block b complete (the query group is older than all).
#pragma unroll
  for (int b = 0; b < C::kStages - 1; ++b) {
    if (!stage_free_of_q(b)) {
      issue(b);
      cuda::CpAsyncCommit();
    }
  }

  // Softmax role: head row srow, keys [ssub * kKPT, +kKPT) of each block.
  const int srow = tid / C::kTPR, ssub = tid % C::kTPR;
  float m_run = -INFINITY, l_run = 0.0f;
  // O role.
  const int om = warp % C::kOGM, on = warp / C::kOGM;
  float oacc[C::kOMT][C::kONT][4];
#pragma unroll
  for (int mt = 0; mt < C::kOMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::kONT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[mt][nt][e] = 0.0f;

  // Block b's rows in shared memory (bf16: the gathered tile; fp8: raw rows),
  // and the buffers its probabilities and rescale factors go through.
  auto tile_of = [&](int b) { return gather + (b % C::kStages) * C::kStageBytes; };
  auto p_of = [&](int b) { return sp_bufs + (b % C::kTile.PBuffers()) * (C::kTile.PBytes() / C::kTile.PBuffers() / 2); };
  auto alpha_of = [&](int b) { return salpha_bufs + (b % C::kTile.PBuffers()) * HM; };

  auto score = [&](int b) {
    const uint8_t* const tile = tile_of(b);
    // Phase 2: partial scores of this warp's 16 heads x 32 keys over its
    // k-slice, into its slab of the partial-score area.
    {
      // This lane's pair in n-tile nt, rows 0-7 (half 0) or 8-15:
      // SredAt(ks * HM + mrow0 + half * 8 + g, nt * 8 + 2t).
      float* const slab = sred + (ks * HM + mrow0) / 16 * kSredSlabFloats + lane * 2;
      auto store = [&](int nt, int half, float x, float y) {
        *reinterpret_cast<float2*>(slab + (nt * 2 + half) * kSredGroupFloats) = make_float2(x, y);
      };
      if constexpr (kFp8) {
        float sacc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[nt][e] = 0.0f;
        // Key nt * 8 + g of n-tile nt; this lane's scales are those of keys
        // nt * 8 + 2t and + 1 (its accumulator columns).
        const uint8_t* krow = tile + (lane >> 2) * kFp8RowBytes + (lane & 3) * 4;
        const uint8_t* scale_row = tile + (lane & 3) * 2 * kFp8RowBytes + kDimV;
        constexpr int kChunk = C::kNopeSteps < 8 ? C::kNopeSteps : 8;  // k-steps per scale block
#pragma unroll
        for (int c = 0; c < C::kNopeSteps / kChunk; ++c) {
          float part[4][4];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[nt][e] = 0.0f;
#pragma unroll
          for (int i = 0; i < kChunk; ++i) {
            const int kk = c * kChunk + i;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              uint32_t lo, hi;
              cuda::E4m3x4ToScaledBf16x4(LoadShared<uint32_t>(krow + nt * 8 * kFp8RowBytes + (nope0 + kk) * 16), lo,
                                         hi);
              Mma(part[nt], qf[kk], lo, hi);
            }
          }
          const int blk = (nope0 + c * kChunk) / 8;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const float s0 = LoadShared<float>(scale_row + nt * 8 * kFp8RowBytes + blk * 4);
            const float s1 = LoadShared<float>(scale_row + (nt * 8 + 1) * kFp8RowBytes + blk * 4);
            // 2^120 first: the scale may be large enough to overflow with it.
            sacc[nt][0] += part[nt][0] * cuda::kPow2_120 * s0;
            sacc[nt][1] += part[nt][1] * cuda::kPow2_120 * s1;
            sacc[nt][2] += part[nt][2] * cuda::kPow2_120 * s0;
            sacc[nt][3] += part[nt][3] * cuda::kPow2_120 * s1;
          }
        }
        // Rope lanes: bf16 after the scales, the same column order.
#pragma unroll
        for (int kk = C::kNopeSteps; kk < C::kMaxQSteps; ++kk) {
          const int step = rope0 + kk - C::kNopeSteps;
          if (step < rope1) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              // krow holds + 4t; the lane's four bf16 lanes start at + 8t.
              const uint2 v = LoadShared<uint2>(krow + nt * 8 * kFp8RowBytes + kFp8RopeOffset +
                                                (step - kNopeKSteps) * 32 + (lane & 3) * 4);
              Mma(sacc[nt], qf[kk], v.x, v.y);
            }
          }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          store(nt, 0, sacc[nt][0], sacc[nt][1]);
          store(nt, 1, sacc[nt][2], sacc[nt][3]);
        }
      } else {
        // ldmatrix x4 at krow + 16 keys * j: n-tiles 2j (kb[j][0], kb[j][1]) and 2j + 1 (kb[j][2], kb[j][3]).
        const uint8_t* krow = tile + ((lane & 7) + ((lane >> 4) << 3)) * kRowBytes + ((lane >> 3) & 1) * 16;
        float sacc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C::kMaxQSteps; ++kk) {
          if (kKSteps % C::kNK == 0 || kstep0 + kk < kstep1) {
            const int off = (kstep0 + kk) * 32;
            uint32_t kb[2][4];
#pragma unroll
            for (int j = 0; j < 2; ++j) cuda::LdMatrixX4(kb[j], krow + j * 16 * kRowBytes + off);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              Mma(sacc[2 * j], qf[kk], kb[j][0], kb[j][1]);
              Mma(sacc[2 * j + 1], qf[kk], kb[j][2], kb[j][3]);
            }
          }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          store(nt, 0, sacc[nt][0], sacc[nt][1]);
          store(nt, 1, sacc[nt][2], sacc[nt][3]);
        }
      }
    }
  };
  auto softmax = [&](int b) {
    const uint8_t* const tile = tile_of(b);
    __nv_bfloat16* const sp = p_of(b);
    float* const salpha = alpha_of(b);
    // Phase 3: online softmax. Partial scores are summed in slice order, so
    // the result does not depend on scheduling.
    {
      const int j0 = ssub * C::kKPT;
      float s[C::kKPT];
#pragma unroll
      for (int i = 0; i < C::kKPT; ++i) s[i] = 0.0f;
      // Slice q's partials of this thread's keys: q whole slabs further on.
      const float* const mine = sred + SredAt(srow, j0);
      static_assert(HM % 16 == 0, "slices start on a slab");
#pragma unroll
      for (int q = 0; q < C::kNK; ++q) {
        const float* const part = mine + q * (HM / 16) * kSredSlabFloats;
        if constexpr (C::kKPT == 8) {
          // Two 16-byte loads; odd rows take their halves in the other order
          // so that each load's quarter-warp (two rows) hits distinct banks.
          const int odd = srow & 1;
          const float4 va = *reinterpret_cast<const float4*>(part + 4 * odd);
          const float4 vb = *reinterpret_cast<const float4*>(part + 4 * (odd ^ 1));
          const float4 lo = odd ? vb : va, hi = odd ? va : vb;
          s[0] += lo.x;
          s[1] += lo.y;
          s[2] += lo.z;
          s[3] += lo.w;
          s[4] += hi.x;
          s[5] += hi.y;
          s[6] += hi.z;
          s[7] += hi.w;
        } else {
#pragma unroll
          for (int i = 0; i < C::kKPT; i += 2) {
            const float2 v = *reinterpret_cast<const float2*>(part + i);
            s[i] += v.x;
            s[i + 1] += v.y;
          }
        }
      }
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < C::kKPT; ++i) {
        s[i] = sidx[b * kBlockKeys + j0 + i] >= 0 ? s[i] * a.scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i]);
      }
#pragma unroll
      for (int o = C::kTPR / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run, mx);
      float alpha = 1.0f, sum = 0.0f;
      float pf[C::kKPT];  // probabilities (masked keys and empty rows: 0)
      if (m_new != -INFINITY) {
        alpha = exp2f(m_run - m_new);
#pragma unroll
        for (int i = 0; i < C::kKPT; ++i) pf[i] = exp2f(s[i] - m_new);
      } else {
#pragma unroll
        for (int i = 0; i < C::kKPT; ++i) pf[i] = 0.0f;
      }
      if constexpr (kFp8) {
        // One copy per 128-column block of V: p times the key's scale for
        // the block (and 2^104), rounded once. The normaliser sums p itself.
        float sc[C::kKPT][4];
#pragma unroll
        for (int i = 0; i < C::kKPT; ++i) {
          const float4 v = LoadShared<float4>(tile + (j0 + i) * kFp8RowBytes + kDimV);
          sc[i][0] = v.x * kPow2_104;
          sc[i][1] = v.y * kPow2_104;
          sc[i][2] = v.z * kPow2_104;
          sc[i][3] = v.w * kPow2_104;
          sum += pf[i];
        }
#pragma unroll
        for (int blk = 0; blk < C::kTile.PCopies(); ++blk) {
          uint32_t* prow = reinterpret_cast<uint32_t*>(sp + (blk * HM + srow) * kPStride + j0);
#pragma unroll
          for (int i = 0; i < C::kKPT; i += 2) prow[i / 2] = PackBf16(pf[i] * sc[i][blk], pf[i + 1] * sc[i + 1][blk]);
        }
      } else {
        uint32_t* prow = reinterpret_cast<uint32_t*>(sp + srow * kPStride + j0);
#pragma unroll
        for (int i = 0; i < C::kKPT; i += 2) {
          const __nv_bfloat162 pb = __floats2bfloat162_rn(pf[i], pf[i + 1]);
          // The normaliser sums the rounded probabilities the MMA multiplies.
          sum += __low2float(pb) + __high2float(pb);
          prow[i / 2] = *reinterpret_cast<const uint32_t*>(&pb);
        }
      }
#pragma unroll
      for (int o = C::kTPR / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (ssub == 0) salpha[srow] = alpha;
    }
  };
  auto accumulate = [&](int b) {
    const uint8_t* const tile = tile_of(b);
    const __nv_bfloat16* const sp = p_of(b);
    const float* const salpha = alpha_of(b);
    // Phase 4: O = O * alpha + P·V over this warp's rows and columns.
    {
#pragma unroll
      for (int mt = 0; mt < C::kOMT; ++mt) {
        const int r = (om * C::kOMT + mt) * 16 + (lane >> 2);
        const float a0 = salpha[r], a1 = salpha[r + 8];
#pragma unroll
        for (int nt = 0; nt < C::kONT; ++nt) {
          oacc[mt][nt][0] *= a0;
          oacc[mt][nt][1] *= a0;
          oacc[mt][nt][2] *= a1;
          oacc[mt][nt][3] *= a1;
        }
      }
      // fp8: this warp's columns lie in one 128-column block, whose copy
      // of P carries the keys' scales.
      const __nv_bfloat16* pblk = sp + (kFp8 ? (on * C::kOCols / 128) * HM * kPStride : 0);
#pragma unroll
      for (int kv = 0; kv < kBlockKeys / 16; ++kv) {
        uint32_t pa[C::kOMT][4];
#pragma unroll
        for (int mt = 0; mt < C::kOMT; ++mt) {
          cuda::LdMatrixX4(pa[mt], pblk + ((om * C::kOMT + mt) * 16 + (lane & 15)) * kPStride + kv * 16 + (lane >> 4) * 8);
        }
        if constexpr (kFp8) {
          // Keys 2t, 2t+1, 2t+8, 2t+9 of the k-step (mma order); lane g's
          // 32-bit word of each row is columns 4g..4g+3 of a 32-column
          // group, i.e. its column in n-tiles 0..3 of the group.
          const uint8_t* vrow = tile + (kv * 16 + (lane & 3) * 2) * kFp8RowBytes + on * C::kOCols + (lane >> 2) * 4;
#pragma unroll
          for (int grp = 0; grp < C::kONT / 4; ++grp) {
            const uint32_t w0 = LoadShared<uint32_t>(vrow + grp * 32);
            const uint32_t w1 = LoadShared<uint32_t>(vrow + kFp8RowBytes + grp * 32);
            const uint32_t w2 = LoadShared<uint32_t>(vrow + 8 * kFp8RowBytes + grp * 32);
            const uint32_t w3 = LoadShared<uint32_t>(vrow + 9 * kFp8RowBytes + grp * 32);
            // b0[j]: keys 2t, 2t+1 of column j; b1[j]: keys 2t+8, 2t+9.
            uint32_t b0[4], b1[4];
            cuda::E4m3x4ToScaledBf16x4(__byte_perm(w0, w1, 0x5140), b0[0], b0[1]);
            cuda::E4m3x4ToScaledBf16x4(__byte_perm(w0, w1, 0x7362), b0[2], b0[3]);
            cuda::E4m3x4ToScaledBf16x4(__byte_perm(w2, w3, 0x5140), b1[0], b1[1]);
            cuda::E4m3x4ToScaledBf16x4(__byte_perm(w2, w3, 0x7362), b1[2], b1[3]);
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int mt = 0; mt < C::kOMT; ++mt) Mma(oacc[mt][4 * grp + j], pa[mt], b0[j], b1[j]);
          }
        } else {
          const uint8_t* vrow = tile + (kv * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowBytes +
                                (on * C::kOCols + (lane >> 4) * 8) * 2;
#pragma unroll
          for (int np = 0; np < C::kONT / 2; ++np) {
            uint32_t vb[4];
            cuda::LdMatrixX4Trans(vb, vrow + np * 32);
#pragma unroll
            for (int mt = 0; mt < C::kOMT; ++mt) {
              Mma(oacc[mt][2 * np], pa[mt], vb[0], vb[1]);
              Mma(oacc[mt][2 * np + 1], pa[mt], vb[2], vb[3]);
            }
          }
        }
      }
    }
  };

  if constexpr (C::kTile.Pipelined()) {
    // Two barriers a block: block b+1's scores are summed and its softmax
    // runs while block b's P·V is in the tensor cores (P and alpha double
    // buffered). Block b+2 is gathered meanwhile, into block b-1's stage.
    // b = -1 only scores block 0 (blocks 0 and 1 were issued above).
    for (int b = -1; b < nblocks; ++b) {
      cuda::CpAsyncWait<C::kStages - 3>();
      __syncthreads();  // block b+1 landed; P(b) written; partial scores read; block b-1 consumed
      if (b >= 0) {
        issue(b + C::kStages - 1);
        cuda::CpAsyncCommit();
      }
      if (b + 1 < nblocks) score(b + 1);
      __syncthreads();  // block b+1's partial scores written
      if (b >= 0) accumulate(b);
      if (b + 1 < nblocks) softmax(b + 1);
    }
  } else {
    for (int b = 0; b < nblocks; ++b) {
      cuda::CpAsyncWait<C::kStages - 2>();
      __syncthreads();  // block b landed everywhere; block b-1 fully consumed
      issue(b + C::kStages - 1);
      cuda::CpAsyncCommit();
      score(b);
      __syncthreads();
      softmax(b);
      __syncthreads();
      accumulate(b);
    }
  }

  // Phase 5: normalise and write (final bf16 output, or this split's fp32
  // partial for the merge kernel).
  if (ssub == 0) {
    sfin_m[srow] = m_run;
    sfin_l[srow] = l_run;
  }
  __syncthreads();
  const bool partial = a.ws_o != nullptr;
  const int64_t th_base = static_cast<int64_t>(t) * a.heads;
#pragma unroll
  for (int mt = 0; mt < C::kOMT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = (om * C::kOMT + mt) * 16 + (lane >> 2) + half * 8;
      const int h = head0 + r;
      if (h >= a.heads) continue;
      const float l = sfin_l[r];
      // fp8: O is 2^16 below its value (the scaled widening, see the top).
      const float inv = l > 0.0f ? (kFp8 ? kPow2_16 : 1.0f) / l : 0.0f;
      if constexpr (kFp8) {
        // Permuted columns: element e of n-tile j of group grp is column
        // 32 grp + 4 (2t + e) + j, so the lane owns 8 contiguous columns.
        const int col0 = on * C::kOCols + (lane & 3) * 8;
#pragma unroll
        for (int grp = 0; grp < C::kONT / 4; ++grp) {
          float v[8];
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int j = 0; j < 4; ++j) v[4 * e + j] = oacc[mt][4 * grp + j][2 * half + e] * inv;
          if (partial) {
            float* dst = a.ws_o + ((static_cast<int64_t>(split) * a.tokens * a.heads + th_base + h) * kDimV) + col0 +
                         grp * 32;
            *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
            *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
          } else {
            __nv_bfloat16* dst = a.out + t * a.o_ts + h * a.o_hs + col0 + grp * 32;  // 8-byte aligned
            *reinterpret_cast<uint2*>(dst) = make_uint2(PackBf16(v[0], v[1]), PackBf16(v[2], v[3]));
            *reinterpret_cast<uint2*>(dst + 4) = make_uint2(PackBf16(v[4], v[5]), PackBf16(v[6], v[7]));
          }
        }
        continue;
      }
      const int col0 = on * C::kOCols + (lane & 3) * 2;
      if (partial) {
        float* dst = a.ws_o + ((static_cast<int64_t>(split) * a.tokens * a.heads + th_base + h) * kDimV) + col0;
#pragma unroll
        for (int nt = 0; nt < C::kONT; ++nt) {
          *reinterpret_cast<float2*>(dst + nt * 8) =
              make_float2(oacc[mt][nt][2 * half] * inv, oacc[mt][nt][2 * half + 1] * inv);
        }
      } else {
        __nv_bfloat16* dst = a.out + t * a.o_ts + h * a.o_hs + col0;
#pragma unroll
        for (int nt = 0; nt < C::kONT; ++nt) {
          *reinterpret_cast<uint32_t*>(dst + nt * 8) =
              PackBf16(oacc[mt][nt][2 * half] * inv, oacc[mt][nt][2 * half + 1] * inv);
        }
      }
    }
  }
  if (tid < HM && head0 + tid < a.heads) {
    const float l = sfin_l[tid];
    const float lse = l > 0.0f ? (sfin_m[tid] + log2f(l)) * 0.69314718055994531f : (partial ? -INFINITY : INFINITY);
    if (partial) {
      a.ws_lse[static_cast<int64_t>(split) * a.tokens * a.heads + th_base + head0 + tid] = lse;
    } else if (a.lse != nullptr) {
      a.lse[th_base + head0 + tid] = lse;
    }
  }
}

template <int HM, bool kFp8>
absl::Status LaunchVariant(const MlaArgs& args, int64_t grid, cudaStream_t stream) {
  using C = Cfg<HM, kFp8>;
  SPAR_CUDA_RETURN_IF_ERROR_NAMED((cuda::LaunchWithSmem<SparseMlaKernel<HM, kFp8>>(
                                      dim3(static_cast<unsigned>(grid)), kThreads, C::kSmem, stream, args)),
                                  "SparseMlaKernel");
  return absl::OkStatus();
}

// The split-K merge, when the plan splits the list (sparse_mla_merge.cu).
absl::Status LaunchMerge(const MlaArgs& args, const SparseMlaPlan& plan, const SparseMlaParams& p,
                         cudaStream_t stream) {
  if (plan.num_splits <= 1 || p.defer_merge) return absl::OkStatus();
  return LaunchSplitMerge(args, plan.num_splits, stream);
}

constexpr absl::string_view kOp = "SparseMla";

}  // namespace

bool SparseMlaSupported(int heads, LatentFormat format) {
  return heads >= 1 && heads <= 4096 &&
         (format == LatentFormat::kBF16 || format == LatentFormat::kFp8Ds);
}

absl::Status PlanSparseMlaForDevice(int64_t tokens, int heads, int list_len, LatentFormat format,
                                    SparseMlaPlan* plan, int head_tile) {
  const DeviceInfo dev = CurrentDeviceInfo();
  const bool fp8 = format == LatentFormat::kFp8Ds;
  *plan = head_tile > 0 ? PlanSparseMlaSplits(tokens, heads, head_tile, list_len, dev.sm_count, dev.smem_per_sm, fp8)
                        : PlanSparseMla(tokens, heads, list_len, dev.sm_count, dev.smem_per_sm, fp8);
  return absl::OkStatus();
}

absl::Status LaunchSparseMla(const SparseMlaParams& p, cudaStream_t stream) {
  if (!SparseMlaSupported(p.heads, p.format)) return InvalidParam(kOp, "heads/format", "unsupported (heads 1..4096, kBF16 or kFp8Ds)");
  if (p.tokens < 0 || p.tokens > (int64_t{1} << 24)) return InvalidParam(kOp, "tokens", "out of range");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.q == nullptr || (reinterpret_cast<uintptr_t>(p.q) & 15) != 0) return InvalidParam(kOp, "q", "null or not 16-byte aligned");
  if (p.q_token_stride % 8 != 0 || p.q_head_stride % 8 != 0) return InvalidParam(kOp, "q_*_stride", "must be multiples of 8");
  if (p.cache == nullptr || (reinterpret_cast<uintptr_t>(p.cache) & 15) != 0) return InvalidParam(kOp, "cache", "null or not 16-byte aligned");
  if (p.num_slots < 0 || p.num_slots > (int64_t{1} << 31) - 1) return InvalidParam(kOp, "num_slots", "out of int32 range");
  if (p.list_len < 0 || p.list_len > kMaxSplits * kMaxKeysPerCta) return InvalidParam(kOp, "list_len", "negative or above 524288");
  if (p.indices == nullptr && (p.block_table == nullptr || p.token_seq == nullptr || p.kv_lens == nullptr)) {
    return InvalidParam(kOp, "indices", "null, and the dense mode needs block_table, token_seq and kv_lens");
  }
  if (!std::isfinite(p.scale)) return InvalidParam(kOp, "scale", "not finite");
  if (!p.defer_merge) {
    if (p.out == nullptr || (reinterpret_cast<uintptr_t>(p.out) & 7) != 0) return InvalidParam(kOp, "out", "null or not 8-byte aligned");
    if (p.out_token_stride % 4 != 0 || p.out_head_stride % 4 != 0) return InvalidParam(kOp, "out_*_stride", "must be multiples of 4");
  } else if (p.lse != nullptr) {
    return InvalidParam(kOp, "lse", "must be null with defer_merge (the merge writes it)");
  }

  SparseMlaPlan plan = p.plan;
  if (plan.head_tile == 0 && plan.num_splits == 0 && plan.keys_per_split == 0) {
    if (auto st = PlanSparseMlaForDevice(p.tokens, p.heads, p.list_len, p.format, &plan); !st.ok()) return st;
  }
  const bool fp8 = p.format == LatentFormat::kFp8Ds;
  if (plan.head_tile != 16 && plan.head_tile != 32 && plan.head_tile != 64 && !(fp8 && plan.head_tile == 8)) {
    return InvalidParam(kOp, "plan.head_tile", "must be 16, 32 or 64 (or 8 with FP8 rows)");
  }
  if (plan.num_splits < 1 || plan.keys_per_split < kBlockKeys || plan.keys_per_split % kBlockKeys != 0 ||
      plan.keys_per_split > kMaxKeysPerCta) {
    return InvalidParam(kOp, "plan", "num_splits >= 1 and keys_per_split a multiple of 32 in [32, 2048]");
  }
  if (plan.num_splits > kMaxSplits) return InvalidParam(kOp, "plan.num_splits", "at most 256");
  if (p.defer_merge && plan.num_splits < 2) return InvalidParam(kOp, "defer_merge", "needs a plan with 2 or more splits");
  if (static_cast<int64_t>(plan.num_splits) * plan.keys_per_split < p.list_len) {
    return InvalidParam(kOp, "plan", "num_splits * keys_per_split must cover list_len");
  }
  const size_t ws_need = SparseMlaWorkspaceBytes(plan, p.tokens, p.heads);
  if (ws_need > 0 && (p.workspace == nullptr || p.workspace_bytes < ws_need ||
                      (reinterpret_cast<uintptr_t>(p.workspace) & 15) != 0)) {
    return InvalidParam(kOp, "workspace", absl::StrCat("needs ", ws_need, " bytes, 16-byte aligned"));
  }

  MlaArgs args{};
  args.q = p.q;
  args.q_ts = p.q_token_stride;
  args.q_hs = p.q_head_stride;
  args.cache = p.cache;
  args.num_slots = p.num_slots;
  args.indices = p.indices;
  args.idx_stride = p.indices_stride;
  args.list_len = p.list_len;
  args.block_table = p.block_table;
  args.bt_stride = p.block_table_stride;
  args.token_seq = p.token_seq;
  args.kv_lens = p.kv_lens;
  args.scale_log2 = p.scale * 1.4426950408889634f;
  args.out = p.out;
  args.o_ts = p.out_token_stride;
  args.o_hs = p.out_head_stride;
  args.lse = p.lse;
  args.tokens = static_cast<int>(p.tokens);
  args.heads = p.heads;
  args.head_tiles = (p.heads + plan.head_tile - 1) / plan.head_tile;
  args.num_splits = plan.num_splits;
  args.keys_per_split = plan.keys_per_split;
  if (plan.num_splits > 1) {
    const SparseMlaPartialsView parts = SparseMlaPartials(plan, p.tokens, p.heads, p.workspace);
    args.ws_o = parts.o;
    args.ws_lse = parts.lse;
  }
  const int64_t grid = p.tokens * args.head_tiles * plan.num_splits;
  if (grid >= (int64_t{1} << 31)) return InvalidParam(kOp, "tokens", "too many CTAs");

  if (fp8 && plan.head_tile <= 16) {
    if (absl::Status st = LaunchNarrowFp8(args, plan.head_tile, grid, stream); !st.ok()) return st;
    return LaunchMerge(args, plan, p, stream);
  }
  using LaunchFn = absl::Status (*)(const MlaArgs&, int64_t, cudaStream_t);
  LaunchFn launch = nullptr;
  switch (plan.head_tile * 2 + (fp8 ? 1 : 0)) {
    case 32: launch = LaunchVariant<16, false>; break;
    case 64: launch = LaunchVariant<32, false>; break;
    case 65: launch = LaunchVariant<32, true>; break;
    case 128: launch = LaunchVariant<64, false>; break;
    default: launch = LaunchVariant<64, true>; break;
  }
  if (absl::Status st = launch(args, grid, stream); !st.ok()) return st;
  return LaunchMerge(args, plan, p, stream);
}

}  // namespace spar
