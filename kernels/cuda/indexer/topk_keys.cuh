// Top-k pieces for keys held in registers (the short-row path, topk_short.cu,
// and the row-group path, topk_group.cu): a thread holds kKeys keys at
// positions u * kT + threadIdx.x (u < kKeys) of its row or chunk, so the
// CTA's positions in ascending order are (u, warp, lane) in that order.
// Internal to kernels/cuda/indexer.
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_KEYS_CUH_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_KEYS_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/indexer/topk_device.cuh"

namespace spar::topk {

// Adds this thread's keys whose digits above `shift` equal `prefix` (every
// valid key when `all`) into bins[digit], digit = bits [shift + 7 : shift].
// Runs of one digit are added at once: real logits put most of a row's keys
// into a few bins and same-address smem atomics serialize. Key 0 (NaN, -inf)
// is never counted.
template <int kKeys>
__device__ __forceinline__ void CountDigitRuns(const uint32_t (&key)[kKeys], int shift, bool all, uint32_t prefix,
                                               uint32_t* bins) {
  uint32_t bin = 0, run = 0;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) {
    // `all` guards the shift by 32 of the top digit.
    const bool in = key[u] != 0 && (all || (key[u] >> (shift + 8)) == prefix);
    const uint32_t d = (key[u] >> shift) & 0xffu;
    if (in && d != bin) {
      if (run != 0) atomicAdd(&bins[bin], run);
      bin = d;
      run = 0;
    }
    run += in;
  }
  if (run != 0) atomicAdd(&bins[bin], run);
}

// One radix level's choice among 256 digit buckets, for the whole CTA.
struct DigitSelect {
  uint32_t bucket;          // the digit holding the rem-th largest key
  uint32_t above, count;    // keys in higher digits / in it
  uint32_t total;           // keys in all digits (alone meaningful when < rem)
  uint32_t earlier_above;   // the row-group path: the earlier chunks' keys in higher digits,
  uint32_t earlier_bucket;  // ... in the chosen digit,
  uint32_t earlier_total;   // ... in all digits
};

// Threads 0..255 pass the count of digit 255 - tid (descending, so a scan
// in thread order sums the higher digits) and, with kEarlier, the earlier
// chunks' share of it; the other threads' arguments are ignored. One block
// scan of both; every thread gets the result. scratch: 2 x 8 words.
template <bool kEarlier>
__device__ __forceinline__ DigitSelect SelectDigit(uint32_t cnt, uint32_t before, uint32_t rem,
                                                   uint32_t (*scratch)[8], DigitSelect* result) {
  constexpr int kBins = 256;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t incl = cnt, before_incl = before;
  if (tid < kBins) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
      if constexpr (kEarlier) {
        const uint32_t m = __shfl_up_sync(0xffffffffu, before_incl, o);
        if (lane >= o) before_incl += m;
      }
    }
    if (lane == 31) {
      scratch[0][warp] = incl;
      if constexpr (kEarlier) scratch[1][warp] = before_incl;
    }
  }
  __syncthreads();
  if (tid < kBins) {
    uint32_t prior = 0, total = 0, before_prior = 0, before_total = 0;
#pragma unroll
    for (int w = 0; w < kBins / 32; ++w) {
      const uint32_t s = scratch[0][w];
      prior += w < warp ? s : 0u;
      total += s;
      if constexpr (kEarlier) {
        const uint32_t b = scratch[1][w];
        before_prior += w < warp ? b : 0u;
        before_total += b;
      }
    }
    const uint32_t above = prior + incl - cnt;
    if (tid == 0) {
      result->total = total;
      result->earlier_total = before_total;
    }
    if (above < rem && above + cnt >= rem) {
      result->bucket = static_cast<uint32_t>(kBins - 1 - tid);
      result->above = above;
      result->count = cnt;
      result->earlier_above = before_prior + before_incl - before;
      result->earlier_bucket = before;
    }
  }
  __syncthreads();
  const DigitSelect s = *result;
  __syncthreads();  // scratch and result are reused by the next call
  return s;
}

// Ranks in position order of the keys whose bit u of `flags` is set: per
// (u, warp) ballot counts, one block exclusive scan in position order. After
// it counts[u * kWarps + warp] holds the flagged keys before that warp's
// u-th position group and *total all of them; a key's rank is then
// RankInOrder. Ends with a barrier (counts is read afterwards).
template <int kT, int kKeys>
__device__ __forceinline__ void PositionRanks(uint32_t flags, uint32_t* counts, uint32_t* scratch, uint32_t* total) {
  constexpr int kWarps = kT / 32;
  static_assert(kKeys * kWarps <= kT, "one scan element per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) {
    const uint32_t b = __ballot_sync(0xffffffffu, (flags >> u) & 1u);
    if (lane == 0) counts[u * kWarps + warp] = __popc(b);
  }
  __syncthreads();
  const uint32_t v = tid < kKeys * kWarps ? counts[tid] : 0u;
  const uint32_t excl = BlockExclusiveScan<kT>(v, scratch, total);
  if (tid < kKeys * kWarps) counts[tid] = excl;
  __syncthreads();
}

// The rank of this thread's key u among the flagged keys (PositionRanks'
// counts; warp-uniform call: every lane of the warp passes the same u).
template <int kT>
__device__ __forceinline__ uint32_t RankInOrder(uint32_t flags, int u, const uint32_t* counts) {
  const uint32_t b = __ballot_sync(0xffffffffu, (flags >> u) & 1u);
  return counts[u * (kT / 32) + (threadIdx.x >> 5)] + __popc(b & LaneMaskLt());
}

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_KEYS_CUH_
