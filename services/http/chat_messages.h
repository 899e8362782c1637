// OpenAI chat messages -> what chat templates expect, checked field by field.
//
//   role          system | developer | user | assistant | tool
//   content       a string; an array of {"type":"text","text":...} parts
//                 (joined with "\n", as vLLM does for string-content
//                 templates); null only on assistant turns. Other part types
//                 (images, audio, files) are refused: spar serves text models.
//   name          optional string
//   tool_calls    assistant only: [{id, type:"function", function:{name,
//                 arguments}}]; arguments arrive as a JSON string (OpenAI)
//                 and are parsed into an object, because the GLM templates
//                 iterate over them (vLLM does the same)
//   tool_call_id  tool only: optional string
//   reasoning_content / reasoning   assistant only: earlier thinking, passed
//                 to the template as reasoning_content (GLM keeps it)
//   refusal, annotations, audio, function_call   accepted and dropped:
//                 what clients echo back of a previous answer
// Any other key of a message or a text part is refused (as unknown
// top-level fields are), naming it: "messages[1].frobnicate". Errors name
// the path, e.g. "messages[2].content[0].type".
#ifndef SPAR_SERVICES_HTTP_CHAT_MESSAGES_H_
#define SPAR_SERVICES_HTTP_CHAT_MESSAGES_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/http/json_fields.h"
#include "text/chat_template.h"

namespace spar::http {

absl::StatusOr<Json> NormalizeChatMessages(const Json& messages);

// The prompt of normalized `messages`: `chat_template` applied with
// `options`, as both public APIs render chat requests. Errors: no template
// is FAILED_PRECONDITION (its message ends with `no_template_hint`, what to
// send instead); a template that fails is INVALID_ARGUMENT naming `field`
// (how the transport calls the messages).
absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate* chat_template, const Json& messages,
                                             const ChatTemplateOptions& options, absl::string_view field,
                                             absl::string_view no_template_hint);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_CHAT_MESSAGES_H_
