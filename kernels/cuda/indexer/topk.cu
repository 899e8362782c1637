// Row-wise exact top-k (ref::TopK semantics), one 1024-thread CTA per row.
//
// Keys: each fp32 logit maps to an order-preserving uint32 (sign flip; -0 is
// folded into +0 because ref::TopK compares with ==); NaN and -inf map to 0,
// below every selectable key (the smallest, -FLT_MAX, maps to 0x00800000).
// The selected set is: every key > T plus the need_eq lowest positions with
// key == T, where T is the k-th largest key. That is exactly the ref's
// order (value descending, position ascending), so the set is identical.
//
// Finding T: radix select over digits of 11, 11 and 10 bits, top first.
//   level 1: histogram of bits [31:21] over the row (global);
//   level 2: if the chosen bucket holds <= kCandCap keys, one pass copies them
//            to smem (and histograms bits [20:10] on the way); later levels
//            then read smem only. Otherwise the level re-reads the row.
//   level 3: bits [9:0].
// Histograms are replicated 8 ways (by lane & 7) to spread same-bin atomics.
// Output: a count pass and a write pass over contiguous per-warp segments,
// with ballot prefix counts, emit positions in ascending order; -1 pads.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/indexer_common.cuh"

namespace spar {
namespace {

using indexer_internal::Invalid;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;
constexpr int kCopies = 8;
constexpr int kCandCap = 16384;
constexpr int kUnroll = 4;
constexpr int kSmemBytes = (kBins * kCopies + kCandCap) * 4;

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

// Exclusive prefix sum over the CTA (thread order). scratch: 32 words.
// Ends with a barrier, so scratch may be reused right after.
__device__ __forceinline__ uint32_t BlockExclusiveScan(uint32_t v, uint32_t* scratch) {
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
  }
  __syncthreads();
  const uint32_t r = scratch[warp] + incl - v;
  __syncthreads();
  return r;
}

struct Select {
  uint32_t bucket;  // chosen digit value
  uint32_t above;   // keys in higher buckets
  uint32_t count;   // keys in the chosen bucket
  uint32_t total;   // keys in all buckets
};

// Finds the bucket holding the rem-th largest key among `bins` buckets
// (2048 or 1024) of the replicated histogram. When total < rem no bucket
// qualifies and only `total` is meaningful. Uniform result for all threads.
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
  const uint32_t below = BlockExclusiveScan(mine, scratch);  // keys in lower bins
  if (i == kThreads - 1) *result = Select{0, 0, 0, below + mine};
  __syncthreads();
  const uint32_t total = result->total;
  uint32_t above = total - below - mine;  // keys in higher bins than this thread's
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

__device__ __forceinline__ void ZeroHist(uint32_t* hist) {
  for (int i = threadIdx.x; i < kBins * kCopies / 4; i += kThreads) reinterpret_cast<uint4*>(hist)[i] = make_uint4(0, 0, 0, 0);
}

// Visits every key of the row, kUnroll independent loads per thread at a time;
// lanes of a warp always call fn together (out-of-range positions give key 0).
template <typename Fn>
__device__ __forceinline__ void ForEachKey(const float* x, int len, Fn fn) {
  for (int base = 0; base < len; base += kThreads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      v[u] = i < len ? __ldg(x + i) : __int_as_float(0xff800000);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fn(OrderedKey(v[u]));
  }
}

// Appends the calling lanes' keys with `take` to cand (warp-aggregated).
__device__ __forceinline__ void Append(bool take, uint32_t key, uint32_t* cand, uint32_t* ncand) {
  const uint32_t mask = __ballot_sync(0xffffffffu, take);
  if (mask == 0) return;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(mask) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(ncand, static_cast<uint32_t>(__popc(mask)));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) cand[base + __popc(mask & LaneMaskLt())] = key;
}

