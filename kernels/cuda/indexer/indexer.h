// Lightning-indexer kernels for sm80 (dsa-spec.md §2.5, §4.2; DESIGN.md §3-§4):
//
//   1. LaunchIndexerKeyWrite     k = LayerNorm(x_k) -> RoPE(first 64 dims) -> [Hadamard] -> paged cache
//                                (FP8 e4m3 + one fp32 scale per token, or bf16); also fused with the
//                                layer's q_a RMSNorm in one launch (LaunchRmsNormAndIndexerKeyWrite)
//   2. LaunchIndexerQueryPrep    q: RoPE(first 64 dims of every head) -> [Hadamard]; w = weights · scale
//   3. LaunchIndexerGather       paged cache -> contiguous keys (+ scales) for the ragged prefill kernel
//   4. LaunchIndexerLogits       ragged prefill: I[t, s] = Σ_h w[t,h]·relu(q[t,h]·k[s])·k_scale[s], s ∈ [ks, ke)
//   5. LaunchIndexerLogitsPaged  decode: the same through block tables, next_n ≥ 1 query rows per sequence
//   6. LaunchTopK                row-wise exact top-k (k ≤ 2048) with the tie rule of ref::TopK
//                                (one CTA per row, or several per row for few long rows)
//
// Semantics are those of kernels/ref/indexer_ref.h, kernels/ref/topk_ref.h and
// the cache layout of kernels/ref/cache_ref.h (64-token pages; FP8 page =
// 64×128 e4m3 values, then 64 fp32 scales; BF16 page = 64×128 bf16).
//
// Numerics: q and keys meet in bf16 mma.sync with fp32 accumulation (sm80 has
// no FP8 MMA; e4m3 keys are widened to bf16 in registers, which is exact).
// bf16 tensors are __nv_bfloat16, as in every kernel family. All launchers validate their params (InvalidArgument naming the field),
// never synchronize, and return CUDA errors as statuses. Thread-compatible:
// no global state besides a per-device SM-count cache.
#ifndef SPAR_KERNELS_CUDA_INDEXER_INDEXER_H_
#define SPAR_KERNELS_CUDA_INDEXER_INDEXER_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/rope_ref.h"

