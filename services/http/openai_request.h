// The request side of the OpenAI-compatible API, pure (no HTTP, no
// scheduler): a /v1/completions or /v1/chat/completions body becomes an
// OpenAiRequest, then one validated GenerateParams per prompt.
//
// Parsing checks JSON types and the OpenAI-only rules (stream_options
// needs stream, top_logprobs needs logprobs, unsupported features are
// refused by name); the generation rules themselves (ranges of temperature,
// n, stop strings, ...) are the gRPC API's, applied by
// ValidateGenerateParams with the OpenAI field names. Every error is an
// INVALID_ARGUMENT naming the field (services/common/status_field.h).
//
// Accepted fields: OpenAI's, plus vLLM's extensions top_k, min_p,
// repetition_penalty, ignore_eos, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, return_token_ids, chat_template_kwargs,
// add_generation_prompt. Unknown fields are refused, as OpenAI does.
// `reasoning_effort` is passed to the chat template as the kwarg of that
// name (chat_template_kwargs wins when both set it, as in vLLM);
// response_format json_object / json_schema and tool_choice required / a
// named function constrain the output (output_constraint.h).
#ifndef SPAR_SERVICES_HTTP_OPENAI_REQUEST_H_
#define SPAR_SERVICES_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/http/json_fields.h"
#include "services/http/output_constraint.h"
#include "services/scheduler/generation_types.h"
#include "services/scheduler/generation_validate.h"
#include "text/chat_template.h"

namespace spar::http {

enum class ApiKind { kCompletion, kChat };

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;  // as sent; empty when absent
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM)
  bool echo = false;              // completions: prepend the prompt
  bool return_token_ids = false;  // vLLM: token ids in the choices
  bool logprobs = false;          // per-token logprobs
  int top_logprobs = 0;           // alternatives per token
  // Completions: the prompts (each a choice group of n), text or ids.
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> id_prompts;
  // Chat: messages normalized for the template (text content, tool-call
  // arguments as objects), and the template options.
  Json messages = Json::array();
  ChatTemplateOptions template_options;
  bool tool_choice_none = false;  // tool_choice "none": no tool calls parsed
  // response_format json / tool_choice required or named (chat only):
  // completed and applied once the prompt is rendered.
  std::optional<OutputConstraint> constraint;
  // Every other generation setting; the prompt is left empty.
  GenerateParams params;
  GenerateFieldNames names;
};

// How the OpenAI API names the generation fields in errors (other APIs on
// the port start from it).
GenerateFieldNames OpenAiFieldNames();

// Both take at most `max_prompts` prompts (completions with a prompt list).
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body, int max_prompts = 64);
absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body);

// One GenerateParams per prompt (chat: the rendered template, which needs
// `chat_template`; completions: each prompt), validated against `limits`.
absl::StatusOr<std::vector<GenerateParams>> BuildGenerateParams(const OpenAiRequest& request,
                                                                const ChatTemplate* chat_template,
                                                                const ApiLimits& limits);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OPENAI_REQUEST_H_
