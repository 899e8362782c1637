// Paged decode logits: I[r, s] = Σ_h w[r,h] · relu(q[r,h,:] · k[s,:]) · k_scale[s].
//
// Work split: one CTA per (chunk of pages, sequence). The CTA holds all
// next_n × heads query rows of its sequence, so every key byte is read from
// memory once per sequence (MTP rows share it). Rows are cut into row groups
// of 32 (one warp's A operand, kept in registers for the whole CTA); the 8
// warps are (row group, key slice) pairs.
//
// Per 64-key page (one pipeline stage, cp.async ring of kStages pages):
//   warp: for each of its 8-key n-tiles: 32 rows × 8 keys × 128 dims = 16 mma.sync
//         (B fragments decoded from e4m3 in registers), relu · w, sum over its 32 rows
//         (in-quad shuffles), · k_scale -> smem partials red[row group][key]
//   CTA (after the next barrier): sum the row groups of each query token, store.
//
// K-dimension permutation: the dot product is a sum over the 128 dims, so any
// permutation applied to both q and k leaves it unchanged. Lane (g, t) of an
// mma takes logical k = {2t, 2t+1, 2t+8, 2t+9} of each k-step; we map k-step s
// to physical dims 32t + 4s + {0, 1, 2, 3}. Each lane then reads one key's
// 32 contiguous bytes (two 16-byte loads) for all 8 k-steps, and its q
// fragments are 64 contiguous bytes per row.
//
// FP8 scaling: E4m3x4ToScaledBf16x4 yields value · 2^-120; q is pre-scaled by
// 2^96 (exact in bf16), so the accumulators hold dot · 2^-24, and 2^24 is
// folded into k_scale. This keeps every product a normal fp32 number.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_info.h"
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
constexpr int kRowsPerWarp = 32;
constexpr int kMaxRowGroups = kWarps;
constexpr uint16_t kBf16Pow2_96 = 0x6f80;  // 2^96
constexpr float kPow2_24 = 16777216.0f;

constexpr int kPagesPerStage = 2;  // 128 keys between barriers
constexpr int kStageKeys = kPagesPerStage * kCacheBlockTokens;
constexpr int kMaxPagesPerCta = 512;  // block-table slice kept in smem

template <bool kFp8>
struct PagedCfg {
  static constexpr int kPageBytes = kFp8 ? cuda::indexer::kFp8PageBytes : cuda::indexer::kBf16PageBytes;
  static constexpr int kStageBytes = kPagesPerStage * kPageBytes;
  static constexpr int kStages = kFp8 ? 4 : 3;
  static constexpr int kRedBytes = 2 * kMaxRowGroups * kStageKeys * 4;
  static constexpr int kTableBytes = kMaxPagesPerCta * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + kRedBytes + kTableBytes;
};

// Byte offset of 16-byte chunk c of key `key` inside a staged page (XOR
// swizzles make the fragment loads below bank-conflict free).
template <bool kFp8>
__device__ __forceinline__ int ChunkOffset(int key, int c) {
  if constexpr (kFp8) {
    return key * 128 + ((c ^ (key & 7)) << 4);  // 8 chunks per key
  } else {
    return key * 256 + ((c ^ ((c >> 3) & 1) ^ ((key & 1) << 1)) << 4);  // 16 chunks per key
  }
}

template <bool kFp8>
__device__ __forceinline__ void LoadPage(const uint8_t* src, uint8_t* dst) {
  using Cfg = PagedCfg<kFp8>;
  constexpr int kChunks = Cfg::kPageBytes / 16;
  constexpr int kValueChunks = kCacheBlockTokens * kDim * (kFp8 ? 1 : 2) / 16;
  constexpr int kChunksPerKey = kFp8 ? 8 : 16;
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    int off;
    if (c < kValueChunks) {
      off = ChunkOffset<kFp8>(c / kChunksPerKey, c % kChunksPerKey);
    } else {
      off = c * 16;  // the fp32 scales, unswizzled
    }
    cuda::CpAsync16(dst + off, src + c * 16);
  }
}

