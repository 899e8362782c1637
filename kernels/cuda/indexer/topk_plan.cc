// Work split of the top-k kernels (host only, no CUDA calls).
#include "kernels/cuda/indexer/topk_plan.h"

#include <algorithm>
#include <cstdint>

namespace spar {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

TopKSplitPlan PlanTopKSplit(int64_t rows, int64_t num_cols, int sm_count, int forced_chunks) {
  TopKSplitPlan plan;
  num_cols = std::min<int64_t>(num_cols, kTopKMaxLen);
  // rows > 65535 would not fit the chunk kernels' grid.y; so many rows fill the GPU anyway.
  if (rows <= 0 || rows > 65535 || num_cols <= 0 || forced_chunks == 1) return plan;
  int64_t chunks = 0;
  if (forced_chunks >= 2) {
    chunks = std::min<int64_t>(forced_chunks, CeilDiv(num_cols, kTopKChunkAlign));
  } else {
    // One wave of chunk CTAs over all rows, chunks of at least kTopKMinChunk.
    // rows >= slots / 2 gives < 2 chunks: those rows fill the GPU already.
    const int64_t slots = static_cast<int64_t>(std::max(sm_count, 1)) * kTopKChunkCtasPerSm;
    chunks = std::min<int64_t>(slots / rows, num_cols / kTopKMinChunk);
  }
  if (chunks < 2) return plan;
  const int64_t chunk_len = CeilDiv(CeilDiv(num_cols, chunks), kTopKChunkAlign) * kTopKChunkAlign;
  chunks = CeilDiv(num_cols, chunk_len);  // rounding chunk_len up can leave the last chunk empty
  if (chunks < 2) return plan;
  plan.chunks = static_cast<int>(chunks);
  plan.chunk_len = chunk_len;
  plan.bitmap_words = chunks * chunk_len / 32;
  // The level-1 bucket of real-like logits holds a few percent of the row;
  // a quarter of the row is far above that and still bounded. A bucket above
  // the capacity (heavy ties, a narrow value range) makes K3 re-read the row.
  plan.candidate_cap = std::clamp<int64_t>(CeilDiv(num_cols, 4 * kTopKChunkAlign) * kTopKChunkAlign,
                                           kTopKMinCandidates, kTopKMaxCandidates);
  return plan;
}

TopKSplitLayout TopKSplitWorkspaceLayout(const TopKSplitPlan& plan, int64_t rows) {
  TopKSplitLayout l;
  if (!plan.split() || rows <= 0) return l;
  const size_t r = static_cast<size_t>(rows);
  l.row_hist = 0;
  l.chunk_hist = Align16(r * kTopKBins * 4);
  l.bitmap = l.chunk_hist + Align16(r * static_cast<size_t>(plan.chunks) * kTopKBins * 4);
  l.candidates = l.bitmap + Align16(r * static_cast<size_t>(plan.bitmap_words) * 4);
  l.total = l.candidates + Align16(r * static_cast<size_t>(plan.candidate_cap) * 8);
  return l;
}

}  // namespace spar
