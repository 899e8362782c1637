// Sparse MLA attention on sm80 in the absorbed (latent) form, for prefill and
// decode alike (dsa-spec.md §2.4, §2.6; reference: kernels/ref/sparse_mla_ref.h).
//
// Per query token t and head h:  q = [q_latent 512 ‖ rotated q_pe 64] (576),
// keys = the latent cache rows named by t's index list (576 each), values =
// the first 512 lanes of the same rows:
//   out[t, h] = softmax(scale · q·K[idx]ᵀ) · K[idx][:, :512]       (bf16)
//   lse[t, h] = ln Σ exp(scale · q·k)                                 (fp32)
// Index entries < 0 or >= num_slots are skipped, duplicates count as often as
// they occur; a row with no valid entry gives out = 0 and lse = +inf.
// Numerics: bf16 operands on mma.sync with fp32 accumulation, probabilities
// rounded to bf16 (bf16 rows: the normaliser sums the rounded values). FP8
// rows: the e4m3 codes widen to bf16 exactly, each 128-column partial score
// is multiplied by the key's fp32 scale, and P·V rounds p times the key's
// scale to bf16 once per 128-column block of V (the normaliser sums p).
//
// A CTA takes one token, a tile of 16/32/64 heads (8/16 with FP8 rows: a
// kernel of its own for the decode shapes of tensor parallelism, where few
// heads share each gathered row) and a range of the index list. Small
// batches split the index list over several CTAs and a
// second kernel merges the partial results by log-sum-exp, so batch 1 still
// fills the GPU. The dense fast path (context <= index_topk) is the same
// kernel reading positions 0..kv_len-1 through the block table instead of an
// index list, so its result is bit-identical to the sparse path fed the same
// slots in ascending order with the same list length.
#ifndef SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_H_
#define SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/cache_ref.h"

namespace spar {

// How the work is cut; a pure function of the shapes and the GPU size, so a
// decode step captured in a CUDA graph always gets the same plan.
struct SparseMlaPlan {
  int head_tile = 0;       // heads per CTA: 16, 32 or 64; 8 with FP8 rows
  int num_splits = 0;      // CTAs per (token, head tile) along the index list
  int keys_per_split = 0;  // index-list entries per split, a multiple of 32
};

// list_len: entries per token's index list (dense mode: the longest kv_len).
// num_sms / smem_per_sm: the GPU's multiprocessor count and shared memory per
// multiprocessor (bytes), which fix how many CTAs run at once.
SparseMlaPlan PlanSparseMla(int64_t tokens, int heads, int list_len, int num_sms, int smem_per_sm, bool fp8);

// The split PlanSparseMla gives a head tile it has chosen; also how a bench
// or test times a tile the planner did not choose (16, 32, 64; 8 with FP8
// rows) as the planner would cut it.
SparseMlaPlan PlanSparseMlaSplits(int64_t tokens, int heads, int head_tile, int list_len, int num_sms, int smem_per_sm,
                                  bool fp8);

// CTAs of one head-tile variant resident per multiprocessor (by shared memory).
int SparseMlaCtasPerSm(int head_tile, bool fp8, int smem_per_sm);

// Device scratch the plan needs (0 when num_splits == 1): partial outputs and
// log-sum-exps of every split, fp32.
size_t SparseMlaWorkspaceBytes(const SparseMlaPlan& plan, int64_t tokens, int heads);

// The plan LaunchSparseMla would pick on the current device (queries the SM
// count and the occupancy of the kernel the head count selects); head_tile
// > 0: that tile, split as PlanSparseMlaSplits cuts it.
absl::Status PlanSparseMlaForDevice(int64_t tokens, int heads, int list_len, LatentFormat format,
                                    SparseMlaPlan* plan, int head_tile = 0);

struct SparseMlaParams {
  // Queries [tokens, heads, 576] bf16; element (t, h, d) at
  // q[t * q_token_stride + h * q_head_stride + d]. Strides multiples of 8.
  const __nv_bfloat16* q = nullptr;
  int64_t tokens = 0;
  int heads = 0;
  int64_t q_token_stride = 0;
  int64_t q_head_stride = 0;

  // Latent cache: slot s at cache + s * LatentRowBytes(format); kBF16 or kFp8Ds.
  LatentFormat format = LatentFormat::kBF16;
  const uint8_t* cache = nullptr;
  int64_t num_slots = 0;

  // Sparse mode: indices[t * indices_stride + j], j < list_len, cache slots.
  const int32_t* indices = nullptr;
  int64_t indices_stride = 0;
  int list_len = 0;

  // Dense mode (indices == nullptr): entry j of token t is position j when
  // j < kv_lens[t] (else skipped), at slot
  //   block_table[token_seq[t] * block_table_stride + j / 64] * 64 + j % 64.
  // list_len must be >= every kv_lens[t] (entries past list_len are not read).
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  const int32_t* token_seq = nullptr;  // [tokens]
  const int32_t* kv_lens = nullptr;    // [tokens]

  float scale = 0.0f;  // softmax scale (0.0625 GLM-5, 0.135234 DeepSeek-V3.2)

  // Outputs: out[t * out_token_stride + h * out_head_stride + d], d < 512,
  // strides multiples of 4, out 8-byte aligned; lse [tokens, heads] fp32, may
  // be null.
  __nv_bfloat16* out = nullptr;
  int64_t out_token_stride = 0;
  int64_t out_head_stride = 0;
  float* lse = nullptr;

  // Scratch of SparseMlaWorkspaceBytes(plan) bytes, 16-byte aligned; may be
  // null when the plan has one split.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // All zero: PlanSparseMlaForDevice. Tests force splits/head tiles here.
  SparseMlaPlan plan;

  // Leave a split plan's partials in the workspace for a consumer that
  // merges them itself (LaunchMlaMergeUnabsorb, absorb_gemm.h) instead of
  // running the merge kernel: out and lse are then not written (out may be
  // null, lse must be). Needs plan.num_splits > 1.
  bool defer_merge = false;
};

// Where a split plan's partial outputs and log-sum-exps sit in `workspace`
// (the layout MlaSplitPartials describes).
struct SparseMlaPartialsView {
  float* o = nullptr;
  float* lse = nullptr;
};
SparseMlaPartialsView SparseMlaPartials(const SparseMlaPlan& plan, int64_t tokens, int heads, void* workspace);

bool SparseMlaSupported(int heads, LatentFormat format);

absl::Status LaunchSparseMla(const SparseMlaParams& params, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_ATTENTION_SPARSE_MLA_H_
