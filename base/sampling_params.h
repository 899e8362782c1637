// The sampling parameters of one sequence, as every layer sees them: the
// public APIs fill them, the scheduler carries them, the workers and the
// in-process engine sample with them, the GPU sampler reads them as they are
// (kernels/cuda/sampling embeds this struct). One rule set says which values
// are valid (CheckSamplingParams), applied where a request enters a process:
// the public APIs (services/scheduler/generation_validate), the in-process
// engine (engine/engine.cc) and a worker's wire (services/common/
// worker_convert); each reports the field under its own name.
#ifndef SPAR_BASE_SAMPLING_PARAMS_H_
#define SPAR_BASE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/strings/string_view.h"

namespace spar {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
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

// What each API calls the fields ("sampling.top_p" on gRPC, "top_p" in JSON).
struct SamplingFieldNames {
  absl::string_view temperature = "temperature", top_p = "top_p", top_k = "top_k", min_p = "min_p",
                    repetition_penalty = "repetition_penalty", frequency_penalty = "frequency_penalty",
                    presence_penalty = "presence_penalty";
};

// A field outside its rule: the field's name, the rule, the value as sent.
struct SamplingViolation {
  std::string field, rule, got;
};

// The one rule set: temperature in [0, 100], top_p in (0, 1], top_k >= -1
// (0 and -1 mean off; -1 is stored as 0), min_p in [0, 1],
// repetition_penalty in (0, 100], frequency and presence penalties in
// [-2, 2]. NaN breaks every rule. Returns the first violation, if any.
std::optional<SamplingViolation> CheckSamplingParams(SamplingParams* params, const SamplingFieldNames& names = {});

// A value as the shortest decimal that reads back as the same float
// ("1.0000001", not "1"), or "NaN": error messages quote what was sent.
std::string FormatFieldValue(double value);

}  // namespace spar

#endif  // SPAR_BASE_SAMPLING_PARAMS_H_
