// Greedy generation requests for the engine tests that compare two engines'
// continuations (cuda vs cpu, tiled vs row-major weights, packed vs
// dequantized checkpoints): one request a prompt, temperature 0, a fixed
// length past any end-of-sequence token.
#ifndef SPAR_TESTS_ENGINE_GREEDY_REQUESTS_H_
#define SPAR_TESTS_ENGINE_GREEDY_REQUESTS_H_

#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace spar::testing {

inline std::vector<GenerationRequest> GreedyRequests(const std::vector<std::vector<int32_t>>& prompts,
                                                     int max_tokens) {
  std::vector<GenerationRequest> reqs;
  for (const auto& ids : prompts) {
    GenerationRequest r;
    r.prompt = ids;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_GREEDY_REQUESTS_H_
