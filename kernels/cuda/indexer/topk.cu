// Row-wise exact top-k (ref::TopK semantics), one 1024-thread CTA per row.
//
// Keys: each fp32 logit maps to an order-preserving uint32 (sign flip; -0 is
// folded into +0 because ref::TopK compares with ==); NaN and -inf map to 0,
// below every selectable key (the smallest, -FLT_MAX, maps to 0x00800000).
// The selected set is every key > T plus the need_eq lowest positions with
// key == T, T the k-th largest key: exactly the ref's order (value
// descending, position ascending), so the sets are identical.
//
// Finding T: radix select over digits of 11, 11 and 10 bits, top first.
//   pass A (global):  histogram of bits [31:21];
//   pass B (global):  positions above the chosen bucket are surely selected
//                     (bit set in a smem position bitmap); the bucket's
//                     (key, position) pairs are copied to smem when they fit
//                     (kCandCap) while bits [20:10] are histogrammed;
//   then levels 2-3 and the final marking run on the smem candidates. A
//   bucket too large to copy (heavy ties, narrow ranges) makes that level
//   re-read the row instead.
// Output: a second bitmap marks key == T; a CTA-wide scan keeps its first
// need_eq bits; a scan over the selected bitmap writes positions in
// ascending order; -1 pads. Histograms are replicated 8 ways (lane & 7) to
// spread same-bin atomics. Rows are read with 16-byte loads, 8 in flight per
// thread, so a row costs two trips over memory in the common case.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/indexer_common.cuh"

namespace spar {
namespace {

using indexer_internal::Invalid;

constexpr int kThreads = 1024;
constexpr int kBins = 2048;
constexpr int kCopies = 8;
constexpr int kMaxLen = 1 << 18;                    // longest row (positions fit the bitmaps)
constexpr int kBitmapWords = kMaxLen / 32;          // 8192
constexpr int kWordsPerThread = kBitmapWords / kThreads;
constexpr int kCandCap = 12288;                     // (key, position) pairs
constexpr int kUnroll = 8;                          // float4 loads in flight per thread
constexpr int kHistWords = kBins * kCopies;         // 16384, reused as the key == T bitmap
constexpr int kSmemBytes = (kHistWords + kBitmapWords + 2 * kCandCap) * 4;
static_assert(kBitmapWords <= kHistWords, "the eq bitmap reuses the histogram");

__device__ __forceinline__ uint32_t OrderedKey(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u || u == 0xff800000u) return 0;  // NaN, -inf
  if (u == 0x80000000u) u = 0;                                          // -0 == +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint32_t LaneMaskLt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Exclusive prefix sum over the CTA in thread order; *total gets the sum.
// scratch: 33 words. Ends with a barrier.
__device__ __forceinline__ uint32_t BlockExclusiveScan(uint32_t v, uint32_t* scratch, uint32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const uint32_t w = scratch[lane];
    uint32_t wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t n = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += n;
    }
    scratch[lane] = wi - w;
    if (lane == 31) scratch[32] = wi;
  }
  __syncthreads();
  const uint32_t r = scratch[warp] + incl - v;
  *total = scratch[32];
  __syncthreads();
  return r;
}

struct Select {
  uint32_t bucket;  // chosen digit value
  uint32_t above;   // keys in higher buckets
  uint32_t count;   // keys in the chosen bucket
  uint32_t total;   // keys in all buckets
};

// The bucket holding the rem-th largest key among `bins` buckets (2048 or
// 1024) of the replicated histogram; when total < rem only `total` is
// meaningful. Uniform result.
__device__ Select FindBucket(const uint32_t* hist, int bins, uint32_t rem, uint32_t* scratch, Select* result) {
  const int per = bins / kThreads;  // thread i owns bins [i*per, (i+1)*per)
  const int i = threadIdx.x;
  uint32_t cnt[2] = {0, 0};
  for (int b = 0; b < per; ++b) {
    const uint4* h = reinterpret_cast<const uint4*>(hist + (i * per + b) * kCopies);
    const uint4 x = h[0], y = h[1];
    cnt[b] = x.x + x.y + x.z + x.w + y.x + y.y + y.z + y.w;
  }
  const uint32_t mine = cnt[0] + cnt[1];
  uint32_t total;
  const uint32_t below = BlockExclusiveScan(mine, scratch, &total);
  uint32_t above = total - below - mine;  // keys in bins above this thread's
  if (i == 0) *result = Select{0, 0, 0, total};
  __syncthreads();
  for (int b = per - 1; b >= 0; --b) {
    if (above < rem && above + cnt[b] >= rem) *result = Select{static_cast<uint32_t>(i * per + b), above, cnt[b], total};
    above += cnt[b];
  }
  __syncthreads();
  const Select s = *result;
  __syncthreads();
  return s;
}

