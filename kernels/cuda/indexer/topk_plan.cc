// Work split of the top-k kernels (host only, no CUDA calls).
#include "kernels/cuda/indexer/topk_plan.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace spar {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

// Fitted to CUDA-graph replays on an H200 (132 SMs, bench/results/indexer.md,
// real-like rows). One CTA per row: ~20 us plus 0.40 us per 1024 positions,
// per wave of sm_count rows (each row is bound by one SM).
double TopKOneCtaMicros(int64_t rows, int64_t num_cols, int sm_count) {
  const int64_t waves = CeilDiv(std::max<int64_t>(rows, 1), std::max(sm_count, 1));
  return static_cast<double>(waves) * (20.0 + 0.40 * static_cast<double>(num_cols) / 1024.0);
}

// Split: ~26 us (four launches, three of them short) plus 4.0 us per
// million keys over 132 SMs, scaled to the device's SM count.
double TopKSplitMicros(int64_t rows, int64_t num_cols, int sm_count) {
  const double mkeys = static_cast<double>(rows) * static_cast<double>(num_cols) * 1e-6;
  return 26.0 + 4.0 * mkeys * 132.0 / static_cast<double>(std::max(sm_count, 1));
}

TopKSplitPlan PlanTopKSplit(int64_t rows, int64_t num_cols, int sm_count, int forced_chunks) {
  TopKSplitPlan plan;
  num_cols = std::min<int64_t>(num_cols, kTopKMaxLen);
  // rows > 65535 would not fit the chunk kernels' grid.y; so many rows fill the GPU anyway.
  if (rows <= 0 || rows > 65535 || num_cols <= 0 || forced_chunks == 1) return plan;
  int64_t chunks = 0;
  if (forced_chunks >= 2) {
    chunks = std::min<int64_t>(forced_chunks, CeilDiv(num_cols, kTopKChunkAlign));
  } else {
    if (num_cols <= kTopKGroupMinLen) return plan;  // the short-row path
    // The row-group path with the fewest keys per thread (the most chunks)
    // whose CTAs fit one per SM; rows up to kTopKShortMaxLen only with up to
    // 8 keys per thread (the short-row path's CTA beats a 16-key chunk's).
    for (int keys : kTopKGroupKeyOptions) {
      if (num_cols <= kTopKShortMaxLen && keys > 8) break;
      const TopKSplitPlan g = TopKGroupPlan(rows, num_cols, keys);
      if (g.group() && rows * g.chunks <= sm_count) return g;
    }
    if (num_cols <= kTopKShortMaxLen) return plan;  // the short-row path
    // Split only for a modelled gain of 10% or more, about the model's error:
    // 32 x 32K models 30.2 vs 33.1 us and measured 34.8 (8 chunks) vs 33.3.
    if (TopKSplitMicros(rows, num_cols, sm_count) >= 0.9 * TopKOneCtaMicros(rows, num_cols, sm_count)) return plan;
    // One wave of chunk CTAs over all rows, chunks of at least kTopKMinChunk,
    // at most kTopKMaxChunks per row (more only add K1/K2 CTAs: 8 x 128K ran
    // 29.6 us with 16 chunks, 33.7 with 32).
    const int64_t slots = static_cast<int64_t>(std::max(sm_count, 1)) * kTopKChunkCtasPerSm;
    chunks = std::min<int64_t>({slots / rows, num_cols / kTopKMinChunk, kTopKMaxChunks});
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

bool IsTopKGroupKeys(int keys_per_thread) {
  return std::find(std::begin(kTopKGroupKeyOptions), std::end(kTopKGroupKeyOptions), keys_per_thread) !=
         std::end(kTopKGroupKeyOptions);
}

TopKSplitPlan TopKGroupPlan(int64_t rows, int64_t num_cols, int keys_per_thread) {
  TopKSplitPlan plan;
  if (!IsTopKGroupKeys(keys_per_thread) || rows <= 0 || rows > 65535 || num_cols <= 0) return plan;
  const int64_t chunk_len = int64_t{keys_per_thread} * kTopKGroupThreads;
  const int64_t chunks = CeilDiv(std::min<int64_t>(num_cols, kTopKMaxLen), chunk_len);
  if (chunks > kTopKGroupMaxChunks) return plan;
  plan.chunks = static_cast<int>(chunks);
  plan.chunk_len = chunk_len;
  plan.group_keys = keys_per_thread;
  return plan;
}

TopKGroupLayout TopKGroupWorkspaceLayout(const TopKSplitPlan& plan, int64_t rows) {
  TopKGroupLayout l;
  if (!plan.group() || rows <= 0) return l;
  const size_t r = static_cast<size_t>(rows);
  l.arrived = 0;
  l.hists = Align16(r * 4);
  l.list = l.hists + Align16(r * kTopKGroupLevels * static_cast<size_t>(plan.chunks) * kTopKGroupBins * 4);
  l.total = l.list + Align16(r * kTopKGroupListCap * 8);
  return l;
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
