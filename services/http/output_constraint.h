// What a chat request constrains its output to (constrained decoding,
// grammar/): OpenAI's `response_format` (json_object, json_schema) and
// `tool_choice` required / a named function (Anthropic's tool_choice any /
// tool map to the same), as a grammar ConstraintSpec. Pure.
//
// The spec is completed once the prompt is rendered (ApplyOutputConstraint):
// the model's tool-call syntax (GLM's XML or DeepSeek's DSML, from the
// server's tool-call parser) and whether the output starts with free
// reasoning up to </think> (the reasoning parser is on and the prompt
// opened <think>: the model thinks first, as vLLM does with reasoning
// parsers). Then it is compiled once here, so an unsupported or
// unsatisfiable schema is a 400 naming it before the request is queued;
// the last stage compiles the same spec where it samples.
#ifndef SPAR_SERVICES_HTTP_OUTPUT_CONSTRAINT_H_
#define SPAR_SERVICES_HTTP_OUTPUT_CONSTRAINT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "grammar/constraint.h"
#include "services/http/json_fields.h"
#include "services/scheduler/generation_types.h"
#include "text/chat_output_parser.h"

namespace spar::http {

struct OutputConstraint {
  grammar::ConstraintSpec spec;  // syntax and reasoning filled in by ApplyOutputConstraint
  std::string field;             // the request field that asked ("response_format", "tool_choice")
};

// OpenAI `response_format`: {"type": "text"} (nullopt), {"type":
// "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema",
// "strict", "description"}}. INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<std::optional<OutputConstraint>> ParseResponseFormat(const Json& format);

// A call of one of `tools` (OpenAI form: [{type, function: {name,
// parameters}}]), or of the tool named `name` (then exactly one call).
// `parameters_path(i)` names tool i's schema in errors;
// `choice_field` names the choice ("tool_choice.function.name").
struct ToolChoice {
  std::optional<std::string> name;  // absent: any tool ("required")
  bool parallel = true;             // several calls allowed (parallel_tool_calls)
};
absl::StatusOr<OutputConstraint> ToolCallConstraint(const ToolChoice& choice, const Json& tools,
                                                    const std::function<std::string(size_t)>& parameters_path,
                                                    const std::string& choice_field);

// Completes the spec with the output's syntax, validates it (compiling it)
// and puts it into `params`, whose text must then keep special tokens
// (the grammar matches the tags the detokenizer would otherwise drop).
// INVALID_ARGUMENT naming the field: a schema the grammar refuses, tool
// calls without a tool-call parser.
absl::Status ApplyOutputConstraint(OutputConstraint constraint, const ChatOutputSyntax& syntax,
                                   GenerateParams* params);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OUTPUT_CONSTRAINT_H_
