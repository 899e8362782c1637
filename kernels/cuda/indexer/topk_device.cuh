// Device pieces shared by the one-CTA top-k kernel (topk.cu) and the split
// path (topk_split.cu). Internal to kernels/cuda/indexer.
//
// Keys: each fp32 logit maps to an order-preserving uint32 (sign flip; -0 is
// folded into +0 because ref::TopK compares with ==); NaN and -inf map to 0,
// below every selectable key (the smallest, -FLT_MAX, maps to 0x00800000).
// The selected set is every key > T plus the need_eq lowest positions with
// key == T, T the k-th largest key: exactly the ref's order (value
// descending, position ascending), so the sets are identical.
//
// Finding T: radix select over digits of 11, 11 and 10 bits, top first.
// Level 1 (bits [31:21]) is found by the caller (one CTA over the row, or
// the chunk CTAs of the split path); FinishRow does levels 2-3 on the
// level-1 bucket's (key, position) candidates, or on the row again when
// they did not fit, then marks key > T and key == T, keeps the first need_eq
// tied positions and writes the selected positions in ascending order.
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_DEVICE_CUH_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_DEVICE_CUH_

#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/reduce.cuh"

#include <cstdint>

#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar::topk {

constexpr int kRowThreads = 1024;                  // the one-CTA kernel and K3
constexpr int kCopies = 8;                         // row-CTA histograms replicated per (lane & 7)
constexpr int kBitmapWords = kTopKMaxLen / 32;     // 8192
constexpr int kWordsPerThread = kBitmapWords / kRowThreads;
constexpr int kCandCap = 12288;                    // (key, position) pairs in a row CTA's smem
constexpr int kUnroll = 8;                         // float4 loads in flight per thread
constexpr int kHistWords = kTopKBins * kCopies;    // 16384, reused as the key == T bitmap
constexpr int kRowSmemBytes = (kHistWords + kBitmapWords + 2 * kCandCap) * 4;
static_assert(kBitmapWords <= kHistWords, "the eq bitmap reuses the histogram");

// A larger logit has a larger key; NaN and -inf map to 0 (never selected),
// -0 to +0's key. f + 0 is +0 for -0 (round to nearest) and f itself
// otherwise; NaN and -inf fail f > -inf. Five instructions.
__device__ __forceinline__ uint32_t OrderedKey(float f) {
  const uint32_t u = __float_as_uint(f + 0.0f);
  const uint32_t key = u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
  return f > -INFINITY ? key : 0u;
}

__device__ __forceinline__ uint32_t LaneMaskLt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}
__device__ __forceinline__ uint32_t LaneMaskEq() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_eq;" : "=r"(m));
  return m;
}

// Row length after the launcher's clamps: row_len (or num_cols), at most
// num_cols and kTopKMaxLen.
__device__ __forceinline__ int RowLen(const TopKParams& p, int64_t row) {
  const int64_t len = p.row_len != nullptr ? p.row_len[row] : p.num_cols;
  return static_cast<int>(max(int64_t{0}, min(len, min(p.num_cols, int64_t{kTopKMaxLen}))));
}
__device__ __forceinline__ const float* RowPtr(const TopKParams& p, int64_t row) {
  const int64_t start = p.row_start != nullptr ? p.row_start[row] : 0;
  return p.logits + row * p.logits_stride + start;
}

// The block table of row's sequence when positions are written as cache
// slots (TopKParams::block_table), else null.
__device__ __forceinline__ const int32_t* SlotTable(const TopKParams& p, int64_t row) {
  if (p.block_table == nullptr) return nullptr;
  const int64_t seq = p.token_seq != nullptr ? p.token_seq[row] : row / p.rows_per_seq;
  return p.block_table + seq * p.block_table_stride;
}

// The CTA-wide exclusive scan (kernels/cuda/common/reduce.cuh).
using cuda::BlockExclusiveScan;

struct Select {
  uint32_t bucket;  // chosen digit value
  uint32_t above;   // keys in higher buckets
  uint32_t count;   // keys in the chosen bucket
  uint32_t total;   // keys in all buckets
};

