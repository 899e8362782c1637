// Token sampling on the GPU, choosing the same token as ref::SampleToken
// (kernels/ref/sampling_ref.h) for the same logits, parameters, history,
// step and token mask: the mask (-inf for disallowed ids), penalties (repetition over prompt and output, frequency, presence),
// greedy (temperature 0 or top_k 1: argmax, ties to the lower id), else
// temperature, top-k, top-p, min-p and an inverse-CDF walk in ascending id
// order over the kept tokens with u = CounterUniform(seed, 0, step) · total.
// Logprobs are those of the raw logits after the mask (ref::TokenLogprob,
// ref::TopLogprobs of the masked row).
//
// Exactness: the kept set and the token are the reference's; the only
// possible differences are when a cumulative probability lands within
// ~1e-13 of a top-p or inverse-CDF boundary (sums are exact 2^-60
// fixed-point integers here, sequential doubles in the reference). Results
// are deterministic: no floating-point atomics.
#ifndef SPAR_KERNELS_CUDA_SAMPLING_SAMPLING_H_
#define SPAR_KERNELS_CUDA_SAMPLING_SAMPLING_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "base/sampling_params.h"

namespace spar {

// Per-row parameters (device array): the sequence's sampling parameters as
// every layer holds them (base/sampling_params.h; temperature <= 0 greedy,
// top_k <= 0 / top_p >= 1 / min_p <= 0 off) plus the request's output step.
struct SamplingRowParams {
  SamplingParams sampling;
  uint64_t step = 0;
};

inline constexpr int kMaxTopLogprobs = 20;

struct SampleParams {
  const float* logits = nullptr;  // [rows, vocab] at logits_stride (elements)
  int64_t logits_stride = 0;
  int rows = 0;
  int vocab = 0;
  const SamplingRowParams* params = nullptr;  // [rows]
  // Token history for the penalties, CSR by row, ids unique within a row:
  // entries [offsets[r], offsets[r+1]) of ids / prompt_counts /
  // output_counts (a count > 0 means "seen there"). offsets may be null.
  const int32_t* history_offsets = nullptr;
  const int32_t* history_ids = nullptr;
  const int32_t* history_prompt_counts = nullptr;
  const int32_t* history_output_counts = nullptr;
  // Constrained decoding: [rows, token_mask_stride] uint32 bitsets; id i
  // of row r is allowed when bit i % 32 of word r * token_mask_stride +
  // i / 32 is set. Null: no mask. Masked ids get -inf before everything
  // else (logprobs included); a row whose mask allows no id with a finite
  // logit is sampled unmasked (ref::ApplyTokenMask).
  const uint32_t* token_mask = nullptr;
  int64_t token_mask_stride = 0;  // words per row, >= ceil(vocab / 32)
  void* workspace = nullptr;  // SampleWorkspaceBytes(rows, vocab), 16-byte aligned
  size_t workspace_bytes = 0;
  int32_t* tokens = nullptr;          // [rows]
  float* token_logprobs = nullptr;    // [rows], optional
  int top_logprobs = 0;               // 0..kMaxTopLogprobs
  int32_t* top_logprob_ids = nullptr;    // [rows, top_logprobs]
  float* top_logprob_values = nullptr;   // [rows, top_logprobs]
};

size_t SampleWorkspaceBytes(int rows, int vocab);

absl::Status LaunchSample(const SampleParams& params, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_SAMPLING_SAMPLING_H_
