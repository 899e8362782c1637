// Deterministic mixed workloads for the distributed-equals-engine tests:
// prompt lengths from 1 to beyond index_topk and across block boundaries,
// greedy and seeded sampling with every knob, EOS on and off, stop ids,
// logprobs.
#ifndef SPAR_TESTS_SERVICES_MIXED_REQUESTS_H_
#define SPAR_TESTS_SERVICES_MIXED_REQUESTS_H_

#include <vector>

#include "base/rng.h"
#include "engine/engine.h"
#include "gtest/gtest.h"

namespace spar::testing {

inline std::vector<GenerationRequest> MixedRequests(int count, uint64_t seed) {
  // Around index_topk (32) and the block size (64); one beyond both.
  static const int kLengths[] = {1, 2, 5, 9, 17, 31, 33, 40, 64, 65, 70, 100};
  Rng rng(seed);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    GenerationRequest r;
    const int len = kLengths[(i * 7 + static_cast<int>(rng.Below(5))) % 12];
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng.Below(288)));
    r.max_tokens = 1 + static_cast<int>(rng.Below(16));
    r.seed = 1000 + i;
    switch (i % 4) {
      case 0:  // greedy
        r.sampling.temperature = 0;
        r.ignore_eos = true;
        break;
      case 1:  // seeded, truncated
        r.sampling.temperature = 0.8f;
        r.sampling.top_k = 40;
        r.sampling.top_p = 0.9f;
        r.ignore_eos = true;
        r.top_logprobs = 3;
        break;
      case 2:  // seeded with penalties (history on the last stage matters)
        r.sampling.temperature = 1.0f;
        r.sampling.min_p = 0.02f;
        r.sampling.repetition_penalty = 1.3f;
        r.sampling.frequency_penalty = 0.5f;
        r.sampling.presence_penalty = 0.4f;
        r.ignore_eos = true;
        break;
      default:  // EOS and stop ids allowed to end it early
        r.sampling.temperature = 1.2f;
        r.stop_token_ids = {static_cast<int32_t>(rng.Below(288)), static_cast<int32_t>(rng.Below(288))};
        r.top_logprobs = 1;
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The single-process engine's outputs for `requests`.
inline std::vector<Generation> EngineReference(const std::string& model_dir,
                                               const std::vector<GenerationRequest>& requests) {
  EngineOptions eo;
  eo.model.num_blocks = 512;
  auto engine = Engine::Create(model_dir, eo);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto gen = (*engine)->Generate(requests);
  EXPECT_TRUE(gen.ok()) << gen.status();
  return gen.ok() ? *gen : std::vector<Generation>();
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_MIXED_REQUESTS_H_
