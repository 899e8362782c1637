// The rules every generation request obeys, whichever transport brought it
// (spar.v1 gRPC or the OpenAI-compatible HTTP API): one validator, with the
// field names spelled the way the transport's clients spell them, so an
// error names the field the client actually sent ("sampling.top_p" over
// gRPC, "top_p" over HTTP). Errors are INVALID_ARGUMENT with the field
// attached (services/common/status_field.h).
#ifndef SPAR_SERVICES_SCHEDULER_GENERATION_VALIDATE_H_
#define SPAR_SERVICES_SCHEDULER_GENERATION_VALIDATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "services/scheduler/generation_types.h"

namespace spar {

struct ApiLimits {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::string served_model_name;
  int max_n = 16;
  int max_stop_strings = 16;
  int max_stop_string_bytes = 256;
  int max_stop_token_ids = 64;
  int max_request_id_bytes = 256;
  int max_top_logprobs = 20;
};

struct GenerateFieldNames {
  std::string request_id, text, token_ids, temperature, top_p, top_k, min_p, repetition_penalty, frequency_penalty,
      presence_penalty, n, max_tokens, stop_token_ids, stop_strings, top_logprobs;
};

// spar.v1 GenerateRequest paths ("sampling.top_p", "stopping.max_tokens").
const GenerateFieldNames& GrpcFieldNames();

// Checks every field of `params` (a prompt is required: text or ids) and
// normalizes the aliases (top_k -1 = off = 0). Also records in
// params->prompt_field / max_tokens_field how the prompt and max_tokens
// are named, for the checks the Scheduler makes after tokenizing.
absl::Status ValidateGenerateParams(GenerateParams* params, const ApiLimits& limits,
                                    const GenerateFieldNames& names);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GENERATION_VALIDATE_H_