__device__ __forceinline__ void ZeroWords(uint32_t* p, int words) {
  for (int i = threadIdx.x; i < words / 4; i += kThreads) reinterpret_cast<uint4*>(p)[i] = make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void SetBit(uint32_t* bitmap, int pos) { atomicOr(&bitmap[pos >> 5], 1u << (pos & 31)); }

// Calls fn(key, pos) for every position of the row: a scalar step for the
// unaligned head and the tail, then float4 loads, kUnroll per thread in
// flight. Every thread of a warp calls fn the same number of times; padding
// calls get key 0 and pos -1.
template <typename Fn>
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
  for (int base = 0; base < n4; base += kThreads * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      v[u] = i < n4 ? __ldg(x4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      const int pos = i < n4 ? head + 4 * i : -4;
      fn(OrderedKey(v[u].x), pos < 0 ? -1 : pos);
      fn(OrderedKey(v[u].y), pos < 0 ? -1 : pos + 1);
      fn(OrderedKey(v[u].z), pos < 0 ? -1 : pos + 2);
      fn(OrderedKey(v[u].w), pos < 0 ? -1 : pos + 3);
    }
  }
}

// Appends (key, pos) of the lanes with `take` to the candidate arrays (warp-aggregated).
__device__ __forceinline__ void Append(bool take, uint32_t key, int pos, uint32_t* cand_key, uint32_t* cand_pos,
                                       uint32_t* ncand) {
  const uint32_t mask = __ballot_sync(0xffffffffu, take);
  if (mask == 0) return;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(mask) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(ncand, static_cast<uint32_t>(__popc(mask)));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) {
    const uint32_t slot = base + __popc(mask & LaneMaskLt());
    cand_key[slot] = key;
    cand_pos[slot] = static_cast<uint32_t>(pos);
  }
}