namespace spar {

struct TopKSplitPlan;  // topk_plan.h

inline constexpr int kIndexerRopeDim = 64;    // RoPE acts on dims [0, 64) of the 128 (rope first)
inline constexpr int kIndexerMaxTopK = 2048;  // largest k LaunchTopK accepts

// RoPE angle tables shared by the key and query kernels: row p holds
// cos/sin(p · inv_freq[i]) for i < 32, as ref::RopeCosSin computes them
// (YaRN tables included: they are built on the host).
struct IndexerRope {
  const float* cos = nullptr;  // [rows, 32]
  const float* sin = nullptr;  // [rows, 32]
  int64_t rows = 0;            // every position must be < rows (not checked on the device)
  ref::RopePairs pairs = ref::RopePairs::kInterleaved;  // GLM-5: interleaved; DeepSeek-V3.2: half-split
};

// ---------------------------------------------------------------------------
// 1. Key write. One token per warp: LayerNorm (weight + bias, fp32 math),
// RoPE, optional 128-point Hadamard (Sylvester order, scale 128^-0.5), then
// FP8 (scale = max(amax, 1e-4) / 448, e4m3 round-to-nearest-even exactly as
// spar::FloatToE4m3) or bf16 into the page slot given by `slots`.
struct IndexerKeyWriteParams {
  int64_t tokens = 0;
  const __nv_bfloat16* x = nullptr;  // [tokens, x_stride]: the wk projection output (128 used columns)
  int64_t x_stride = 128;       // elements between tokens
  const float* norm_weight = nullptr;  // [128]
  const float* norm_bias = nullptr;    // [128]
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [tokens] rope positions
  IndexerRope rope;
  bool hadamard = false;
  const int32_t* slots = nullptr;  // [tokens] block * 64 + offset; negative = skip the token (padding)
  IndexerFormat format = IndexerFormat::kFp8;  // kFp8 or kBF16
  uint8_t* cache = nullptr;  // page b at cache + b * IndexerPageBytes(format)
};
bool IndexerKeyWriteSupported(const IndexerKeyWriteParams& p);
absl::Status LaunchIndexerKeyWrite(const IndexerKeyWriteParams& p, cudaStream_t stream);
// The same key write and an RMSNorm without residual (the layer's q_a norm:
// both read columns of the fused A projection) in one launch; the norm's
// output and the cache bytes equal those of LaunchRmsNorm and
// LaunchIndexerKeyWrite. Either part may be empty (rows / tokens 0).
absl::Status LaunchRmsNormAndIndexerKeyWrite(const RmsNormParams& norm, const IndexerKeyWriteParams& key,
                                             cudaStream_t stream);

// ---------------------------------------------------------------------------
// 2. Query preparation: RoPE on dims [0, 64) of every head (+ optional
// Hadamard), bf16 in and out (q_out may alias q), and the head weights
// w_out[t, h] = w_in[t, h] · weight_scale (weight_scale = heads^-0.5 · 128^-0.5).
struct IndexerQueryPrepParams {
  int64_t tokens = 0;
  int heads = 0;
  const __nv_bfloat16* q = nullptr;  // [tokens, q_stride], head h at columns [128h, 128h + 128)
  int64_t q_stride = 0;         // elements between tokens (>= heads * 128)
  __nv_bfloat16* q_out = nullptr;    // [tokens, q_out_stride] (may equal q)
  int64_t q_out_stride = 0;
  const int32_t* positions = nullptr;  // [tokens]
  IndexerRope rope;
  bool hadamard = false;
  // Exactly one of w_in_f32 / w_in_bf16: [tokens, w_in_stride].
  const float* w_in_f32 = nullptr;
  const __nv_bfloat16* w_in_bf16 = nullptr;
  int64_t w_in_stride = 0;
  float weight_scale = 1.0f;
  float* w_out = nullptr;  // [tokens, heads] fp32, contiguous
};
bool IndexerQueryPrepSupported(const IndexerQueryPrepParams& p);
absl::Status LaunchIndexerQueryPrep(const IndexerQueryPrepParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------
// 3. Gather: keys [0, seq_lens[b]) of sequence b to rows [out_offsets[b], +seq_lens[b])
// of a contiguous key array (the layout LaunchIndexerLogits reads).
struct IndexerGatherParams {
  int num_seqs = 0;
  const int32_t* seq_lens = nullptr;     // [num_seqs]
  const int32_t* out_offsets = nullptr;  // [num_seqs] first output row of each sequence
  int max_seq_len = 0;                   // >= every seq_lens[b] (sizes the grid)
  const int32_t* block_table = nullptr;  // [num_seqs, block_table_stride]
  int64_t block_table_stride = 0;
  IndexerFormat format = IndexerFormat::kFp8;
  const uint8_t* cache = nullptr;
  void* keys = nullptr;      // kFp8: [N, 128] e4m3 bytes; kBF16: [N, 128] bf16
  float* k_scale = nullptr;  // kFp8: [N]; kBF16: unused
};
absl::Status LaunchIndexerGather(const IndexerGatherParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------
// 4. Ragged prefill logits over contiguous keys (ref::IndexerLogits):
//   logits[t, s] = Σ_h w[t,h] · relu(q[t,h,:] · k[s,:]) · k_scale[s]   for ks[t] <= s < ke[t]
// The head reduction happens in registers: [rows × heads × keys] never
// touches memory. With fill_masked the other s < num_keys are written -inf
// (ref semantics); without it they are left untouched (top-k reads only
// [ks, ke)).
struct IndexerLogitsParams {
  int64_t rows = 0;
  int heads = 0;                // 32 (GLM-5) or 64 (DeepSeek-V3.2)
  const __nv_bfloat16* q = nullptr;  // [rows, q_stride], roped; head h at columns [128h, 128h + 128)
  int64_t q_stride = 0;
  const float* w = nullptr;  // [rows, w_stride]: weights with heads^-0.5 · 128^-0.5 (and any q scale) folded in
  int64_t w_stride = 0;
  IndexerFormat format = IndexerFormat::kFp8;  // kFp8: e4m3 keys + k_scale; kBF16: bf16 keys
  const void* keys = nullptr;      // [num_keys, 128]
  const float* k_scale = nullptr;  // [num_keys] for kFp8, nullptr for kBF16
  int64_t num_keys = 0;
  const int32_t* ks = nullptr;  // [rows] first key of row t
  const int32_t* ke = nullptr;  // [rows] one past the last key (ke <= num_keys)
  float* logits = nullptr;      // [rows, logits_stride] fp32
  int64_t logits_stride = 0;    // >= num_keys
  bool fill_masked = false;
};
bool IndexerLogitsSupported(const IndexerLogitsParams& p);
absl::Status LaunchIndexerLogits(const IndexerLogitsParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------
// 5. Paged decode logits (ref::IndexerLogitsPaged): row r = b * next_n + j is
// query token j of sequence b; it scores keys [0, context_lens[r]) of
// sequence b's pages (for MTP, context_lens[r] = seq_len - next_n + j + 1).
// All next_n × heads query rows of a sequence share every key load.
// fill_tail writes -inf to [context_lens[r], logits_stride) (ref semantics);
// otherwise those entries are left untouched.
struct IndexerLogitsPagedParams {
  int num_seqs = 0;
  int next_n = 1;
  int heads = 0;                // 32 or 64; next_n * heads <= 256
  const __nv_bfloat16* q = nullptr;  // [num_seqs * next_n, q_stride], roped
  int64_t q_stride = 0;
  const float* w = nullptr;  // [num_seqs * next_n, w_stride]
  int64_t w_stride = 0;
  const int32_t* context_lens = nullptr;  // [num_seqs * next_n]
  int max_context_len = 0;                // >= every context_lens[r] (sizes the grid)
  const int32_t* block_table = nullptr;   // [num_seqs, block_table_stride]
  int64_t block_table_stride = 0;
  IndexerFormat format = IndexerFormat::kFp8;  // kFp8 or kBF16
  const uint8_t* cache = nullptr;
  float* logits = nullptr;  // [num_seqs * next_n, logits_stride]
  int64_t logits_stride = 0;  // >= max_context_len
  bool fill_tail = false;
  int pages_per_cta = 0;  // 0: the launcher splits sequences; 1..512 forces the split (tests, tuning)

  // The query prep in this launch (decode: one launch fewer on the indexer's
  // branch). With prep_positions set, q is the wq_b output before RoPE and
  // the weights come raw as w_bf16 [rows, w_stride] (w unused): every CTA
  // does what LaunchIndexerQueryPrep does (RoPE at prep_positions[row], the
  // Hadamard when prep_hadamard, w · weight_scale) with the same device code,
  // so the logits equal prep-then-logits bit for bit. Needs next_n * heads
  // <= IndexerLogitsPagedPrepMaxRows(format) (the query tile is staged in a
  // pipeline slot that is free until the key loop starts).
  const int32_t* prep_positions = nullptr;  // [num_seqs * next_n]
  IndexerRope prep_rope;
  bool prep_hadamard = false;
  const __nv_bfloat16* w_bf16 = nullptr;
  float weight_scale = 1.0f;
};
int IndexerLogitsPagedPrepMaxRows(IndexerFormat format);
bool IndexerLogitsPagedSupported(const IndexerLogitsPagedParams& p);
absl::Status LaunchIndexerLogitsPaged(const IndexerLogitsPagedParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------
// 6. Top-k per row (ref::TopK on logits[r, start, start + len)): the k
// largest values, -inf and NaN never picked, ties to the lower position;
// positions (relative to start) written in ascending order, -1 after the
// last selected one. Exact radix select on the fp32 bit patterns (no coarse
// keys); rows up to 262144 (2^18) entries (row_len values are clamped to
// num_cols). With block_table set, position p of row r is written as the
// cache slot block_table[seq][p / 64] * 64 + p % 64, seq = token_seq[r]
// when token_seq is set, else r / rows_per_seq.
//
// Rows of at most kTopKShortMaxLen (16384) positions take a path sized by the
// row (one CTA each, keys in registers, no workspace). Few long rows (decode
// at long contexts) are cut into chunks that several CTAs read at once
// (topk_plan.h: PlanTopKSplit); that path needs a device workspace of
// TopKWorkspaceBytes(params) bytes (0 when the plan keeps one CTA per row).
// Without a workspace every row takes the one-CTA path (same results,
// slower for few rows). No host sync and no allocation inside: capturable
// in CUDA graphs as long as the workspace outlives the replay.
struct TopKParams {
  int64_t rows = 0;
  int k = 0;                      // 1 .. 2048
  const float* logits = nullptr;  // [rows, logits_stride]
  int64_t logits_stride = 0;
  const int32_t* row_start = nullptr;  // [rows] or nullptr (0)
  const int32_t* row_len = nullptr;    // [rows] or nullptr (num_cols)
  int64_t num_cols = 0;                // longest row; <= 262144
  int32_t* out = nullptr;              // [rows, out_stride]
  int64_t out_stride = 0;              // >= k
  const int32_t* block_table = nullptr;  // optional [sequences, block_table_stride]
  int64_t block_table_stride = 0;
  const int32_t* token_seq = nullptr;  // optional [rows]: each row's sequence (its block table row)
  int rows_per_seq = 1;                // without token_seq: row r is sequence r / rows_per_seq
  void* workspace = nullptr;  // 16-byte aligned, >= TopKWorkspaceBytes(*this) bytes, or nullptr
  size_t workspace_bytes = 0;
  // 0: the launcher chooses (short rows, one CTA per long row, or split);
  // 1: the long-row one-CTA path; >= 2: that many chunks (tests, tuning).
  int split_chunks = 0;
  // PlanTopKSplit(rows, num_cols, SM count, split_chunks) computed once by the
  // caller (the cuda backend plans each step once, not every layer); null:
  // planned here from the current device's SM count.
  const TopKSplitPlan* plan = nullptr;
  // The row-group kernel's barrier counters, one a row (kTopKMaxRowCounters
  // at most): zero before the launch and left zero by it, so a caller that
  // keeps them between launches (the cuda backend) saves the memset that
  // zeroes the workspace's on the stream (a graph node on the decode step's
  // critical path). Null: the workspace's.
  uint32_t* row_counters = nullptr;
  int64_t row_counters_capacity = 0;
};
inline constexpr int64_t kTopKMaxRowCounters = 1024;
bool TopKSupported(const TopKParams& p);
// Workspace the split path needs for these params on the current device
// (0: one CTA per row). Depends on rows, num_cols, split_chunks and the SM count.
size_t TopKWorkspaceBytes(const TopKParams& p);
absl::Status LaunchTopK(const TopKParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------
// 7. Index lists as cache slots (slots.cu; the top-k writes slots itself,
// section 6): token t's list idx[t][0, k) holds slots of its sequence
// token_seq[t], whose pages are block_table[token_seq[t]][0, block_table_stride).
// The list of a context that fits in k (no scoring): entry j is the slot of
// position j for j < kv_len[t], ascending, else -1.
absl::Status LaunchDenseSlots(int32_t* idx, int64_t tokens, int k, const int32_t* kv_len, const int32_t* token_seq,
                              const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_INDEXER_INDEXER_H_
