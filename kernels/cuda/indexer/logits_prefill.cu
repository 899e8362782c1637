// Ragged prefill logits over contiguous keys:
//   logits[t, s] = Σ_h w[t,h] · relu(q[t,h,:] · k[s,:]) · k_scale[s],  ks[t] <= s < ke[t].
//
// Work split: a CTA takes 256 query rows (8 warps × 32 heads: 8 tokens at
// 32 heads, 4 tokens at 64 heads) and one key split (a fixed-length,
// 64-aligned slice of the key axis; logits of different keys are
// independent, so splits need no reduction and balance causal masks). Each
// warp keeps its 32 query rows (one token's heads, or half of them) as mma A
// fragments in registers and streams 64-key tiles:
//   cp.async ring (kStages tiles) -> [FP8: decode e4m3 -> bf16 into a
//   double-buffered swizzled tile, once per CTA] -> ldmatrix B fragments ->
//   mma.sync -> relu · w -> sum over heads in registers (a transposing
//   shuffle reduction leaves one key per lane) -> · k_scale -> store.
// At 64 heads the two warps of a token add their halves through smem.
//
// FP8 scaling as in logits_paged.cu: keys decode to value · 2^-120, q is
// pre-scaled by 2^96, the product carries 2^-24, folded into k_scale.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/indexer_common.cuh"

