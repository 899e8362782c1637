// Token sampling with per-request seeds (the parameters and the token
// history: base/sampling_params.h). The random draw is counter-based
// (seed, step) so that any backend, on any batch composition, picks the same
// token from the same distribution.
#ifndef SPAR_KERNELS_REF_SAMPLING_REF_H_
#define SPAR_KERNELS_REF_SAMPLING_REF_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "base/sampling_params.h"

namespace spar::ref {

// Applies penalties in place (vLLM/OpenAI semantics).
void ApplyPenalties(float* logits, int vocab, const SamplingParams& p, const TokenHistory& history);

// A token mask (constrained decoding): a bitset of ceil(vocab / 32) words,
// id i allowed when bit i % 32 of word i / 32 is set. Masked ids' logits
// become -inf before anything else (penalties, temperature, top-k/p,
// logprobs). A mask that allows no id with a finite logit (no id of the
// vocabulary at all, or only ids whose logits are already -inf) is ignored,
// so a row always has a choice and its logprobs stay defined.
bool MaskAllowsAFiniteLogit(const float* logits, int vocab, const uint32_t* mask);
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
