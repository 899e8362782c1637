// The split top-k path: a row cut into chunks read by several CTAs at once
// (topk_plan.h explains when and why). Same selection and tie rule as the
// one-CTA path (topk_device.cuh), so the outputs are identical.
//
//   memset   zero the rows' level-1 histograms;
//   K1       per chunk: smem histogram of bits [31:21] (8 copies per bin;
//            runs of equal bins in a thread are added at once, which
//            matters on real logits, where most keys share a few bins),
//            stored as the chunk's histogram and its non-zero bins added
//            into the row's global histogram;
//   K2       per chunk: the level-1 bucket from the row histogram (every
//            chunk CTA of a row finds the same one); positions above it go
//            to the chunk's words of the row's global bitmap, built in smem
//            and stored whole (one owner per word: no atomics, no zeroing);
//            when the bucket fits the row's candidate list, its (key,
//            position) pairs go to the list at this chunk's offset (the
//            bucket's counts in the chunks before it), through a smem
//            counter: no global atomics; the bucket's level-2 digits (bits
//            [20:10]) go to a smem histogram whose non-zero bins are added
//            into the row's level-2 histogram;
//   K3       per row (1024 threads): the bitmap into smem; the level-2
//            bucket from the row's level-2 histogram; one pass over the
//            candidates marks those above it and histograms level 3 of the
//            ones in it (kept in smem when they fit); then key > T and the
//            first ties as in the one-CTA path. A bucket that overflowed the
//            list makes K3 run FinishRow on the row itself.
// A row is read twice in all (K1, K2), as in the one-CTA path, but by
// `chunks` SMs at once.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer_common.cuh"
#include "kernels/cuda/indexer/topk_device.cuh"
#include "kernels/cuda/indexer/topk_split.h"