namespace spar {
namespace {

using cuda::indexer::kDim;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;  // keys per pipeline stage
constexpr uint16_t kBf16Pow2_96 = 0x6f80;
constexpr float kPow2_24 = 16777216.0f;

template <bool kFp8>
struct PrefillCfg {
  static constexpr int kStages = 4;
  // FP8 stage: 64 keys × 128 B linear, then 64 fp32 scales. BF16 stage: the
  // swizzled bf16 tile itself.
  static constexpr int kStageBytes = kFp8 ? kTile * (kDim + 4) : kTile * kDim * 2;
  static constexpr int kTileBf16Bytes = kTile * kDim * 2;
  static constexpr int kDecodedBytes = kFp8 ? 2 * kTileBf16Bytes : 0;
  static constexpr int kRedBytes = kWarps * kTile * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + kDecodedBytes + kRedBytes;
};

// bf16 tile: key rows of 256 B = 16 chunks; chunk c of key `key` lives at
// c ^ (key & 7) so that ldmatrix's 8 rows hit 8 different bank groups.
__device__ __forceinline__ int Bf16ChunkOffset(int key, int c) { return key * 256 + ((c ^ (key & 7)) << 4); }

// Issues the cp.async copies of tile [kbase, kbase + 64) (keys >= num_keys are zero-filled).
template <bool kFp8>
__device__ __forceinline__ void LoadTile(const IndexerLogitsParams& p, int64_t kbase, uint8_t* dst) {
  const uint8_t* keys = static_cast<const uint8_t*>(p.keys);
  constexpr int kRowBytes = kFp8 ? kDim : 2 * kDim;
  constexpr int kChunksPerKey = kRowBytes / 16;
  constexpr int kValueChunks = kTile * kChunksPerKey;
  for (int c = threadIdx.x; c < kValueChunks; c += kThreads) {
    const int key = c / kChunksPerKey, cc = c % kChunksPerKey;
    const bool valid = kbase + key < p.num_keys;
    const uint8_t* src = keys + (valid ? (kbase + key) * kRowBytes + cc * 16 : 0);
    const int off = kFp8 ? c * 16 : Bf16ChunkOffset(key, cc);
    cuda::CpAsync16(dst + off, src, valid ? 16 : 0);
  }
  if constexpr (kFp8) {
    // 64 scales = 16 chunks; kbase is a multiple of 64 and k_scale 16-byte
    // aligned. A chunk cut by num_keys goes scale by scale, so no byte past
    // the array is ever addressed.
    if (threadIdx.x < kTile / 4) {
      const int64_t first = kbase + 4 * threadIdx.x;
      const int64_t n = std::min<int64_t>(4, std::max<int64_t>(0, p.num_keys - first));
      uint8_t* d = dst + kTile * kDim + 16 * threadIdx.x;
      if (n == 4) {
        cuda::CpAsync16(d, p.k_scale + first);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool ok = j < n;
          cuda::indexer::CpAsync4(d + 4 * j, p.k_scale + (ok ? first + j : 0), ok ? 4 : 0);
        }
      }
    }
  }
}

// e4m3 stage -> bf16 (value · 2^-120) swizzled tile; 2 chunks of 16 keys-bytes per thread.
__device__ __forceinline__ void DecodeTile(const uint8_t* stage, uint8_t* tile) {
  for (int c = threadIdx.x; c < kTile * kDim / 16; c += kThreads) {
    const int key = c >> 3, cc = c & 7;
    const uint4 raw = *reinterpret_cast<const uint4*>(stage + c * 16);
    uint4 lo, hi;
    cuda::E4m3x4ToScaledBf16x4(raw.x, lo.x, lo.y);
    cuda::E4m3x4ToScaledBf16x4(raw.y, lo.z, lo.w);
    cuda::E4m3x4ToScaledBf16x4(raw.z, hi.x, hi.y);
    cuda::E4m3x4ToScaledBf16x4(raw.w, hi.z, hi.w);
    *reinterpret_cast<uint4*>(tile + Bf16ChunkOffset(key, 2 * cc)) = lo;
    *reinterpret_cast<uint4*>(tile + Bf16ChunkOffset(key, 2 * cc + 1)) = hi;
  }
}

template <bool kFp8>
static __global__ void __launch_bounds__(kThreads, 2) IndexerLogitsKernel(const IndexerLogitsParams p, int split_len) {
  using Cfg = PrefillCfg<kFp8>;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* decoded = smem + Cfg::kStages * Cfg::kStageBytes;                 // FP8: [2][64 keys × 256 B]
  float* red = reinterpret_cast<float*>(decoded + Cfg::kDecodedBytes);       // [warp][64]
  __shared__ int range_lo, range_hi;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int warps_per_token = p.heads / 32;
  const int tokens_per_cta = kWarps / warps_per_token;
  const int64_t t0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * tokens_per_cta;  // long rows first
  const int64_t split_lo = static_cast<int64_t>(blockIdx.y) * split_len;
  const int64_t split_hi = std::min<int64_t>(split_lo + split_len, p.num_keys);

  // Phase 0: this warp's token and key range, the CTA's union of ranges.
  const int64_t row = t0 + warp / warps_per_token;
  const int head0 = (warp % warps_per_token) * 32;
  const bool row_ok = row < p.rows;
  int64_t my_lo = 0, my_hi = 0;
  if (row_ok) {
    my_lo = std::max<int64_t>(p.ks[row], split_lo);
    my_hi = std::min<int64_t>(p.ke[row], split_hi);
    if (my_hi < my_lo) my_hi = my_lo;
  }
  if (threadIdx.x == 0) {
    range_lo = INT32_MAX;
    range_hi = 0;
  }
  __syncthreads();
  if (lane == 0 && my_hi > my_lo) {
    atomicMin(&range_lo, static_cast<int>(my_lo));
    atomicMax(&range_hi, static_cast<int>(my_hi));
  }
  __syncthreads();
  const int64_t tile_lo = range_lo < range_hi ? (range_lo / kTile) * kTile : split_lo;
  const int n_tiles = range_lo < range_hi ? static_cast<int>((range_hi - tile_lo + kTile - 1) / kTile) : 0;
  const int64_t tile_hi = tile_lo + static_cast<int64_t>(n_tiles) * kTile;
  const bool writer = row_ok && (warp % warps_per_token == 0);

  // -inf outside the tiles (inside the tiles the epilogue writes it).
  if (p.fill_masked && writer) {
    float* out = p.logits + row * p.logits_stride;
    for (int64_t s = split_lo + lane; s < split_hi; s += 32) {
      if (s < tile_lo || s >= tile_hi) out[s] = -INFINITY;
    }
  }
  if (n_tiles == 0) return;

  // Phase 1: start the pipeline, load q fragments (standard m16n8k16 A layout) and weights.
  for (int st = 0; st < Cfg::kStages - 1; ++st) {
    if (st < n_tiles) LoadTile<kFp8>(p, tile_lo + st * kTile, smem + st * Cfg::kStageBytes);
    cuda::CpAsyncCommit();
  }
  uint32_t qa[2][8][4];
  float wgt[2][2];
  {
    const int64_t r = row_ok ? row : 0;
    const uint16_t* qrow = reinterpret_cast<const uint16_t*>(p.q) + r * p.q_stride;
    const __nv_bfloat162 k96 =
        __halves2bfloat162(__ushort_as_bfloat16(kBf16Pow2_96), __ushort_as_bfloat16(kBf16Pow2_96));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int head = head0 + mt * 16 + half * 8 + g;
        wgt[mt][half] = row_ok ? p.w[r * p.w_stride + head] : 0.0f;
        const uint16_t* qh = qrow + head * kDim + 2 * t;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            uint32_t v = *reinterpret_cast<const uint32_t*>(qh + 16 * s + 8 * kh);
            if constexpr (kFp8) {
              __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&v);
              x = __hmul2(x, k96);
              v = *reinterpret_cast<uint32_t*>(&x);
            }
            qa[mt][s][half + 2 * kh] = v;
          }
        }
      }
    }
  }
  const float out_scale = kFp8 ? kPow2_24 : 1.0f;
  const int64_t ks = row_ok ? p.ks[row] : 0, ke = row_ok ? p.ke[row] : 0;
  float* out_row = p.logits + (row_ok ? row : 0) * p.logits_stride;

  if constexpr (kFp8) {
    cuda::CpAsyncWait<Cfg::kStages - 2>();
    __syncthreads();
    DecodeTile(smem, decoded);
  }

  // Phase 2: the tile loop.
  for (int i = 0; i < n_tiles; ++i) {
    if constexpr (kFp8) {
      cuda::CpAsyncWait<Cfg::kStages - 3>();
    } else {
      cuda::CpAsyncWait<Cfg::kStages - 2>();
    }
    __syncthreads();
    if (i + Cfg::kStages - 1 < n_tiles) {
      LoadTile<kFp8>(p, tile_lo + static_cast<int64_t>(i + Cfg::kStages - 1) * kTile,
                     smem + ((i + Cfg::kStages - 1) % Cfg::kStages) * Cfg::kStageBytes);
    }
    cuda::CpAsyncCommit();
    const uint8_t* stage = smem + (i % Cfg::kStages) * Cfg::kStageBytes;
    const uint8_t* tile = stage;
    if constexpr (kFp8) {
      if (i + 1 < n_tiles) {
        DecodeTile(smem + ((i + 1) % Cfg::kStages) * Cfg::kStageBytes, decoded + ((i + 1) & 1) * Cfg::kTileBf16Bytes);
      }
      tile = decoded + (i & 1) * Cfg::kTileBf16Bytes;
    }
    const int64_t kbase = tile_lo + static_cast<int64_t>(i) * kTile;

#pragma unroll
    for (int nh = 0; nh < 2; ++nh) {  // two 32-key halves keep the accumulators at 32 registers
      float acc[2][4][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        uint32_t b[4][2];
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          // Matrices: (n-tile 2np, k lo), (2np, k hi), (2np+1, k lo), (2np+1, k hi).
          const int key = nh * 32 + (2 * np + (lane >> 4)) * 8 + (lane & 7);
          uint32_t r[4];
          cuda::LdMatrixX4(r, tile + Bf16ChunkOffset(key, 2 * s + ((lane >> 3) & 1)));
          b[2 * np][0] = r[0];
          b[2 * np][1] = r[1];
          b[2 * np + 1][0] = r[2];
          b[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) cuda::MmaBf16M16N8K16(acc[mt][nt], qa[mt][s], b[nt], acc[mt][nt]);
      }
      // Epilogue: relu · w, then sum over this warp's 32 rows. v[2nt + c] is
      // key nt*8 + 2t + c summed over the lane's 4 rows; the transposing
      // reduction over lane bits 4, 3, 2 leaves lane (g, t) with v[g] summed
      // over all 32 rows, i.e. key (g/2)*8 + 2t + g%2.
      float v[8];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          s0 += fmaxf(acc[mt][nt][0], 0.0f) * wgt[mt][0] + fmaxf(acc[mt][nt][2], 0.0f) * wgt[mt][1];
          s1 += fmaxf(acc[mt][nt][1], 0.0f) * wgt[mt][0] + fmaxf(acc[mt][nt][3], 0.0f) * wgt[mt][1];
        }
        v[2 * nt] = s0;
        v[2 * nt + 1] = s1;
      }
      float r4[4], r2[2];
      const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float keep = b4 ? v[4 + k] : v[k], send = b4 ? v[k] : v[4 + k];
        r4[k] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float keep = b3 ? r4[2 + k] : r4[k], send = b3 ? r4[k] : r4[2 + k];
        r2[k] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
      }
      float sum;
      {
        const float keep = b2 ? r2[1] : r2[0], send = b2 ? r2[0] : r2[1];
        sum = keep + __shfl_xor_sync(0xffffffffu, send, 4);
      }
      const int key = nh * 32 + (g >> 1) * 8 + 2 * t + (g & 1);
      float scale = out_scale;
      if constexpr (kFp8) scale *= reinterpret_cast<const float*>(stage + kTile * kDim)[key];
      sum *= scale;
      if (warps_per_token == 1) {
        const int64_t s_abs = kbase + key;
        if (row_ok && s_abs < split_hi) {
          if (s_abs >= ks && s_abs < ke) {
            out_row[s_abs] = sum;
          } else if (p.fill_masked) {
            out_row[s_abs] = -INFINITY;
          }
        }
      } else {
        red[warp * kTile + key] = sum;
      }
    }
    if (warps_per_token > 1) {
      // 64 heads: the token's second warp hands its half over through smem.
      __syncthreads();
      if (writer) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const int key = lane + 32 * kk;
          const float sum = red[warp * kTile + key] + red[(warp + 1) * kTile + key];
          const int64_t s_abs = kbase + key;
          if (s_abs < split_hi) {
            if (s_abs >= ks && s_abs < ke) {
              out_row[s_abs] = sum;
            } else if (p.fill_masked) {
              out_row[s_abs] = -INFINITY;
            }
          }
        }
      }
    }
  }
}

}  // namespace