template <bool kFp8>
static __global__ void __launch_bounds__(kThreads, 2)
    IndexerLogitsPagedKernel(const IndexerLogitsPagedParams p, int pages_per_cta) {
  using Cfg = PagedCfg<kFp8>;
  extern __shared__ __align__(16) uint8_t smem[];
  float* red = reinterpret_cast<float*>(smem + Cfg::kStages * Cfg::kStageBytes);  // [2][kMaxRowGroups][128]
  int32_t* table_s = reinterpret_cast<int32_t*>(smem + Cfg::kStages * Cfg::kStageBytes + Cfg::kRedBytes);

  const int seq = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row_groups = p.next_n * p.heads / kRowsPerWarp;
  const int groups_per_token = p.heads / kRowsPerWarp;
  const int slices = kWarps / row_groups;
  const int rg = warp % row_groups, slice = warp / row_groups;
  const bool computes = slice < slices;
  const int64_t row0 = static_cast<int64_t>(seq) * p.next_n;

  // Phase 0: this CTA's page range; its block-table slice goes to smem so no
  // dependent global load sits in the page loop.
  int ctx_max = 0;
  for (int j = 0; j < p.next_n; ++j) ctx_max = max(ctx_max, p.context_lens[row0 + j]);
  const int n_pages = (ctx_max + kCacheBlockTokens - 1) / kCacheBlockTokens;
  const int p_begin = blockIdx.x * pages_per_cta;
  const int p_end = min(n_pages, p_begin + pages_per_cta);
  if (p_begin >= p_end) return;
  const int my_pages = p_end - p_begin;
  for (int i = threadIdx.x; i < my_pages; i += kThreads) table_s[i] = p.block_table[seq * p.block_table_stride + p_begin + i];
  __syncthreads();
  const int n_stages = (my_pages + kPagesPerStage - 1) / kPagesPerStage;
  auto load_stage = [&](int st, int slot) {
#pragma unroll
    for (int j = 0; j < kPagesPerStage; ++j) {
      const int pg = st * kPagesPerStage + j;
      if (pg < my_pages) {
        LoadPage<kFp8>(p.cache + static_cast<int64_t>(table_s[pg]) * Cfg::kPageBytes,
                       smem + slot * Cfg::kStageBytes + j * Cfg::kPageBytes);
      }
    }
  };

  // Phase 1: start the pipeline, then load q fragments and head weights.
  for (int st = 0; st < Cfg::kStages - 1; ++st) {
    if (st < n_stages) load_stage(st, st);
    cuda::CpAsyncCommit();
  }

  // The query prep, when this launch does it: every (token, head) vector
  // roped (and rotated) by a warp into the last pipeline slot, which the key
  // loop first fills after its first barrier.
  const bool prep = p.prep_positions != nullptr;
  const uint16_t* qtile = reinterpret_cast<const uint16_t*>(p.q) + row0 * p.q_stride;
  int64_t qtoken_stride = p.q_stride;
  if (prep) {
    __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + (Cfg::kStages - 1) * Cfg::kStageBytes);
    for (int r = warp; r < p.next_n * p.heads; r += kWarps) {
      const int j = r / p.heads, h = r - j * p.heads;
      cuda::indexer::PrepQueryWarp(p.q + (row0 + j) * p.q_stride + h * kDim, staged + r * kDim, lane, p.prep_rope,
                                   p.prep_positions[row0 + j], p.prep_hadamard);
    }
    __syncthreads();
    qtile = reinterpret_cast<const uint16_t*>(staged);
    qtoken_stride = static_cast<int64_t>(p.heads) * kDim;
  }

  const int token = rg / groups_per_token;  // query token of this warp's rows
  uint32_t qa[2][8][4];
  float wgt[2][2];
  {
    const int head0 = (rg % groups_per_token) * kRowsPerWarp;
    const uint16_t* qrow = qtile + token * qtoken_stride + 32 * t;
    const int64_t wrow = (row0 + token) * p.w_stride;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int head = head0 + mt * 16 + half * 8 + g;
        if (!computes) {
          wgt[mt][half] = 0.0f;
        } else if (prep) {
          wgt[mt][half] = cuda::indexer::ScaledHeadWeight(__bfloat162float(p.w_bf16[wrow + head]), p.weight_scale);
        } else {
          wgt[mt][half] = p.w[wrow + head];
        }
        uint32_t words[16];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (computes) v = *reinterpret_cast<const uint4*>(qrow + head * kDim + 8 * c);
          words[4 * c + 0] = v.x;
          words[4 * c + 1] = v.y;
          words[4 * c + 2] = v.z;
          words[4 * c + 3] = v.w;
        }
        if constexpr (kFp8) {
          const __nv_bfloat162 k96 = __halves2bfloat162(__ushort_as_bfloat16(kBf16Pow2_96), __ushort_as_bfloat16(kBf16Pow2_96));
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&words[i]);
            x = __hmul2(x, k96);
            words[i] = *reinterpret_cast<uint32_t*>(&x);
          }
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          qa[mt][s][half] = words[2 * s];          // logical k 2t, 2t+1
          qa[mt][s][half + 2] = words[2 * s + 1];  // logical k 2t+8, 2t+9
        }
      }
    }
  }
  const float out_scale = kFp8 ? kPow2_24 : 1.0f;

  // Stores the row-group sums of stage `st` (partials in red[buf]).
  auto flush = [&](int st, int buf) {
    for (int idx = threadIdx.x; idx < p.next_n * kStageKeys; idx += kThreads) {
      const int j = idx / kStageKeys, key = idx % kStageKeys;
      const int s = (p_begin + st * kPagesPerStage) * kCacheBlockTokens + key;
      // Keys past this CTA's pages (odd page count) belong to the next CTA.
      if (s >= p.context_lens[row0 + j] || s >= p_end * kCacheBlockTokens) continue;
      const float* part = red + (buf * kMaxRowGroups + j * groups_per_token) * kStageKeys + key;
      float sum = part[0];
      for (int q = 1; q < groups_per_token; ++q) sum += part[q * kStageKeys];
      p.logits[(row0 + j) * p.logits_stride + s] = sum;
    }
  };

  // Phase 2: the stage loop (two pages = 16 n-tiles of 8 keys per stage).
  const int pairs_per_warp = kPagesPerStage * 8 / (2 * slices);  // 16 n-tiles per stage, in pairs
  for (int i = 0; i < n_stages; ++i) {
    cuda::CpAsyncWait<Cfg::kStages - 2>();
    __syncthreads();
    if (i > 0) flush(i - 1, (i - 1) & 1);
    if (i + Cfg::kStages - 1 < n_stages) load_stage(i + Cfg::kStages - 1, (i + Cfg::kStages - 1) % Cfg::kStages);
    cuda::CpAsyncCommit();
    if (!computes) continue;
    const uint8_t* stage = smem + (i % Cfg::kStages) * Cfg::kStageBytes;
    float* red_out = red + ((i & 1) * kMaxRowGroups + rg) * kStageKeys;
    for (int pr = 0; pr < pairs_per_warp; ++pr) {
      // Two independent n-tiles per step: their mma chains interleave.
      int nt[2];
      nt[0] = slice + slices * 2 * pr;
      nt[1] = nt[0] + slices;
      const uint8_t* page[2];
      int key[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        page[u] = stage + (nt[u] >> 3) * Cfg::kPageBytes;
        key[u] = (nt[u] & 7) * 8 + g;
      }
      float acc[2][2][4];
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) acc[u][mt][0] = acc[u][mt][1] = acc[u][mt][2] = acc[u][mt][3] = 0.0f;
      if constexpr (kFp8) {
        uint32_t raw[2][8];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint4 lo = *reinterpret_cast<const uint4*>(page[u] + ChunkOffset<true>(key[u], 2 * t));
          const uint4 hi = *reinterpret_cast<const uint4*>(page[u] + ChunkOffset<true>(key[u], 2 * t + 1));
          raw[u][0] = lo.x, raw[u][1] = lo.y, raw[u][2] = lo.z, raw[u][3] = lo.w;
          raw[u][4] = hi.x, raw[u][5] = hi.y, raw[u][6] = hi.z, raw[u][7] = hi.w;
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            uint32_t b[2];
            cuda::E4m3x4ToScaledBf16x4(raw[u][s], b[0], b[1]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) cuda::MmaBf16M16N8K16(acc[u][mt], qa[mt][s], b, acc[u][mt]);
          }
        }
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const uint4 v = *reinterpret_cast<const uint4*>(page[u] + ChunkOffset<false>(key[u], 4 * t + c));
            const uint32_t b0[2] = {v.x, v.y}, b1[2] = {v.z, v.w};
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              cuda::MmaBf16M16N8K16(acc[u][mt], qa[mt][2 * c], b0, acc[u][mt]);
              cuda::MmaBf16M16N8K16(acc[u][mt], qa[mt][2 * c + 1], b1, acc[u][mt]);
            }
          }
        }
      }
      // Epilogue: relu · w over the lane's 4 rows; v = {tile0 key 2t, 2t+1,
      // tile1 key 2t, 2t+1}. A transposing reduction over lane bits 4, 3
      // (then a plain one over bit 2) leaves lane (b4, b3) with tile b4,
      // key 2t + b3 summed over all 32 rows: 4 shuffles for 16 outputs.
      float v[4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          s0 += fmaxf(acc[u][mt][0], 0.0f) * wgt[mt][0] + fmaxf(acc[u][mt][2], 0.0f) * wgt[mt][1];
          s1 += fmaxf(acc[u][mt][1], 0.0f) * wgt[mt][0] + fmaxf(acc[u][mt][3], 0.0f) * wgt[mt][1];
        }
        v[2 * u] = s0;
        v[2 * u + 1] = s1;
      }
      const bool b4 = lane & 16, b3 = lane & 8;
      float r[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float keep = b4 ? v[2 + e] : v[e], send = b4 ? v[e] : v[2 + e];
        r[e] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
      }
      float sum;
      {
        const float keep = b3 ? r[1] : r[0], send = b3 ? r[0] : r[1];
        sum = keep + __shfl_xor_sync(0xffffffffu, send, 8);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      if ((lane & 4) == 0) {
        const int u = b4 ? 1 : 0;
        const int col = (nt[u] & 7) * 8 + 2 * t + (b3 ? 1 : 0);  // key inside its page
        float scale = out_scale;
        if constexpr (kFp8) scale *= reinterpret_cast<const float*>(page[u] + kCacheBlockTokens * kDim)[col];
        red_out[(nt[u] >> 3) * kCacheBlockTokens + col] = sum * scale;
      }
    }
  }
  __syncthreads();
  flush(n_stages - 1, (n_stages - 1) & 1);
}

