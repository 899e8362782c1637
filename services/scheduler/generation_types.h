// Domain types of the public generation API (what generation.proto carries,
// without protobuf): validated request parameters, streamed updates, and the
// sink a transport implements to receive them.
#ifndef SPAR_SERVICES_SCHEDULER_GENERATION_TYPES_H_
#define SPAR_SERVICES_SCHEDULER_GENERATION_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/sampling_params.h"
#include "services/scheduler/scheduler_core.h"

namespace spar {

struct GenerateParams {
  std::string request_id;                // empty: assigned by the scheduler
  std::optional<std::string> text;       // prompt as text ...
  std::vector<int32_t> prompt_ids;       // ... or as token ids
  SamplingParams sampling;          // seed is set per sequence from `seed`
  std::optional<uint64_t> seed;          // absent: random
  int n = 1;
  std::optional<int> max_tokens;         // absent: the rest of the context
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  bool include_stop_strings = false;
  bool ignore_eos = false;
  bool output_text = true;
  bool output_logprobs = false;
  int top_logprobs = 0;
  bool skip_special_tokens = true;
  bool echo_prompt_ids = false;
  std::optional<absl::Time> deadline;
  // Constrained decoding: a grammar/constraint.h ConstraintSpec as JSON
  // (validated by the API that made it); the output follows it and ends
  // where it is complete.
  std::optional<std::string> constraint;
  // How the client named the prompt and max_tokens (set by
  // ValidateGenerateParams), so the Scheduler's own checks name them too.
  std::string prompt_field = "text";
  std::string max_tokens_field = "stopping.max_tokens";
};

struct FinishInfo {
  SeqFinishReason reason = SeqFinishReason::kLength;
  int num_output_tokens = 0;
  std::optional<int32_t> stop_token_id;
  std::optional<int32_t> eos_token_id;
  std::optional<std::string> stop_string;
};

struct SequenceUpdate {
  int index = 0;
  std::string text;  // delta
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;                                  // when asked for
  std::vector<std::vector<std::pair<int32_t, float>>> top;      // when asked for
  std::optional<FinishInfo> finish;
};

struct PromptInfo {
  int num_prompt_tokens = 0;
  std::vector<int32_t> prompt_ids;  // when echo_prompt_ids
};

struct UsageInfo {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;  // of prompt_tokens, shared from the prefix cache
};

struct GenerationUpdate {
  std::string request_id;
  std::optional<PromptInfo> prompt;  // first update only
  SequenceUpdate output;
  std::optional<UsageInfo> usage;    // last update only
};

// Receives one request's stream. Called from the scheduler's threads with
// its lock held: implementations must not block and must not call back into
// the Scheduler.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // False when the consumer is gone (the request is then cancelled).
  virtual bool Send(GenerationUpdate update) = 0;
  // The end: OK after the last update, or the error that ended the request.
  virtual void Close(const absl::Status& status) = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GENERATION_TYPES_H_
