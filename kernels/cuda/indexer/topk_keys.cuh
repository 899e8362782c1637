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

// This thread's keys: positions c0 + u * kT + threadIdx.x (u < kKeys) of
// the row, c0 the CTA's first position, as OrderedKey values (0 at or past
// len). Decode rows (no row_start) are loaded up to num_cols, a parameter,
// so the loads need not wait for the row length; a row with its own start
// (prefill) may end before num_cols and is read to its length. One address
// register with immediate offsets and 32-bit bounds: the 64-bit form cost
// ~10 instructions a key (ncu).
template <int kT, int kKeys>
__device__ __forceinline__ void LoadRowKeys(const TopKParams& p, int64_t row, int c0, int len,
                                            uint32_t (&key)[kKeys]) {
  const int tid = threadIdx.x;
  const float* x = RowPtr(p, row) + c0 + tid;
  asm("" : "+l"(x));  // kept in a register, not rebuilt per load
  const int load_end = p.row_start == nullptr ? static_cast<int>(min(p.num_cols, int64_t{kTopKMaxLen})) : len;
  float raw[kKeys];
#pragma unroll
  for (int u = 0; u < kKeys; ++u) raw[u] = c0 + u * kT + tid < load_end ? __ldg(x + u * kT) : 0.0f;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) key[u] = c0 + u * kT + tid < len ? OrderedKey(raw[u]) : 0u;
}

// `red.shared.add` of value at a shared-memory address when pred holds, as a
// predicated instruction (the compiler wraps it in a branch all the same).
__device__ __forceinline__ void RedSharedAddIf(bool pred, uint32_t smem_addr, uint32_t value) {
  asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %2, 0;\n @p red.shared.add.u32 [%0], %1;\n}\n" ::"r"(smem_addr),
               "r"(value), "r"(static_cast<uint32_t>(pred)));
}

// Adds this thread's keys whose digits above `shift` equal `prefix` into
// bins[digit], digit = bits [shift + 7 : shift] (shift a multiple of 8; at
// the top level prefix is 0 and every valid key counts). Runs of one digit
// are added at once: real logits put most of a row's keys into a few bins
// and same-address smem atomics serialize. Key 0 (NaN, -inf) is never
// counted. No data-dependent control flow in the source, the adds being
// predicated reductions: ~20 instructions a key where the branchy form of
// the same loop cost ~30 (ncu).
template <int kKeys>
__device__ __forceinline__ void CountDigitRuns(const uint32_t (&key)[kKeys], int shift, uint32_t prefix,
                                               uint32_t* bins) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(bins));
  const uint32_t digit_selector = 0x4440u | static_cast<uint32_t>(shift >> 3);  // that byte, zeros above
  const uint32_t above_shift = static_cast<uint32_t>(shift + 8);
  uint32_t bin = 0, run = 0;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) {
    // The clamped shift reads 0 above the top digit (a shift by 32).
    const bool in = (key[u] != 0) & (__funnelshift_rc(key[u], 0u, above_shift) == prefix);
    const uint32_t d = __byte_perm(key[u], 0u, digit_selector);
    const bool starts = in & (d != bin);
    RedSharedAddIf(starts & (run != 0), base + bin * 4, run);
    run = starts ? 1u : run + static_cast<uint32_t>(in);
    bin = starts ? d : bin;
  }
  RedSharedAddIf(run != 0, base + bin * 4, run);
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
  // scratch and result are reused by the next call; and without this
  // barrier racecheck flagged the read of result against the short-row
  // kernel's first write after the levels (its block-table slice).
  __syncthreads();
  return s;
}

// One flag per key for the whole warp: bit `lane` of b[u] is that lane's
// flag for its key u. One ballot per key, taken where the flag is computed
// and reused by the counting and the ranking below (extracting bits of a
// per-thread mask before each ballot cost ~4 instructions a key).
template <int kKeys>
struct WarpFlags {
  uint32_t b[kKeys];
  __device__ __forceinline__ bool Mine(int u) const { return (b[u] & LaneMaskEq()) != 0; }
};

// pred(u) for every key u (warp-uniform call).
template <int kKeys, class Pred>
__device__ __forceinline__ WarpFlags<kKeys> BallotEach(Pred pred) {
  WarpFlags<kKeys> f;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) f.b[u] = __ballot_sync(0xffffffffu, pred(u));
  return f;
}

// Ranks in position order of the flagged keys: per (u, warp) counts, one
// block exclusive scan in position order. After it counts[u * kWarps +
// warp] holds the flagged keys before that warp's u-th position group and
// *total all of them; a key's rank is then RankInOrder. Ends with a barrier
// (counts is read afterwards).
template <int kT, int kKeys>
__device__ __forceinline__ void PositionRanks(const WarpFlags<kKeys>& flags, uint32_t* counts, uint32_t* scratch,
                                              uint32_t* total) {
  constexpr int kWarps = kT / 32;
  static_assert(kKeys * kWarps <= kT, "one scan element per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (lane == 0) {
#pragma unroll
    for (int u = 0; u < kKeys; ++u) counts[u * kWarps + warp] = __popc(flags.b[u]);
  }
  __syncthreads();
  const uint32_t v = tid < kKeys * kWarps ? counts[tid] : 0u;
  const uint32_t excl = BlockExclusiveScan<kT>(v, scratch, total);
  if (tid < kKeys * kWarps) counts[tid] = excl;
  __syncthreads();
}

// The rank of this thread's key u among the flagged keys (PositionRanks'
// counts).
template <int kT, int kKeys>
__device__ __forceinline__ uint32_t RankInOrder(const WarpFlags<kKeys>& flags, int u, const uint32_t* counts) {
  return counts[u * (kT / 32) + (threadIdx.x >> 5)] + __popc(flags.b[u] & LaneMaskLt());
}

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_KEYS_CUH_