// -inf for [context_lens[r], logits_stride): one CTA per row.
static __global__ void __launch_bounds__(256) FillTailKernel(const int32_t* context_lens, float* logits,
                                                             int64_t stride) {
  const int64_t r = blockIdx.x;
  for (int64_t s = context_lens[r] + threadIdx.x; s < stride; s += blockDim.x) logits[r * stride + s] = -INFINITY;
}

}  // namespace

int IndexerLogitsPagedPrepMaxRows(IndexerFormat format) {
  if (format == IndexerFormat::kFp8) return PagedCfg<true>::kStageBytes / (kDim * 2);
  if (format == IndexerFormat::kBF16) return PagedCfg<false>::kStageBytes / (kDim * 2);
  return 0;
}

bool IndexerLogitsPagedSupported(const IndexerLogitsPagedParams& p) {
  if (p.heads != 32 && p.heads != 64) return false;
  if (p.next_n < 1 || p.next_n * p.heads > kMaxRowGroups * kRowsPerWarp) return false;
  return p.format == IndexerFormat::kFp8 || p.format == IndexerFormat::kBF16;
}

absl::Status LaunchIndexerLogitsPaged(const IndexerLogitsPagedParams& p, cudaStream_t stream) {
  const char* op = "LaunchIndexerLogitsPaged";
  if (p.num_seqs < 0) return InvalidParam(op, "num_seqs", "must be >= 0");
  if (p.heads != 32 && p.heads != 64) return InvalidParam(op, "heads", "must be 32 or 64");
  if (p.next_n < 1 || p.next_n * p.heads > kMaxRowGroups * kRowsPerWarp)
    return InvalidParam(op, "next_n", "must be >= 1 with next_n * heads <= 256");
  if (p.format != IndexerFormat::kFp8 && p.format != IndexerFormat::kBF16)
    return InvalidParam(op, "format", "must be kFp8 or kBF16");
  if (p.num_seqs == 0) return absl::OkStatus();
  if (p.num_seqs > 65535) return InvalidParam(op, "num_seqs", "must be <= 65535");
  if (p.max_context_len < 0) return InvalidParam(op, "max_context_len", "must be >= 0");
  if (p.q == nullptr || reinterpret_cast<uintptr_t>(p.q) % 16 != 0) return InvalidParam(op, "q", "must be 16-byte aligned");
  if (p.q_stride < int64_t{p.heads} * kDim || p.q_stride % 8 != 0)
    return InvalidParam(op, "q_stride", "must be >= heads * 128 and a multiple of 8");
  if (p.prep_positions != nullptr) {
    if (p.next_n * p.heads > IndexerLogitsPagedPrepMaxRows(p.format))
      return InvalidParam(op, "prep_positions", "the query prep in this launch needs next_n * heads <= IndexerLogitsPagedPrepMaxRows");
    if (p.w_bf16 == nullptr) return InvalidParam(op, "w_bf16", "is null (the query prep reads raw bf16 weights)");
    if (p.prep_rope.cos == nullptr || p.prep_rope.sin == nullptr) return InvalidParam(op, "prep_rope", "cos/sin are null");
    if (p.q_stride % 4 != 0) return InvalidParam(op, "q_stride", "must be a multiple of 4 for the query prep");
  } else if (p.w == nullptr) {
    return InvalidParam(op, "w", "is null");
  }
  if (p.w_stride < p.heads) return InvalidParam(op, "w_stride", "must be >= heads");
  if (p.context_lens == nullptr) return InvalidParam(op, "context_lens", "is null");
  if (p.block_table == nullptr) return InvalidParam(op, "block_table", "is null");
  if (p.block_table_stride < (p.max_context_len + kCacheBlockTokens - 1) / kCacheBlockTokens)
    return InvalidParam(op, "block_table_stride", "is smaller than ceil(max_context_len / 64)");
  if (p.cache == nullptr || reinterpret_cast<uintptr_t>(p.cache) % 16 != 0)
    return InvalidParam(op, "cache", "must be 16-byte aligned");
  if (p.logits == nullptr || reinterpret_cast<uintptr_t>(p.logits) % 8 != 0) return InvalidParam(op, "logits", "is null");
  if (p.logits_stride < p.max_context_len) return InvalidParam(op, "logits_stride", "must be >= max_context_len");
  if (p.pages_per_cta < 0 || p.pages_per_cta > kMaxPagesPerCta)
    return InvalidParam(op, "pages_per_cta", "must be in [0, 512]");

  const int rows = p.num_seqs * p.next_n;
  if (p.fill_tail) {
    FillTailKernel<<<rows, 256, 0, stream>>>(p.context_lens, p.logits, p.logits_stride);
    SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("FillTailKernel");
  }
  if (p.max_context_len == 0) return absl::OkStatus();

  // Grid: about two waves of 2 CTAs per SM, each sequence cut into equal chunks.
  const int pages_per_seq = (p.max_context_len + kCacheBlockTokens - 1) / kCacheBlockTokens;
  const int target_ctas = CurrentDeviceInfo().sm_count * 2 * 2;
  const int chunks = std::max((pages_per_seq + kMaxPagesPerCta - 1) / kMaxPagesPerCta,
                              std::max(1, std::min(pages_per_seq, target_ctas / p.num_seqs)));
  int pages_per_cta = (pages_per_seq + chunks - 1) / chunks;
  if (p.pages_per_cta > 0) pages_per_cta = p.pages_per_cta;
  const dim3 grid((pages_per_seq + pages_per_cta - 1) / pages_per_cta, p.num_seqs);
  if (p.format == IndexerFormat::kFp8) {
    constexpr int smem = PagedCfg<true>::kSmemBytes;
    static indexer_internal::SmemOptIn opt_in;
    SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(IndexerLogitsPagedKernel<true>, smem));
    IndexerLogitsPagedKernel<true><<<grid, kThreads, smem, stream>>>(p, pages_per_cta);
  } else {
    constexpr int smem = PagedCfg<false>::kSmemBytes;
    static indexer_internal::SmemOptIn opt_in;
    SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(IndexerLogitsPagedKernel<false>, smem));
    IndexerLogitsPagedKernel<false><<<grid, kThreads, smem, stream>>>(p, pages_per_cta);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("IndexerLogitsPagedKernel");
  return absl::OkStatus();
}

}  // namespace spar
