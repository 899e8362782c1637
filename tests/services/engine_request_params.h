// The scheduler's GenerateParams for an in-process engine request, for the
// tests that compare the scheduler's outputs with the engine's.
#ifndef SPAR_TESTS_SERVICES_ENGINE_REQUEST_PARAMS_H_
#define SPAR_TESTS_SERVICES_ENGINE_REQUEST_PARAMS_H_

#include "engine/engine.h"
#include "services/scheduler/generation_types.h"

namespace spar::testing {

inline GenerateParams FromEngineRequest(const GenerationRequest& r) {
  GenerateParams p;
  p.prompt_ids = r.prompt;
  p.sampling = r.sampling;
  p.seed = r.seed;
  p.max_tokens = r.max_tokens;
  p.stop_token_ids = r.stop_token_ids;
  p.ignore_eos = r.ignore_eos;
  p.output_logprobs = true;
  p.top_logprobs = r.top_logprobs;
  return p;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_ENGINE_REQUEST_PARAMS_H_