// The bucket holding the rem-th largest key among `bins` buckets (<= 2048)
// of a histogram replicated kC ways (bin b, copy c at hist[b * kC + c]); hist
// may be in shared or global memory. When total < rem only `total` is
// meaningful. Uniform result.
template <int kT, int kC>
__device__ Select FindBucket(const uint32_t* hist, int bins, uint32_t rem, uint32_t* scratch, Select* result) {
  constexpr int kMaxPer = kTopKBins / kT;
  const int per = bins / kT;  // thread i owns bins [i*per, (i+1)*per)
  const int i = threadIdx.x;
  uint32_t cnt[kMaxPer];
  uint32_t mine = 0;
#pragma unroll
  for (int b = 0; b < kMaxPer; ++b) {
    cnt[b] = 0;
    if (b < per) {
      if constexpr (kC == 8) {
        const uint4* h = reinterpret_cast<const uint4*>(hist + (i * per + b) * kC);
        const uint4 x = h[0], y = h[1];
        cnt[b] = x.x + x.y + x.z + x.w + y.x + y.y + y.z + y.w;
      } else {
#pragma unroll
        for (int c = 0; c < kC; ++c) cnt[b] += hist[(i * per + b) * kC + c];
      }
    }
    mine += cnt[b];
  }
  uint32_t total;
  const uint32_t below = BlockExclusiveScan<kT>(mine, scratch, &total);
  uint32_t above = total - below - mine;  // keys in bins above this thread's
  if (i == 0) *result = Select{0, 0, 0, total};
  __syncthreads();
#pragma unroll
  for (int b = kMaxPer - 1; b >= 0; --b) {
    if (b >= per) continue;
    if (above < rem && above + cnt[b] >= rem)
      *result = Select{static_cast<uint32_t>(i * per + b), above, cnt[b], total};
    above += cnt[b];
  }
  __syncthreads();
  const Select s = *result;
  __syncthreads();
  return s;
}

template <int kT>
__device__ __forceinline__ void ZeroWords(uint32_t* p, int words) {
  for (int i = threadIdx.x; i < words / 4; i += kT) reinterpret_cast<uint4*>(p)[i] = make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void SetBit(uint32_t* bitmap, int pos) { atomicOr(&bitmap[pos >> 5], 1u << (pos & 31)); }

// Calls fn(key, pos) for every position of x[0, len): a scalar step for the
// unaligned head and the tail, then float4 loads, kUnroll per thread in
// flight. Every thread of a warp calls fn the same number of times; padding
// calls get key 0 and pos -1.
template <int kT, typename Fn>
__device__ __forceinline__ void ForEachKey(const float* x, int len, Fn fn) {
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(x) >> 2) & 3);
  const int head = min(len, (4 - mis) & 3);
  const int n4 = (len - head) >> 2;
  const int tail_start = head + 4 * n4;
  {
    const int tid = threadIdx.x;
    int pos = -1;
    if (tid < head) pos = tid;
    else if (tid - head < len - tail_start) pos = tail_start + tid - head;
    fn(pos >= 0 ? OrderedKey(__ldg(x + pos)) : 0u, pos);
  }
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
  for (int base = 0; base < n4; base += kT * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kT + threadIdx.x;
      v[u] = i < n4 ? __ldg(x4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kT + threadIdx.x;
      const int pos = i < n4 ? head + 4 * i : -4;
      fn(OrderedKey(v[u].x), pos < 0 ? -1 : pos);
      fn(OrderedKey(v[u].y), pos < 0 ? -1 : pos + 1);
      fn(OrderedKey(v[u].z), pos < 0 ? -1 : pos + 2);
      fn(OrderedKey(v[u].w), pos < 0 ? -1 : pos + 3);
    }
  }
}

