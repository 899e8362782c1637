// spar.v1 generation.proto <-> domain types. Parsing validates every field
// (the rules shared with the HTTP API, generation_validate.h) and names the
// offending one in an INVALID_ARGUMENT ("sampling.top_p must
// be in (0, 1], got 1.5"); a chat input is rendered into the prompt text by
// `chat_template` (chat_input.h; null: chat requests are
// FAILED_PRECONDITION); checks that need the tokenized prompt (context
// length) happen in the Scheduler.
#ifndef SPAR_SERVICES_SCHEDULER_GENERATION_CONVERT_H_
#define SPAR_SERVICES_SCHEDULER_GENERATION_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "services/scheduler/generation_types.h"
#include "services/scheduler/generation_validate.h"
#include "spar/v1/generation.pb.h"
#include "text/chat_template.h"

namespace spar {

absl::StatusOr<GenerateParams> ParseGenerateRequest(const v1::GenerateRequest& request, const ApiLimits& limits,
                                                    const ChatTemplate* chat_template = nullptr);

void UpdateToProto(const GenerationUpdate& update, v1::GenerateResponse* out);

// The public API's sampling message and SamplingParams, each way in one
// place: unset fields keep SamplingParams' defaults; the seed is not copied
// (it is the request's, resolved per sequence, GenerateParams::seed).
void SamplingParamsFromProto(const v1::SamplingParams& in, SamplingParams* out);
void SamplingParamsToProto(const SamplingParams& in, v1::SamplingParams* out);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GENERATION_CONVERT_H_
