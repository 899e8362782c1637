// The short-row top-k path (rows of at most kTopKShortMaxLen positions:
// decode at contexts up to 16K, prefill chunks): one 1024-thread CTA per
// row with everything sized by the row instead of by the longest row the
// other paths handle (their 2048-bin x 8-copy histograms and 256K-position
// bitmaps cost ~40 us of zeroing and scanning whatever the row's length).
//
//   keys:    kKeys per thread in registers, position u * 1024 + tid (loads
//            coalesced across the warp), mapped by OrderedKey (NaN, -inf -> 0);
//            decode rows' loads do not wait for the row length (they stop
//            at num_cols; positions past the length are masked afterwards);
//   select:  radix select over four 8-bit digits, top first, on 256-bin
//            histograms (8 copies by lane & 7, double-buffered so the next
//            level's is zeroed while this one counts); threads 0..255 find
//            the bucket holding the rem-th key with one block scan. A row
//            with at most k valid keys selects all of them, no levels. Once
//            the chosen bucket holds at most 32 keys, one warp ranks them
//            and the remaining levels are skipped;
//   output:  positions key > T, plus the need_eq lowest positions with
//            key == T, in ascending order: per (u, warp) ballot counts, one
//            block exclusive scan in position order (u-major, then warp),
//            then each lane its slot. The tie ranking is the same scan over
//            the key == T flags, skipped when every tied key is taken. The
//            row's block table (slots output) is read while the levels run.
// Same semantics and the same bits as ref::TopK and the other paths.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_device.cuh"
#include "kernels/cuda/indexer/topk_keys.cuh"
#include "kernels/cuda/indexer/topk_plan.h"
#include "kernels/cuda/indexer/topk_paths.h"

namespace spar::topk {
namespace {

constexpr int kShortThreads = 1024;
constexpr int kShortWarps = kShortThreads / 32;
constexpr int kShortBins = 256;
constexpr int kShortCopies = 8;
static_assert(kTopKShortMaxLen <= 16 * kShortThreads, "at most 16 keys per thread (the instantiated variants)");
static_assert(kShortBins == 256, "SelectDigit's 256 digits");

constexpr int kWarpFinishMax = 32;  // bucket size one warp ranks

__device__ __forceinline__ void StoreGlobal(int32_t* p, int32_t v) {
  asm volatile("st.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The rem-th largest (1-based) of the n <= 32 keys in cand, for the whole
// CTA: the threshold T, how many keys above it (taken) and equal to it.
// Warp 0 ranks them; the others wait at the barriers.
struct WarpFinish {
  uint32_t threshold, above, equal;
};
__device__ __forceinline__ WarpFinish FinishInWarp(const uint32_t* cand, uint32_t n, uint32_t rem, WarpFinish* out) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid < 32) {
    const uint32_t mine = lane < static_cast<int>(n) ? cand[lane] : 0u;
    uint32_t above = 0, equal = 0;
    // Every lane reads all 32 slots (broadcast loads, all in flight at
    // once; a shuffle per candidate in a loop of n was a ~1000-cycle chain
    // the other warps waited on); slots past n are ignored.
    const uint4* const all = reinterpret_cast<const uint4*>(cand);
#pragma unroll
    for (int q = 0; q < kWarpFinishMax / 4; ++q) {
      const uint4 v = all[q];
      const uint32_t other[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool counted = 4 * q + e < static_cast<int>(n);
        above += counted & (other[e] > mine);
        equal += counted & (other[e] == mine);
      }
    }
    // Exactly the lanes holding the rem-th key qualify; they write alike.
    if (lane < static_cast<int>(n) && above < rem && above + equal >= rem) *out = WarpFinish{mine, above, equal};
  }
  __syncthreads();
  const WarpFinish f = *out;
  __syncthreads();  // as SelectDigit: no write to a neighbour of *out may overtake the read
  return f;
}

// The digit bucket holding the rem-th largest key of hist (bins x copies),
// for the whole CTA. Threads 0..255 own one bin each in descending order.
__device__ __forceinline__ DigitSelect FindShortBucket(const uint32_t (*hist)[kShortBins], uint32_t rem,
                                                      uint32_t (*scratch)[8], DigitSelect* result) {
  uint32_t cnt = 0;
  if (threadIdx.x < kShortBins) {
#pragma unroll
    for (int c = 0; c < kShortCopies; ++c) cnt += hist[c][kShortBins - 1 - threadIdx.x];
  }
  return SelectDigit<false>(cnt, 0u, rem, scratch, result);
}

template <int kKeys>
__global__ void __launch_bounds__(kShortThreads, 1) TopKShortKernel(const TopKParams p) {
  __shared__ __align__(16) uint32_t hist[2][kShortCopies][kShortBins];
  __shared__ uint32_t counts[kKeys * kShortWarps];
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t bucket_scratch[2][8];
  __shared__ DigitSelect sel;
  __shared__ __align__(16) uint32_t cand[kWarpFinishMax];
  __shared__ uint32_t cand_count;
  __shared__ WarpFinish finish;
  constexpr int kTableEntries = kKeys * kShortThreads / kCacheBlockTokens;
  __shared__ int32_t table_s[kTableEntries];
  const int tid = threadIdx.x, lane = tid & 31;
  const int copy = lane & (kShortCopies - 1);
  const int64_t row = blockIdx.x;
  const int len = RowLen(p, row);
  uint32_t key[kKeys];
  LoadRowKeys<kShortThreads>(p, row, 0, len, key);
  const int32_t* table = SlotTable(p, row);
  reinterpret_cast<uint4*>(&hist[0][0][0])[tid] = make_uint4(0, 0, 0, 0);  // 1024 x 16 B = both buffers
  if (tid == 0) cand_count = 0;
  __syncthreads();
  // The block table entries of the row's positions, stored to shared memory
  // at the output: their loads fly while the levels run.
  int32_t table_entry = 0;
  if (table != nullptr && tid < kTableEntries && tid * kCacheBlockTokens < len) table_entry = table[tid];

  // ---- radix select: T (a full key) and how many keys == T to take --------
  const uint32_t k = static_cast<uint32_t>(p.k);
  uint32_t threshold = 0, need_eq = 0, eq_count = 0;
  bool take_all_valid = false;
  uint32_t prefix = 0, rem = k;
#pragma unroll 1
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    uint32_t(*h)[kShortBins] = hist[level & 1];
    CountDigitRuns(key, shift, prefix, h[copy]);
    // The other buffer was last read by the previous level's bucket search,
    // which ended with a barrier: zero it for the next level.
    if (level < 3 && tid < kShortCopies * kShortBins / 4) {
      reinterpret_cast<uint4*>(&hist[(level + 1) & 1][0][0])[tid] = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    const DigitSelect s = FindShortBucket(h, rem, bucket_scratch, &sel);
    if (level == 0 && s.total <= k) {
      take_all_valid = true;
      break;
    }
    prefix = (prefix << 8) | s.bucket;
    rem -= s.above;
    eq_count = s.count;
    if (level < 3 && s.count <= kWarpFinishMax) {
      // The bucket's keys (top 8 * (level + 1) bits == prefix) to one warp.
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        if (key[u] != 0 && (key[u] >> shift) == prefix) cand[atomicAdd(&cand_count, 1u)] = key[u];
      }
      __syncthreads();
      const WarpFinish f = FinishInWarp(cand, s.count, rem, &finish);
      prefix = f.threshold;
      rem -= f.above;
      eq_count = f.equal;
      break;
    }
  }
  if (!take_all_valid) {
    threshold = prefix;
    need_eq = rem;
  }

