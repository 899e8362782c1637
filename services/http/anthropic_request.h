// The request side of the Anthropic Messages API (POST /v1/messages and
// /v1/messages/count_tokens), pure: a body becomes the same request model
// the OpenAI chat API builds (normalized messages, template options, one
// GenerateParams, an optional output constraint), so the adapter is thin.
//
//   system           a string or text blocks -> a system message
//   messages         user / assistant turns; content a string or blocks:
//                    text; tool_use (assistant: a tool call, input an
//                    object); tool_result (user: a tool message, content a
//                    string or text blocks, is_error noted in the text);
//                    thinking (assistant: reasoning_content); redacted_thinking
//                    dropped. cache_control and citations are accepted and
//                    ignored; images, documents and server tools are refused.
//   tools            [{name, description, input_schema}] -> OpenAI-style
//                    functions for the chat template
//   tool_choice      auto | any (a call is required) | tool {name} | none;
//                    disable_parallel_tool_use
//   thinking         {type: enabled, budget_tokens} -> the template's
//                    enable_thinking true; disabled or absent -> false
//                    (Anthropic's default is no thinking); budget_tokens is
//                    not enforced separately (max_tokens bounds both)
//   max_tokens (required), stop_sequences, temperature, top_p, top_k,
//   stream, metadata, service_tier
// Unknown fields are refused naming them. Errors are INVALID_ARGUMENT
// naming the field (services/common/status_field.h).
#ifndef SPAR_SERVICES_HTTP_ANTHROPIC_REQUEST_H_
#define SPAR_SERVICES_HTTP_ANTHROPIC_REQUEST_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/http/json_fields.h"
#include "services/http/output_constraint.h"
#include "services/scheduler/generation_types.h"
#include "services/scheduler/generation_validate.h"
#include "text/chat_template.h"

namespace spar::http {

struct AnthropicRequest {
  std::string model;
  bool stream = false;
  Json messages = Json::array();  // OpenAI-form, normalized for the template
  ChatTemplateOptions template_options;
  bool tool_choice_none = false;
  std::optional<OutputConstraint> constraint;  // tool_choice any / tool
  GenerateParams params;                       // prompt empty
  GenerateFieldNames names;
};

// `count_tokens`: the count_tokens body (no max_tokens, no sampling).
absl::StatusOr<AnthropicRequest> ParseAnthropicRequest(absl::string_view body, bool count_tokens);

// The GenerateParams with the rendered prompt, validated against `limits`.
absl::StatusOr<GenerateParams> BuildAnthropicParams(const AnthropicRequest& request, const ChatTemplate* chat_template,
                                                    const ApiLimits& limits);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_ANTHROPIC_REQUEST_H_
