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
// 16K: measured on the H200 (graph replays, real-like rows, 2026-12-01),
// 1 x 8K takes 11.2 us on it against 27.8 one CTA; 1 x 32K 32.2 us, no
// faster than one CTA (32.9) and slower than the split (27.3).
inline constexpr int kTopKShortMaxLen = 16384;
// Rows longer than this take the row-group path when its CTAs fit one per
// SM (PlanTopKSplit). Measured on the H200 (graph replays, real-like rows,
// `indexer_bench topkmid`, 2026-12-04, after the short-row kernel lost a
// third of its instructions): the short path's 12 keys a thread beat the
// row group up to 12K (1 x 8193 9.4 vs 11.3 us, 1 x 10240 9.9 vs 10.7,
// 8 x 8193 10.8 vs 11.6), its 16 lose past it (1 x 12289 12.8 vs 11.4,
// 1 x 16K 13.8 vs 9.9, 8 x 12289 12.8 vs 12.1).
inline constexpr int kTopKGroupMinLen = 12288;

// The row-group path (topk_group.cu): each row is cut into `chunks` chunks
// of group_keys x kTopKGroupThreads positions, one CTA each holding its
// chunk's keys in registers, all CTAs of all rows resident at once (one
// cooperative launch). The CTAs of a row run the short-row path's radix
// select (8-bit digits, 256 bins) together: at each level every CTA
// publishes its chunk's histogram in the workspace and waits at the row's
// barrier, then each sums the row's histograms itself; once the chosen
// bucket holds at most kTopKGroupListCap keys they are listed in the
// workspace and every CTA ranks the list. Each CTA then writes its chunk's
// selected positions at the offset the earlier chunks' counts give. A row
// is read once, by `chunks` SMs, in one launch (the split path: three
// launches and a memset, two reads).
inline constexpr int kTopKGroupThreads = 512;  // two CTAs per SM fit the registers (<= 64 each)
inline constexpr int kTopKGroupLevels = 4;     // 8-bit digits, top first
inline constexpr int kTopKGroupBins = 256;
inline constexpr int kTopKGroupListCap = 256;  // bucket size the CTAs rank as one list
inline constexpr int kTopKGroupMaxChunks = 32;
inline constexpr int kTopKGroupKeyOptions[] = {4, 8, 16};  // keys per thread (instantiated)

struct TopKSplitPlan {
  int chunks = 1;              // <= 1: the one-CTA path
  int64_t chunk_len = 0;       // positions per chunk, a multiple of kTopKChunkAlign
  int64_t candidate_cap = 0;   // (key, position) pairs each row's list holds (split path)
  int64_t bitmap_words = 0;    // per row: chunks * chunk_len / 32 (split path)
  int group_keys = 0;          // > 0: the row-group path, this many keys per thread
  bool split() const { return chunks > 1 && group_keys == 0; }
  bool group() const { return group_keys > 0; }
};

// The row-group plan of rows x num_cols with keys_per_thread keys per
// thread (one of kTopKGroupKeyOptions): chunks of keys_per_thread x
// kTopKGroupThreads positions. A plan with group() false when the options,
// the row count (grid.y) or kTopKGroupMaxChunks do not allow it. Whether
// its rows x chunks CTAs fit the device at once is the launcher's check.
TopKSplitPlan TopKGroupPlan(int64_t rows, int64_t num_cols, int keys_per_thread);
// Whether keys_per_thread is one of kTopKGroupKeyOptions (an instantiated kernel).
bool IsTopKGroupKeys(int keys_per_thread);

// Modelled µs of the one-CTA path and of the split path (graph replays,
// launch overhead excluded); PlanTopKSplit splits when the second is at
// least 10% lower.
double TopKOneCtaMicros(int64_t rows, int64_t num_cols, int sm_count);
double TopKSplitMicros(int64_t rows, int64_t num_cols, int sm_count);

// rows × num_cols on a device with sm_count SMs. forced_chunks: 0 chooses
// (rows of at most kTopKGroupMinLen: the short-row path; longer rows: the
// row-group path when rows x chunks fit one CTA per SM, else rows up to
// kTopKShortMaxLen the short-row path and longer ones the split or the
// one-CTA path by the time model); 1 forces the one-CTA path; >= 2 asks for
// that many split chunks (tests, tuning; clamped so that each chunk keeps at
// least kTopKChunkAlign positions).
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

// Byte offsets of the row-group path's workspace (16-byte aligned pieces):
//   arrived: [rows] u32 barrier counters (the launcher zeroes them on the stream
//            unless TopKParams::row_counters are used)
//   hists:   [rows][kTopKGroupLevels][chunks][kTopKGroupBins] u32 chunk histograms
//   list:    [rows][kTopKGroupListCap] (key, position) u32 pairs
struct TopKGroupLayout {
  size_t arrived = 0, hists = 0, list = 0, total = 0;
};
TopKGroupLayout TopKGroupWorkspaceLayout(const TopKSplitPlan& plan, int64_t rows);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_PLAN_H_
