// Work split of the top-k kernels (host only, no CUDA calls): whether a row
// is handled by one CTA or cut into chunks that several CTAs read at once,
// and the layout of the split path's workspace. Rows of at most
// kTopKShortMaxLen positions take a third path, one CTA each with
// everything sized by the row (topk_short.cu), whatever their number.
//
// Why split: the one-CTA path puts a whole row on one SM, so a few long rows
// (decode: 1-64 sequences of 32K-200K keys) leave most SMs idle and are bound
// by one SM's bandwidth. The split path runs three kernels over a row cut
// into `chunks` pieces of `chunk_len` positions:
//   K1 per chunk: level-1 digit histogram (bits [31:21]), stored per chunk
//      and added into the row's global histogram;
//   K2 per chunk: finds the level-1 bucket from the row histogram, writes the
//      chunk's words of the row's "surely selected" bitmap (positions above
//      the bucket; each word is written by the one CTA that owns it, so no
//      atomics and no zeroing) and, when the bucket fits the row's candidate
//      list, its (key, position) pairs at the chunk's own offset in it (the
//      bucket's counts in the chunks before it: no global counter);
//   K3 per row: the lower digits on the candidates (or on the row again when
//      the bucket overflowed the list: heavy ties), then the ascending
//      positions, exactly as the one-CTA path ends.
// The planner splits when its time model (fitted to H200 measurements, SM
// count scaled) says the split is faster: few long rows. Many rows (prefill,
// large decode batches of 32K rows) keep one CTA per row and need no
// workspace.
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_PLAN_H_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_PLAN_H_

#include <cstddef>
#include <cstdint>

namespace spar {

inline constexpr int kTopKBins = 2048;              // level-1 digit values (bits [31:21])
inline constexpr int kTopKMaxLen = 1 << 18;         // longest row either path handles
inline constexpr int kTopKChunkAlign = 1024;        // chunk_len granularity: whole bitmap words, float4 aligned
inline constexpr int kTopKMinChunk = 2048;          // below this a chunk CTA's fixed cost dominates
inline constexpr int kTopKChunkCtasPerSm = 2;       // 512-thread chunk CTAs resident per SM (registers)
inline constexpr int kTopKMaxChunks = 16;           // per row, when the planner chooses
inline constexpr int kTopKMinCandidates = 4096;     // candidate-list capacity bounds per row
inline constexpr int kTopKMaxCandidates = 32768;
// Rows of at most this many positions take the short-row path (topk_short.cu:
// keys in registers, histograms and scans sized by the row), unless a chunk
// count is forced.
inline constexpr int kTopKShortMaxLen = 32768;

struct TopKSplitPlan {
  int chunks = 1;              // <= 1: the one-CTA path
  int64_t chunk_len = 0;       // positions per chunk, a multiple of kTopKChunkAlign
  int64_t candidate_cap = 0;   // (key, position) pairs each row's list holds
  int64_t bitmap_words = 0;    // per row: chunks * chunk_len / 32
  bool split() const { return chunks > 1; }
};

// Modelled µs of the one-CTA path and of the split path (graph replays,
// launch overhead excluded); PlanTopKSplit splits when the second is at
// least 10% lower.
double TopKOneCtaMicros(int64_t rows, int64_t num_cols, int sm_count);
double TopKSplitMicros(int64_t rows, int64_t num_cols, int sm_count);

// rows × num_cols on a device with sm_count SMs. forced_chunks: 0 chooses
// (never a split for rows of at most kTopKShortMaxLen: the short-row path
// beats it); 1 forces the one-CTA path; >= 2 asks for that many chunks
// (tests, tuning; clamped so that each chunk keeps at least kTopKChunkAlign
// positions).
TopKSplitPlan PlanTopKSplit(int64_t rows, int64_t num_cols, int sm_count, int forced_chunks = 0);

// Byte offsets of the split path's workspace (16-byte aligned pieces):
//   row_hist:   [rows][kTopKBins] u32 (the launcher zeroes it on the stream)
//   chunk_hist: [rows][chunks][kTopKBins] u32
//   bitmap:     [rows][bitmap_words] u32
//   candidates: [rows][candidate_cap] (key, position) u32 pairs
struct TopKSplitLayout {
  size_t row_hist = 0, chunk_hist = 0, bitmap = 0, candidates = 0, total = 0;
};
TopKSplitLayout TopKSplitWorkspaceLayout(const TopKSplitPlan& plan, int64_t rows);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_PLAN_H_