// Level-1 histogram counting for one thread: runs of keys in the same bin
// are added at once. Real logits put most keys of a row into a few bins, and
// same-address smem atomics serialize; key 0 (NaN, -inf) is never counted
// (its bin, 0, holds no valid key).
template <int kC>
struct BinRun {
  uint32_t bin = 0, n = 0;
  __device__ __forceinline__ void Add(uint32_t* hist, int copy, uint32_t key) {
    const uint32_t b = key >> 21;
    if (b != bin) {
      Flush(hist, copy);
      bin = b;
    }
    n += key != 0;
  }
  __device__ __forceinline__ void Flush(uint32_t* hist, int copy) {
    if (n != 0) atomicAdd(&hist[bin * kC + copy], n);
    n = 0;
  }
};

// Appends (key, pos) of the lanes with `take` to a candidate list (shared or
// global) through its counter, warp-aggregated. Slots at or above `cap` are
// dropped (the caller only appends when everything fits).
__device__ __forceinline__ void Append(bool take, uint32_t key, int pos, uint2* cand, uint32_t* counter, uint32_t cap) {
  const uint32_t mask = __ballot_sync(0xffffffffu, take);
  if (mask == 0) return;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(mask) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(counter, static_cast<uint32_t>(__popc(mask)));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) {
    const uint32_t slot = base + __popc(mask & LaneMaskLt());
    if (slot < cap) cand[slot] = make_uint2(key, static_cast<uint32_t>(pos));
  }
}

// Calls fn(candidate) for cand[0, n) (shared or global memory) with
// kUnroll loads per thread issued before any fn: the loop bodies do smem
// atomics, which the compiler may not move loads across (cand may alias smem).
template <int kT, typename Fn>
__device__ __forceinline__ void ForEachCand(const uint2* cand, uint32_t n, Fn fn) {
  for (uint32_t base = 0; base < n; base += kT * kUnroll) {
    uint2 c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * kT + threadIdx.x;
      c[u] = i < n ? cand[i] : make_uint2(0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kT + threadIdx.x < n) fn(c[u]);
    }
  }
}

// Shared memory of a row CTA (kRowThreads threads, kRowSmemBytes dynamic).
struct RowSmem {
  uint32_t* hist;      // [kTopKBins][kCopies]; later the key == T bitmap
  uint32_t* sel_bits;  // [kBitmapWords] selected positions
  uint2* cand;         // [kCandCap] (key, position)
  uint32_t* scratch;   // 33 words
  uint32_t* ncand;
  Select* sel;
};

__device__ __forceinline__ RowSmem CarveRowSmem(uint32_t* dyn, uint32_t* scratch, uint32_t* ncand, Select* sel) {
  RowSmem m;
  m.hist = dyn;
  m.sel_bits = dyn + kHistWords;
  m.cand = reinterpret_cast<uint2*>(m.sel_bits + kBitmapWords);
  m.scratch = scratch;
  m.ncand = ncand;
  m.sel = sel;
  return m;
}