  // ---- ranks in position order (PositionRanks) ---------------------------
  WarpFlags<kKeys> selected;  // position u * 1024 + tid is selected
  if (take_all_valid) {
    selected = BallotEach<kKeys>([&](int u) { return key[u] != 0; });
  } else {
    selected = BallotEach<kKeys>([&](int u) { return key[u] > threshold; });
    const WarpFlags<kKeys> eq = BallotEach<kKeys>([&](int u) { return key[u] == threshold; });
    if (need_eq >= eq_count) {
#pragma unroll
      for (int u = 0; u < kKeys; ++u) selected.b[u] |= eq.b[u];
    } else {
      // Keep the need_eq lowest tied positions.
      uint32_t unused;
      PositionRanks<kShortThreads>(eq, counts, scratch, &unused);
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const uint32_t rank = RankInOrder<kShortThreads>(eq, u, counts);
        selected.b[u] |= __ballot_sync(0xffffffffu, eq.Mine(u) && rank < need_eq);
      }
      __syncthreads();  // counts is rewritten below
    }
  }

  // ---- write the selected positions in ascending order, then -1 ----------
  uint32_t total = 0;
  if (tid < kTableEntries) table_s[tid] = table_entry;  // published by position_ranks' barriers
  PositionRanks<kShortThreads>(selected, counts, scratch, &total);
  // The row's output pointer kept in a register (recomputed per store it
  // cost four 64-bit instructions a key), stored through as global memory.
  int32_t* out = p.out + row * p.out_stride;
  asm("" : "+l"(out));
#pragma unroll
  for (int u = 0; u < kKeys; ++u) {
    if (!selected.Mine(u)) continue;
    const int pos = u * kShortThreads + tid;
    int32_t value = pos;
    if (table != nullptr) {
      const uint32_t upos = static_cast<uint32_t>(pos);  // unsigned: no sign fix-up in the division
      value = table_s[upos / kCacheBlockTokens] * kCacheBlockTokens + static_cast<int>(upos % kCacheBlockTokens);
    }
    StoreGlobal(out + RankInOrder<kShortThreads>(selected, u, counts), value);
  }
  for (int i = static_cast<int>(total) + tid; i < p.k; i += kShortThreads) out[i] = -1;
}

template <int kKeys>
absl::Status Launch(const TopKParams& p, cudaStream_t stream) {
  TopKShortKernel<kKeys><<<static_cast<unsigned>(p.rows), kShortThreads, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKShortKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchTopKShort(const TopKParams& p, cudaStream_t stream) {
  const int64_t len = p.num_cols;
  // Between the powers of two too: a decode step at 8K + 1 positions would
  // otherwise carry 16 keys per thread, half of them empty.
  if (len <= 2 * kShortThreads) return Launch<2>(p, stream);
  if (len <= 4 * kShortThreads) return Launch<4>(p, stream);
  if (len <= 6 * kShortThreads) return Launch<6>(p, stream);
  if (len <= 8 * kShortThreads) return Launch<8>(p, stream);
  if (len <= 12 * kShortThreads) return Launch<12>(p, stream);
  return Launch<16>(p, stream);
}

}  // namespace spar::topk
