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

// Samples one token from raw logits; `step` is the index of the token in the
// request's output. Greedy (temperature 0) is the argmax, ties to the lower id.
int32_t SampleToken(const float* logits, int vocab, const SamplingParams& p, const TokenHistory& history,
                    uint64_t step);

// log_softmax of raw logits at `token`, and the n most likely (id, logprob)
// pairs (ties to the lower id).
float TokenLogprob(const float* logits, int vocab, int32_t token);
std::vector<std::pair<int32_t, float>> TopLogprobs(const float* logits, int vocab, int n);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_SAMPLING_REF_H_