static __global__ void __launch_bounds__(kThreads, 1) TopKKernel(const TopKParams p) {
  extern __shared__ __align__(16) uint32_t smem_u32[];
  uint32_t* hist = smem_u32;                    // [kBins][kCopies]
  uint32_t* cand = smem_u32 + kBins * kCopies;  // [kCandCap]
  __shared__ uint32_t scratch[32];
  __shared__ uint32_t ncand;
  __shared__ Select sel;
  __shared__ uint32_t warp_gt[kWarps], warp_eq[kWarps];

  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t start = p.row_start != nullptr ? p.row_start[row] : 0;
  int len = static_cast<int>(p.row_len != nullptr ? p.row_len[row] : p.num_cols);
  if (len < 0) len = 0;
  const float* x = p.logits + row * p.logits_stride + start;
  const uint32_t k = static_cast<uint32_t>(p.k);
  const int copy = lane & (kCopies - 1);

  // Phase 1: level-1 histogram (key 0 = invalid or padding is not counted),
  // then T and need_eq.
  ZeroHist(hist);
  if (threadIdx.x == 0) ncand = 0;
  __syncthreads();
  ForEachKey(x, len, [&](uint32_t key) {
    if (key != 0) atomicAdd(&hist[(key >> 21) * kCopies + copy], 1u);
  });
  __syncthreads();
  Select s = FindBucket(hist, kBins, k, scratch, &sel);
  const uint32_t n_valid = s.total;

  uint32_t threshold = 0, need_eq = 0;
  if (n_valid > k) {
    uint32_t prefix = s.bucket, rem = k - s.above, count = s.count;
    bool collected = false;
    // Levels 2 (bits [20:10], shift 21 -> 10) and 3 (bits [9:0], shift 10 -> 0).
#pragma unroll 1
    for (int level = 2; level <= 3; ++level) {
      const int shift = level == 2 ? 21 : 10;  // prefix = key >> shift
      const int bits = level == 2 ? 11 : 10;
      const uint32_t dmask = (1u << bits) - 1;
      const int dshift = shift - bits;
      ZeroHist(hist);
      __syncthreads();
      if (collected) {
        const uint32_t n = ncand;
        for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
          const uint32_t key = cand[i];
          if ((key >> shift) == prefix) atomicAdd(&hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
        }
      } else if (count <= kCandCap) {
        ForEachKey(x, len, [&](uint32_t key) {
          const bool take = (key >> shift) == prefix;
          if (take) atomicAdd(&hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
          Append(take, key, cand, &ncand);
        });
        collected = true;
      } else {
        ForEachKey(x, len, [&](uint32_t key) {
          if ((key >> shift) == prefix) atomicAdd(&hist[((key >> dshift) & dmask) * kCopies + copy], 1u);
        });
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

  // Phase 2: counts per warp segment, then ordered positions.
  const int seg = ((len + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int seg_lo = min(len, warp * seg), seg_hi = min(len, seg_lo + seg);
  auto segment_keys = [&](auto fn) {
    for (int base = seg_lo; base < seg_hi; base += 32 * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + 32 * u + lane;
        v[u] = i < seg_hi ? __ldg(x + i) : __int_as_float(0xff800000);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fn(base + 32 * u + lane, OrderedKey(v[u]));
    }
  };
  uint32_t gt = 0, eq = 0;
  segment_keys([&](int, uint32_t key) {
    gt += key > threshold;
    eq += key == threshold;
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    gt += __shfl_xor_sync(0xffffffffu, gt, o);
    eq += __shfl_xor_sync(0xffffffffu, eq, o);
  }
  if (lane == 0) {
    warp_gt[warp] = gt;
    warp_eq[warp] = eq;
  }
  __syncthreads();
  // Exclusive prefixes over the warps before this one (warp order = position order).
  uint32_t gt_run = 0, eq_run = 0, gt_all = 0, eq_all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) {
      gt_run += warp_gt[w];
      eq_run += warp_eq[w];
    }
    gt_all += warp_gt[w];
    eq_all += warp_eq[w];
  }
  const uint32_t selected = gt_all + min(eq_all, need_eq);
  uint32_t out_run = gt_run + min(eq_run, need_eq);

  int32_t* out = p.out + row * p.out_stride;
  const int32_t* table =
      p.block_table != nullptr ? p.block_table + (row / p.rows_per_seq) * p.block_table_stride : nullptr;
  const uint32_t lt = LaneMaskLt();
  segment_keys([&](int pos, uint32_t key) {
    const bool is_gt = key > threshold, is_eq = key == threshold;
    const uint32_t eq_mask = __ballot_sync(0xffffffffu, is_eq);
    const uint32_t eq_rank = eq_run + __popc(eq_mask & lt);
    const bool take = is_gt || (is_eq && eq_rank < need_eq);
    const uint32_t take_mask = __ballot_sync(0xffffffffu, take);
    if (take) {
      int32_t v = pos;
      if (table != nullptr) v = table[pos / 64] * 64 + pos % 64;
      out[out_run + __popc(take_mask & lt)] = v;
    }
    eq_run += __popc(eq_mask);
    out_run += __popc(take_mask);
  });
  for (int i = static_cast<int>(selected) + threadIdx.x; i < p.k; i += kThreads) out[i] = -1;
}

}  // namespace

bool TopKSupported(const TopKParams& p) { return p.k >= 1 && p.k <= kIndexerMaxTopK; }

absl::Status LaunchTopK(const TopKParams& p, cudaStream_t stream) {
  const char* op = "LaunchTopK";
  if (p.rows < 0) return Invalid(op, "rows", "must be >= 0");
  if (p.k < 1 || p.k > kIndexerMaxTopK) return Invalid(op, "k", "must be in [1, 2048]");
  if (p.rows == 0) return absl::OkStatus();
  if (p.rows > INT32_MAX) return Invalid(op, "rows", "too large");
  if (p.logits == nullptr) return Invalid(op, "logits", "is null");
  if (p.num_cols < 0 || p.num_cols >= INT32_MAX) return Invalid(op, "num_cols", "must be in [0, 2^31 - 1)");
  if (p.out == nullptr) return Invalid(op, "out", "is null");
  if (p.out_stride < p.k) return Invalid(op, "out_stride", "must be >= k");
  if (p.block_table != nullptr && (p.rows_per_seq < 1 || p.block_table_stride < 1))
    return Invalid(op, "rows_per_seq/block_table_stride", "must be >= 1 with a block_table");
  SPAR_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(TopKKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  TopKKernel<<<static_cast<unsigned>(p.rows), kThreads, kSmemBytes, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKKernel");
  return absl::OkStatus();
}

}  // namespace spar
