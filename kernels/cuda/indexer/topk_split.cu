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
//            counter: no global atomics;
//   K3       per row (1024 threads): the bitmap into smem, then FinishRow on
//            the candidate list, or on the row itself when the bucket
//            overflowed the list.
// A row is read twice in all (K1, K2), as in the one-CTA path, but by
// `chunks` SMs at once.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer_common.cuh"
#include "kernels/cuda/indexer/topk_device.cuh"
#include "kernels/cuda/indexer/topk_paths.h"

namespace spar::topk {
namespace {

constexpr int kChunkThreads = 512;  // kTopKChunkCtasPerSm of them per SM: <= 64 registers
constexpr int kChunkCopies = 8;     // 64 KB of smem: the registers allow 2 CTAs per SM anyway
constexpr int kChunkHistBytes = kTopKBins * kChunkCopies * 4;
static_assert(kChunkCopies == 8, "K1 sums a bin's copies as two uint4");
static_assert(kTopKMaxLen / kTopKChunkAlign <= kChunkThreads, "K2: one thread per earlier chunk");

struct SplitArgs {
  uint32_t* row_hist;    // [rows][kTopKBins]
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
  uint32_t* g = a.row_hist + row * kTopKBins;
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
  extern __shared__ __align__(16) uint32_t bits[];  // [chunk_len / 32]
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
  if (threadIdx.x == 0) ncand = 0;
  const uint32_t k = static_cast<uint32_t>(p.k);
  // Its barriers cover the zeroing above.
  const Select s = FindBucket<kChunkThreads, 1>(a.row_hist + row * kTopKBins, kTopKBins, k, scratch, &sel);
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
    ForEachKey<kChunkThreads>(x, n, [&](uint32_t key, int pos) {
      const uint32_t top = key >> 21;
      if (top > s.bucket) SetBit(bits, pos);
      if (collect) Append(top == s.bucket && key != 0, key, c0 + pos, cand, &ncand, room);
    });
  }
  __syncthreads();
  for (int i = threadIdx.x; i < words / 4; i += kChunkThreads) gbits[i] = reinterpret_cast<const uint4*>(bits)[i];
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
  const Select s =
      FindBucket<kRowThreads, 1>(a.row_hist + row * kTopKBins, kTopKBins, static_cast<uint32_t>(p.k), scratch, &sel);
  // K2 listed the whole level-1 bucket when it fit (s.count pairs, any order).
  const bool listed = s.total > static_cast<uint32_t>(p.k) && s.count <= a.cap;
  FinishRow(p, row, RowPtr(p, row), RowLen(p, row), s, /*marked=*/true, listed ? a.cand + row * a.cap : nullptr,
            listed ? s.count : 0, m);
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
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ws + l.row_hist, 0, static_cast<size_t>(p.rows) * kTopKBins * 4, stream));
  const dim3 grid(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(p.rows));
  static indexer_internal::SmemOptIn hist_opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(hist_opt_in.Ensure(TopKChunkHistKernel, kChunkHistBytes));
  TopKChunkHistKernel<<<grid, kChunkThreads, kChunkHistBytes, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKChunkHistKernel");
  TopKChunkMarkKernel<<<grid, kChunkThreads, plan.chunk_len / 32 * 4, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKChunkMarkKernel");
  static indexer_internal::SmemOptIn opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(TopKRowFinishKernel, kRowSmemBytes));
  TopKRowFinishKernel<<<static_cast<unsigned>(p.rows), kRowThreads, kRowSmemBytes, stream>>>(p, a);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKRowFinishKernel");
  return absl::OkStatus();
}

}  // namespace spar::topk