bool IndexerLogitsSupported(const IndexerLogitsParams& p) {
  return (p.heads == 32 || p.heads == 64) &&
         (p.format == IndexerFormat::kFp8 || p.format == IndexerFormat::kBF16);
}

absl::Status LaunchIndexerLogits(const IndexerLogitsParams& p, cudaStream_t stream) {
  const char* op = "LaunchIndexerLogits";
  if (p.rows < 0) return InvalidParam(op, "rows", "must be >= 0");
  if (p.heads != 32 && p.heads != 64) return InvalidParam(op, "heads", "must be 32 or 64");
  if (p.format != IndexerFormat::kFp8 && p.format != IndexerFormat::kBF16)
    return InvalidParam(op, "format", "must be kFp8 or kBF16");
  if (p.num_keys < 0 || p.num_keys >= INT32_MAX) return InvalidParam(op, "num_keys", "must be in [0, 2^31 - 1)");
  if (p.rows == 0 || p.num_keys == 0) return absl::OkStatus();
  if (p.q == nullptr || reinterpret_cast<uintptr_t>(p.q) % 4 != 0) return InvalidParam(op, "q", "must be 4-byte aligned");
  if (p.q_stride < int64_t{p.heads} * kDim || p.q_stride % 2 != 0)
    return InvalidParam(op, "q_stride", "must be >= heads * 128 and even");
  if (p.w == nullptr) return InvalidParam(op, "w", "is null");
  if (p.w_stride < p.heads) return InvalidParam(op, "w_stride", "must be >= heads");
  if (p.keys == nullptr || reinterpret_cast<uintptr_t>(p.keys) % 16 != 0)
    return InvalidParam(op, "keys", "must be 16-byte aligned");
  const bool fp8 = p.format == IndexerFormat::kFp8;
  if (fp8 && (p.k_scale == nullptr || reinterpret_cast<uintptr_t>(p.k_scale) % 16 != 0))
    return InvalidParam(op, "k_scale", "must be non-null and 16-byte aligned for kFp8");
  if (p.ks == nullptr) return InvalidParam(op, "ks", "is null");
  if (p.ke == nullptr) return InvalidParam(op, "ke", "is null");
  if (p.logits == nullptr) return InvalidParam(op, "logits", "is null");
  if (p.logits_stride < p.num_keys) return InvalidParam(op, "logits_stride", "must be >= num_keys");

  const int64_t tokens_per_cta = kWarps / (p.heads / 32);
  const int64_t blocks = (p.rows + tokens_per_cta - 1) / tokens_per_cta;
  if (blocks > INT32_MAX) return InvalidParam(op, "rows", "too large");
  // Key splits: about a quarter of the key axis, 512 .. 4096 keys, 64-aligned.
  const int64_t quarter = (p.num_keys / 4 + kTile - 1) / kTile * kTile;
  const int split_len = static_cast<int>(std::min<int64_t>(4096, std::max<int64_t>(512, quarter)));
  const int64_t splits = (p.num_keys + split_len - 1) / split_len;
  if (splits > 65535) return InvalidParam(op, "num_keys", "too large");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  if (fp8) {
    constexpr int smem = PrefillCfg<true>::kSmemBytes;
    static indexer_internal::SmemOptIn opt_in;
    SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(IndexerLogitsKernel<true>, smem));
    IndexerLogitsKernel<true><<<grid, kThreads, smem, stream>>>(p, split_len);
  } else {
    constexpr int smem = PrefillCfg<false>::kSmemBytes;
    static indexer_internal::SmemOptIn opt_in;
    SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(IndexerLogitsKernel<false>, smem));
    IndexerLogitsKernel<false><<<grid, kThreads, smem, stream>>>(p, split_len);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("IndexerLogitsKernel");
  return absl::OkStatus();
}

}  // namespace spar