static __global__ void __launch_bounds__(kThreads, 1) TopKKernel(const TopKParams p) {
  extern __shared__ __align__(16) uint32_t smem_u32[];
  uint32_t* hist = smem_u32;                        // [kBins][kCopies]; later the key == T bitmap
  uint32_t* sel_bits = hist + kHistWords;           // [kBitmapWords] selected positions
  uint32_t* cand_key = sel_bits + kBitmapWords;     // [kCandCap]
  uint32_t* cand_pos = cand_key + kCandCap;         // [kCandCap]
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t ncand;
  __shared__ Select sel;

  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int64_t start = p.row_start != nullptr ? p.row_start[row] : 0;
  int len = static_cast<int>(p.row_len != nullptr ? p.row_len[row] : p.num_cols);
  len = max(0, min(len, kMaxLen));
  const float* x = p.logits + row * p.logits_stride + start;
  const uint32_t k = static_cast<uint32_t>(p.k);
  const int copy = lane & (kCopies - 1);

  // Phase 1 (pass A): level-1 histogram of the valid keys.
  ZeroWords(hist, kHistWords);
  ZeroWords(sel_bits, kBitmapWords);
  if (threadIdx.x == 0) ncand = 0;
  __syncthreads();
  ForEachKey(x, len, [&](uint32_t key, int) {
    if (key != 0) atomicAdd(&hist[(key >> 21) * kCopies + copy], 1u);
  });
  __syncthreads();
  Select s = FindBucket(hist, kBins, k, scratch, &sel);
  const uint32_t n_valid = s.total;

  uint32_t threshold = 0, need_eq = 0;
  bool collected = false;
  if (n_valid <= k) {
    // Everything valid is selected.
    ForEachKey(x, len, [&](uint32_t key, int pos) {
      if (key != 0) SetBit(sel_bits, pos);
    });
  } else {
    // Phase 2: levels 2 (bits [20:10]) and 3 (bits [9:0]). `prefix` is the
    // chosen bucket path; keys whose top bits exceed it are surely selected.
    uint32_t prefix = s.bucket, rem = k - s.above, count = s.count;
#pragma unroll 1
    for (int level = 2; level <= 3; ++level) {
      const int shift = level == 2 ? 21 : 10;  // prefix == key >> shift
      const int bits = level == 2 ? 11 : 10;
      const uint32_t dmask = (1u << bits) - 1;
      const int dshift = shift - bits;
      ZeroWords(hist, kHistWords);
      __syncthreads();
      if (collected) {
        const uint32_t n = ncand;
        for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
          const uint32_t key = cand_key[i];
          if ((key >> shift) == prefix) atomicAdd(&hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
        }
      } else {
        const bool collect = count <= kCandCap;
        ForEachKey(x, len, [&](uint32_t key, int pos) {
          const uint32_t top = key >> shift;
          if (top > prefix) SetBit(sel_bits, pos);
          const bool in = top == prefix && key != 0;
          if (in) atomicAdd(&hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
          if (collect) Append(in, key, pos, cand_key, cand_pos, &ncand);
        });
        collected = collect;
      }
      __syncthreads();
      s = FindBucket(hist, 1 << bits, rem, scratch, &sel);
      prefix = (prefix << bits) | s.bucket;
      rem -= s.above;
      count = s.count;
    }
    threshold = prefix;
    need_eq = rem;
  }

  // Phase 3: mark key > T and key == T among what is not marked yet.
  uint32_t* eq_bits = hist;
  ZeroWords(eq_bits, kBitmapWords);
  __syncthreads();
  if (n_valid > k) {
    if (collected) {
      const uint32_t n = ncand;
      for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        const uint32_t key = cand_key[i];
        if (key > threshold) SetBit(sel_bits, static_cast<int>(cand_pos[i]));
        if (key == threshold) SetBit(eq_bits, static_cast<int>(cand_pos[i]));
      }
    } else {
      ForEachKey(x, len, [&](uint32_t key, int pos) {
        if (key > threshold) SetBit(sel_bits, pos);
        if (key == threshold) SetBit(eq_bits, pos);
      });
    }
  }
  __syncthreads();

  // Phase 4: keep the first need_eq tied positions, then write the selected
  // positions in ascending order. Thread i owns bitmap words [8i, 8i + 8).
  const int w0 = threadIdx.x * kWordsPerThread;
  uint32_t total;
  if (need_eq > 0) {
    uint32_t c = 0;
#pragma unroll
    for (int w = 0; w < kWordsPerThread; ++w) c += __popc(eq_bits[w0 + w]);
    uint32_t rank = BlockExclusiveScan(c, scratch, &total);
#pragma unroll
    for (int w = 0; w < kWordsPerThread; ++w) {
      uint32_t word = eq_bits[w0 + w], kept = 0;
      while (word != 0 && rank < need_eq) {
        const uint32_t low = word & (~word + 1);
        kept |= low;
        word ^= low;
        ++rank;
      }
      sel_bits[w0 + w] |= kept;
    }
  }
  uint32_t c = 0;
#pragma unroll
  for (int w = 0; w < kWordsPerThread; ++w) c += __popc(sel_bits[w0 + w]);
  uint32_t out_idx = BlockExclusiveScan(c, scratch, &total);
  int32_t* out = p.out + row * p.out_stride;
  const int32_t* table =
      p.block_table != nullptr ? p.block_table + (row / p.rows_per_seq) * p.block_table_stride : nullptr;
#pragma unroll
  for (int w = 0; w < kWordsPerThread; ++w) {
    uint32_t word = sel_bits[w0 + w];
    while (word != 0) {
      const int pos = (w0 + w) * 32 + __ffs(word) - 1;
      word &= word - 1;
      out[out_idx++] = table != nullptr ? table[pos / 64] * 64 + pos % 64 : pos;
    }
  }
  for (int i = static_cast<int>(total) + threadIdx.x; i < p.k; i += kThreads) out[i] = -1;
}

}  // namespace

bool TopKSupported(const TopKParams& p) {
  return p.k >= 1 && p.k <= kIndexerMaxTopK && p.num_cols <= kMaxLen;
}

absl::Status LaunchTopK(const TopKParams& p, cudaStream_t stream) {
  const char* op = "LaunchTopK";
  if (p.rows < 0) return Invalid(op, "rows", "must be >= 0");
  if (p.k < 1 || p.k > kIndexerMaxTopK) return Invalid(op, "k", "must be in [1, 2048]");
  if (p.rows == 0) return absl::OkStatus();
  if (p.rows > INT32_MAX) return Invalid(op, "rows", "too large");
  if (p.logits == nullptr || reinterpret_cast<uintptr_t>(p.logits) % 4 != 0)
    return Invalid(op, "logits", "must be non-null and 4-byte aligned");
  if (p.num_cols < 0 || p.num_cols > kMaxLen) return Invalid(op, "num_cols", "must be in [0, 262144]");
  if (p.out == nullptr) return Invalid(op, "out", "is null");
  if (p.out_stride < p.k) return Invalid(op, "out_stride", "must be >= k");
  if (p.block_table != nullptr && (p.rows_per_seq < 1 || p.block_table_stride < 1))
    return Invalid(op, "rows_per_seq/block_table_stride", "must be >= 1 with a block_table");
  static indexer_internal::SmemOptIn opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(TopKKernel, kSmemBytes));
  TopKKernel<<<static_cast<unsigned>(p.rows), kThreads, kSmemBytes, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKKernel");
  return absl::OkStatus();
}

}  // namespace spar
