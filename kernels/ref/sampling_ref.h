// Token sampling with per-request seeds. The random draw is counter-based
// (seed, step) so that any backend, on any batch composition, picks the same
// token from the same distribution.
#ifndef SPAR_KERNELS_REF_SAMPLING_REF_H_
#define SPAR_KERNELS_REF_SAMPLING_REF_H_

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spar::ref {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;  // over prompt and output tokens
  float frequency_penalty = 0.0f;   // over output tokens, per occurrence
  float presence_penalty = 0.0f;    // over output tokens, once
  uint64_t seed = 0;
};

// Token counts the penalties look at.
struct TokenHistory {
  std::unordered_map<int32_t, int> prompt_counts;
  std::unordered_map<int32_t, int> output_counts;
};

// Applies penalties in place (vLLM/OpenAI semantics).
void ApplyPenalties(float* logits, int vocab, const SamplingParams& p, const TokenHistory& history);

// A token mask (constrained decoding): a bitset of ceil(vocab / 32) words,
// id i allowed when bit i % 32 of word i / 32 is set. Masked ids' logits
// become -inf before anything else (penalties, temperature, top-k/p,
// logprobs). A mask that allows no id of the vocabulary is ignored, so a
// row always has a choice.
bool MaskAllowsAny(const uint32_t* mask, int vocab);
void ApplyTokenMask(float* logits, int vocab, const uint32_t* mask);

// Samples one token from raw logits; `step` is the index of the token in the
// request's output. Greedy (temperature 0) is the argmax, ties to the lower id.
// `mask` (may be null) restricts the choice as above.
int32_t SampleToken(const float* logits, int vocab, const SamplingParams& p, const TokenHistory& history,
                    uint64_t step, const uint32_t* mask = nullptr);

// log_softmax of raw logits at `token`, and the n most likely (id, logprob)
// pairs (ties to the lower id).
float TokenLogprob(const float* logits, int vocab, int32_t token);
std::vector<std::pair<int32_t, float>> TopLogprobs(const float* logits, int vocab, int n);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_SAMPLING_REF_H_
