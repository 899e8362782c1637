// What both sparse MLA kernels share (internal to kernels/cuda/attention):
// the launch arguments, resolving a CTA's range of the index list to cache
// slots, and the small device helpers.
#ifndef SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_ARGS_CUH_
#define SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_ARGS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/attention/sparse_mla_config.h"
#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"

namespace spar::mla {

struct MlaArgs {
  const __nv_bfloat16* q;
  int64_t q_ts, q_hs;
  const uint8_t* cache;
  int64_t num_slots;
  const int32_t* indices;
  int64_t idx_stride;
  int list_len;
  const int32_t* block_table;
  int64_t bt_stride;
  const int32_t* token_seq;
  const int32_t* kv_lens;
  float scale_log2;
  __nv_bfloat16* out;
  int64_t o_ts, o_hs;
  float* lse;
  float* ws_o;    // [splits, tokens, heads, 512], null when not split
  float* ws_lse;  // [splits, tokens, heads]
  int tokens, heads, head_tiles, num_splits, keys_per_split;
};

// The FP8 kernel for 8- and 16-head tiles (sparse_mla_narrow.cu).
absl::Status LaunchNarrowFp8(const MlaArgs& args, int head_tile, int64_t grid, cudaStream_t stream);

// Merges the split partials (ws_o, ws_lse) of `splits` splits into out and
// lse (sparse_mla_merge.cu).
absl::Status LaunchSplitMerge(const MlaArgs& args, int splits, cudaStream_t stream);

// The part of e4m3's 2^120 the FP8 paths' copies of P carry (p * scale *
// 2^104 stays far inside bf16's range for any scale below 2^23), and the
// part the output takes back.
constexpr float kPow2_104 = 2.028240960365167e31f;
constexpr float kPow2_16 = 65536.0f;

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <class T>
__device__ __forceinline__ T LoadShared(const uint8_t* p) {
  return *reinterpret_cast<const T*>(p);
}

// What one CTA computes: blockIdx.x = (token, head tile, split), splits
// fastest; the list range [k_begin, k_end) in nblocks blocks of block_keys.
struct CtaWork {
  int t, head0, split, k_begin, k_end, nblocks;
};

__device__ __forceinline__ CtaWork LocateCta(const MlaArgs& a, int head_tile, int block_keys) {
  CtaWork w;
  int cta = blockIdx.x;
  w.split = cta % a.num_splits;
  cta /= a.num_splits;
  w.head0 = (cta % a.head_tiles) * head_tile;
  w.t = cta / a.head_tiles;
  w.k_begin = w.split * a.keys_per_split;
  w.k_end = min(a.list_len, w.k_begin + a.keys_per_split);
  w.nblocks = (max(0, w.k_end - w.k_begin) + block_keys - 1) / block_keys;
  return w;
}

// cp.async of the query rows [head0, head0 + rows) of token t into smem rows
// of row_bytes (576 bf16 each); rows past `heads` are zero-filled. Every
// thread of the kThreads takes part; the caller commits the group.
__device__ __forceinline__ void StageQueryTile(const MlaArgs& a, int t, int head0, int rows, int row_bytes,
                                               uint8_t* qstage) {
  constexpr int kChunks = 576 * 2 / 16;
  const __nv_bfloat16* qt = a.q + t * a.q_ts;
  for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c - r * kChunks;
    const bool ok = head0 + r < a.heads;
    const __nv_bfloat16* src = ok ? qt + (head0 + r) * a.q_hs + cc * 8 : a.q;
    cuda::CpAsync16(qstage + r * row_bytes + cc * 16, src, ok ? 16 : 0);
  }
}

// Entries [k_begin, k_begin + n) of token t's list as cache slots in
// sidx[0, n), -1 = skip (invalid, out of range, past k_end or past the
// token's kv_len in the dense mode). Every thread of the kThreads takes part.
// A thread's entries are all loaded before any is resolved: one memory
// round trip (two in the dense mode), where a loop of load-then-store
// waited for each entry in turn before the CTA's first gather (four trips
// in a row for a split of 1024 keys, eight for 2048).
__device__ __forceinline__ void ResolveSlots(const MlaArgs& a, int t, int k_begin, int k_end, int n, int32_t* sidx) {
  constexpr int kPerThread = kMaxKeysPerCta / kThreads;  // n <= kMaxKeysPerCta: sidx's size
  int64_t entry[kPerThread];
  if (a.indices != nullptr) {
    const int32_t* list = a.indices + t * a.idx_stride;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int j = threadIdx.x + i * kThreads, k = k_begin + j;
      entry[i] = j < n && k < k_end ? list[k] : -1;
    }
  } else {
    const int kv_len = a.kv_lens[t];
    const int32_t* blocks = a.block_table + a.token_seq[t] * a.bt_stride;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int j = threadIdx.x + i * kThreads, k = k_begin + j;
      const int64_t blk = j < n && k < k_end && k < kv_len ? blocks[k / 64] : -1;
      entry[i] = blk < 0 ? -1 : blk * 64 + (k & 63);
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = threadIdx.x + i * kThreads;
    if (j < n) sidx[j] = entry[i] < 0 || entry[i] >= a.num_slots ? -1 : static_cast<int32_t>(entry[i]);
  }
}

}  // namespace spar::mla

#endif  // SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_ARGS_CUH_