// Everything after level 1, for one row, by a row CTA. On entry: s is the
// level-1 selection over the valid keys (s.total of them); m.sel_bits holds
// the positions above the level-1 bucket (or every valid position when
// s.total <= k) or is zero when `marked` is false; when cand != nullptr it
// holds the n_cand keys of the level-1 bucket (shared or global memory),
// otherwise they are found by re-reading the row. Writes out[0, k).
__device__ __forceinline__ void FinishRow(const TopKParams& p, int64_t row, const float* x, int len, Select s,
                                          bool marked, const uint2* cand, uint32_t n_cand, const RowSmem& m) {
  const int lane = threadIdx.x & 31;
  const int copy = lane & (kCopies - 1);
  const uint32_t k = static_cast<uint32_t>(p.k);
  const uint32_t n_valid = s.total;
  uint32_t threshold = 0, need_eq = 0;
  if (n_valid <= k) {
    if (!marked) {
      ForEachKey<kRowThreads>(x, len, [&](uint32_t key, int pos) {
        if (key != 0) SetBit(m.sel_bits, pos);
      });
    }
  } else {
    // Levels 2 (bits [20:10]) and 3 (bits [9:0]). `prefix` is the chosen
    // bucket path; keys whose top bits exceed it are surely selected.
    uint32_t prefix = s.bucket, rem = k - s.above, count = s.count;
#pragma unroll 1
    for (int level = 2; level <= 3; ++level) {
      const int shift = level == 2 ? 21 : 10;  // prefix == key >> shift
      const int bits = level == 2 ? 11 : 10;
      const uint32_t dmask = (1u << bits) - 1;
      const int dshift = shift - bits;
      ZeroWords<kRowThreads>(m.hist, kHistWords);
      __syncthreads();
      if (cand != nullptr) {
        ForEachCand<kRowThreads>(cand, n_cand, [&](uint2 c) {
          if ((c.x >> shift) == prefix) atomicAdd(&m.hist[((c.x >> dshift) & dmask) * kCopies + copy], 1u);
        });
      } else {
        const bool collect = count <= kCandCap;
        ForEachKey<kRowThreads>(x, len, [&](uint32_t key, int pos) {
          const uint32_t top = key >> shift;
          if (top > prefix) SetBit(m.sel_bits, pos);
          const bool in = top == prefix && key != 0;
          if (in) atomicAdd(&m.hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
          if (collect) Append(in, key, pos, m.cand, m.ncand, kCandCap);
        });
        __syncthreads();
        if (collect) {
          cand = m.cand;
          n_cand = *m.ncand;
        }
      }
      __syncthreads();
      const Select t = FindBucket<kRowThreads, kCopies>(m.hist, 1 << bits, rem, m.scratch, m.sel);
      prefix = (prefix << bits) | t.bucket;
      rem -= t.above;
      count = t.count;
    }
    threshold = prefix;
    need_eq = rem;
  }

  // Mark key > T and key == T among what is not marked yet.
  uint32_t* eq_bits = m.hist;
  ZeroWords<kRowThreads>(eq_bits, kBitmapWords);
  __syncthreads();
  if (n_valid > k) {
    if (cand != nullptr) {
      ForEachCand<kRowThreads>(cand, n_cand, [&](uint2 c) {
        if (c.x > threshold) SetBit(m.sel_bits, static_cast<int>(c.y));
        if (c.x == threshold) SetBit(eq_bits, static_cast<int>(c.y));
      });
    } else {
      ForEachKey<kRowThreads>(x, len, [&](uint32_t key, int pos) {
        if (key > threshold) SetBit(m.sel_bits, pos);
        if (key == threshold) SetBit(eq_bits, pos);
      });
    }
  }
  __syncthreads();

  // Keep the first need_eq tied positions, then write the selected
  // positions in ascending order. Thread i owns bitmap words [8i, 8i + 8).
  const int w0 = threadIdx.x * kWordsPerThread;
  uint32_t total;
  if (need_eq > 0) {
    uint32_t c = 0;
#pragma unroll
    for (int w = 0; w < kWordsPerThread; ++w) c += __popc(eq_bits[w0 + w]);
    uint32_t rank = BlockExclusiveScan<kRowThreads>(c, m.scratch, &total);
#pragma unroll
    for (int w = 0; w < kWordsPerThread; ++w) {
      uint32_t word = eq_bits[w0 + w], kept = 0;
      while (word != 0 && rank < need_eq) {
        const uint32_t low = word & (~word + 1);
        kept |= low;
        word ^= low;
        ++rank;
      }
      m.sel_bits[w0 + w] |= kept;
    }
  }
  uint32_t c = 0;
#pragma unroll
  for (int w = 0; w < kWordsPerThread; ++w) c += __popc(m.sel_bits[w0 + w]);
  uint32_t out_idx = BlockExclusiveScan<kRowThreads>(c, m.scratch, &total);
  int32_t* out = p.out + row * p.out_stride;
  const int32_t* table = SlotTable(p, row);
#pragma unroll
  for (int w = 0; w < kWordsPerThread; ++w) {
    uint32_t word = m.sel_bits[w0 + w];
    while (word != 0) {
      const int pos = (w0 + w) * 32 + __ffs(word) - 1;
      word &= word - 1;
      out[out_idx++] = table != nullptr ? table[pos / 64] * 64 + pos % 64 : pos;
    }
  }
  for (int i = static_cast<int>(total) + threadIdx.x; i < p.k; i += kRowThreads) out[i] = -1;
}

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_DEVICE_CUH_