namespace spar::topk {
namespace {

constexpr int kChunkThreads = 512;  // kTopKChunkCtasPerSm of them per SM: <= 64 registers
constexpr int kChunkCopies = 8;     // 64 KB of smem: the registers allow 2 CTAs per SM anyway
constexpr int kChunkHistBytes = kTopKBins * kChunkCopies * 4;
static_assert(kChunkCopies == 8, "K1 sums a bin's copies as two uint4");
static_assert(kTopKMaxLen / kTopKChunkAlign <= kChunkThreads, "K2: one thread per earlier chunk");

constexpr int kL2Copies = 4;  // K2's level-2 histogram: bits [20:10] spread well, 32 KB
constexpr int kMarkSmemBytes = kTopKBins * kL2Copies * 4 + kTopKMaxLen / 2 / 8;  // + the largest chunk's bitmap

struct SplitArgs {
  uint32_t* row_hist;    // [rows][2][kTopKBins]: level 1, level 2
  uint32_t* chunk_hist;  // [rows][chunks][kTopKBins]
  uint32_t* bitmap;      // [rows][bitmap_words]
  uint2* cand;           // [rows][cap]
  int chunks;
  int chunk_len;
  int bitmap_words;
  uint32_t cap;
};

__device__ __forceinline__ int ChunkLen(const TopKParams& p, const SplitArgs& a, int64_t row, int c0) {
  return min(a.chunk_len, RowLen(p, row) - c0);
}

static __global__ void __launch_bounds__(kChunkThreads, kTopKChunkCtasPerSm)
    TopKChunkHistKernel(const TopKParams p, const SplitArgs a) {
  extern __shared__ __align__(16) uint32_t hist[];  // [kTopKBins][kChunkCopies]
  const int64_t row = blockIdx.y;
  const int c0 = static_cast<int>(blockIdx.x) * a.chunk_len;
  const int n = ChunkLen(p, a, row, c0);
  if (n <= 0) return;  // past this row's end (uniform over the CTA)
  ZeroWords<kChunkThreads>(hist, kTopKBins * kChunkCopies);
  __syncthreads();
  const int copy = threadIdx.x & (kChunkCopies - 1);
  BinRun<kChunkCopies> run;
  ForEachKey<kChunkThreads>(RowPtr(p, row) + c0, n, [&](uint32_t key, int) { run.Add(hist, copy, key); });
  run.Flush(hist, copy);
  __syncthreads();
  uint32_t* g = a.row_hist + row * 2 * kTopKBins;
  uint32_t* mine = a.chunk_hist + (row * a.chunks + blockIdx.x) * kTopKBins;
  for (int b = threadIdx.x; b < kTopKBins; b += kChunkThreads) {
    const uint4 v = reinterpret_cast<const uint4*>(hist)[2 * b], w = reinterpret_cast<const uint4*>(hist)[2 * b + 1];
    const uint32_t c = v.x + v.y + v.z + v.w + w.x + w.y + w.z + w.w;
    mine[b] = c;
    if (c != 0) atomicAdd(&g[b], c);
  }
}

static __global__ void __launch_bounds__(kChunkThreads, kTopKChunkCtasPerSm)
    TopKChunkMarkKernel(const TopKParams p, const SplitArgs a) {
  extern __shared__ __align__(16) uint32_t smem_u32[];
  uint32_t* hist2 = smem_u32;                         // [kTopKBins][kL2Copies]
  uint32_t* bits = hist2 + kTopKBins * kL2Copies;     // [chunk_len / 32]
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t ncand;
  __shared__ Select sel;
  const int64_t row = blockIdx.y;
  const int c0 = static_cast<int>(blockIdx.x) * a.chunk_len;
  const int n = ChunkLen(p, a, row, c0);
  const int words = a.chunk_len / 32;
  uint4* gbits = reinterpret_cast<uint4*>(a.bitmap + row * a.bitmap_words + blockIdx.x * words);
  if (n <= 0) {  // past this row's end: its words are still this CTA's to clear
    for (int i = threadIdx.x; i < words / 4; i += kChunkThreads) gbits[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  ZeroWords<kChunkThreads>(bits, words);
  ZeroWords<kChunkThreads>(hist2, kTopKBins * kL2Copies);
  if (threadIdx.x == 0) ncand = 0;
  const uint32_t k = static_cast<uint32_t>(p.k);
  uint32_t* g = a.row_hist + row * 2 * kTopKBins;
  // Its barriers cover the zeroing above.
  const Select s = FindBucket<kChunkThreads, 1>(g, kTopKBins, k, scratch, &sel);
  const float* x = RowPtr(p, row) + c0;
  if (s.total <= k) {
    ForEachKey<kChunkThreads>(x, n, [&](uint32_t key, int pos) {
      if (key != 0) SetBit(bits, pos);
    });
  } else {
    const bool collect = s.count <= a.cap;
    uint32_t base = 0;  // the bucket's keys in the chunks before this one (all non-empty)
    if (collect) {
      const int c = threadIdx.x;
      const uint32_t before =
          c < static_cast<int>(blockIdx.x) ? a.chunk_hist[(row * a.chunks + c) * kTopKBins + s.bucket] : 0;
      BlockExclusiveScan<kChunkThreads>(before, scratch, &base);
    }
    uint2* cand = a.cand + row * a.cap + base;
    const uint32_t room = a.cap - min(base, a.cap);
    const int copy = threadIdx.x & (kL2Copies - 1);
    ForEachKey<kChunkThreads>(x, n, [&](uint32_t key, int pos) {
      const uint32_t top = key >> 21;
      if (top > s.bucket) SetBit(bits, pos);
      const bool in = top == s.bucket && key != 0;
      if (in) atomicAdd(&hist2[((key >> 10) & 0x7ffu) * kL2Copies + copy], 1u);
      if (collect) Append(in, key, c0 + pos, cand, &ncand, room);
    });
  }
  __syncthreads();
  for (int i = threadIdx.x; i < words / 4; i += kChunkThreads) gbits[i] = reinterpret_cast<const uint4*>(bits)[i];
  if (s.total > k) {
    for (int b = threadIdx.x; b < kTopKBins; b += kChunkThreads) {
      const uint4 v = reinterpret_cast<const uint4*>(hist2)[b];
      const uint32_t c = v.x + v.y + v.z + v.w;
      if (c != 0) atomicAdd(&g[kTopKBins + b], c);
    }
  }
}

// K3's usual case: the level-1 bucket's s.count keys are listed in cand
// (global memory) and the row's level-2 histogram is in g2. Ends the row.
__device__ __forceinline__ void FinishFromList(const TopKParams& p, int64_t row, Select s, const uint2* cand,
                                               const uint32_t* g2, const RowSmem& m) {
  const int copy = threadIdx.x & (kCopies - 1);
  const uint32_t rem = static_cast<uint32_t>(p.k) - s.above;
  const Select t = FindBucket<kRowThreads, 1>(g2, kTopKBins, rem, m.scratch, m.sel);
  const uint32_t prefix = (s.bucket << 11) | t.bucket;  // == key >> 10 in the level-2 bucket
  const uint32_t rem2 = rem - t.above;
  // The level-2 bucket's keys go to smem when they fit (they almost always
  // do: ~count / 2048); otherwise the final marking reads the list again.
  const bool keep = t.count <= kCandCap;
  ZeroWords<kRowThreads>(m.hist, kTopKBins / 2 * kCopies);  // level 3: 1024 bins
  __syncthreads();
  ForEachCand<kRowThreads>(cand, s.count, [&](uint2 c) {
    const uint32_t top = c.x >> 10;
    if (top > prefix) SetBit(m.sel_bits, static_cast<int>(c.y));
    const bool in = top == prefix;  // never for padding (key 0)
    if (in) atomicAdd(&m.hist[(c.x & 0x3ffu) * kCopies + copy], 1u);
    if (keep) Append(in, c.x, static_cast<int>(c.y), m.cand, m.ncand, kCandCap);
  });
  __syncthreads();
  const Select u = FindBucket<kRowThreads, kCopies>(m.hist, kTopKBins / 2, rem2, m.scratch, m.sel);
  const uint32_t threshold = (prefix << 10) | u.bucket;
  const uint32_t need_eq = rem2 - u.above;
  uint32_t* const eq_bits = m.hist;
  ZeroWords<kRowThreads>(eq_bits, kBitmapWords);
  __syncthreads();
  const uint2* marks = keep ? m.cand : cand;
  ForEachCand<kRowThreads>(marks, keep ? *m.ncand : s.count, [&](uint2 c) {
    if (c.x > threshold) SetBit(m.sel_bits, static_cast<int>(c.y));
    if (c.x == threshold) SetBit(eq_bits, static_cast<int>(c.y));
  });
  __syncthreads();
  KeepTiesAndWrite(p, row, need_eq, m);
}

static __global__ void __launch_bounds__(kRowThreads, 1) TopKRowFinishKernel(const TopKParams p, const SplitArgs a) {
  extern __shared__ __align__(16) uint32_t smem_u32[];
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t ncand;
  __shared__ Select sel;
  const RowSmem m = CarveRowSmem(smem_u32, scratch, &ncand, &sel);
  const int64_t row = blockIdx.x;
  // The surely-selected bitmap K2 wrote (positions past bitmap_words, or past
  // 2^18, are never set).
  const int words = min(a.bitmap_words, kBitmapWords);
  const uint4* gb = reinterpret_cast<const uint4*>(a.bitmap + row * a.bitmap_words);
  uint4* sb = reinterpret_cast<uint4*>(m.sel_bits);
  for (int i = threadIdx.x; i < kBitmapWords / 4; i += kRowThreads)
    sb[i] = i < words / 4 ? gb[i] : make_uint4(0, 0, 0, 0);
  if (threadIdx.x == 0) ncand = 0;
  const uint32_t* g = a.row_hist + row * 2 * kTopKBins;
  const Select s = FindBucket<kRowThreads, 1>(g, kTopKBins, static_cast<uint32_t>(p.k), scratch, &sel);
  if (s.total > static_cast<uint32_t>(p.k) && s.count <= a.cap) {
    // K2 listed the whole level-1 bucket (s.count pairs, any order).
    FinishFromList(p, row, s, a.cand + row * a.cap, g + kTopKBins, m);
  } else {
    // Everything valid is selected (K2 marked it), or the bucket overflowed
    // the list: levels 2-3 on the row itself.
    FinishRow(p, row, RowPtr(p, row), RowLen(p, row), s, /*marked=*/true, nullptr, 0, m);
  }
}

}  // namespace

absl::Status LaunchTopKSplit(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream) {
  const TopKSplitLayout l = TopKSplitWorkspaceLayout(plan, p.rows);
  char* ws = static_cast<char*>(p.workspace);
  const SplitArgs a{reinterpret_cast<uint32_t*>(ws + l.row_hist),  reinterpret_cast<uint32_t*>(ws + l.chunk_hist),
                    reinterpret_cast<uint32_t*>(ws + l.bitmap),    reinterpret_cast<uint2*>(ws + l.candidates),
                    plan.chunks,
                    static_cast<int>(plan.chunk_len),
                    static_cast<int>(plan.bitmap_words),
                    static_cast<uint32_t>(plan.candidate_cap)};
  SPAR_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(ws + l.row_hist, 0, static_cast<size_t>(p.rows) * 2 * kTopKBins * 4, stream));
  const dim3 grid(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(p.rows));
  static indexer_internal::SmemOptIn hist_opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(hist_opt_in.Ensure(TopKChunkHistKernel, kChunkHistBytes));
  TopKChunkHistKernel<<<grid, kChunkThreads, kChunkHistBytes, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKChunkHistKernel");
  static indexer_internal::SmemOptIn mark_opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(mark_opt_in.Ensure(TopKChunkMarkKernel, kMarkSmemBytes));
  const int mark_smem = kTopKBins * kL2Copies * 4 + static_cast<int>(plan.chunk_len / 32 * 4);
  TopKChunkMarkKernel<<<grid, kChunkThreads, mark_smem, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKChunkMarkKernel");
  static indexer_internal::SmemOptIn opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(TopKRowFinishKernel, kRowSmemBytes));
  TopKRowFinishKernel<<<static_cast<unsigned>(p.rows), kRowThreads, kRowSmemBytes, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKRowFinishKernel");
  return absl::OkStatus();
}

}  // namespace spar::topk
