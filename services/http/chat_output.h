// Chat completions' structured output: which parsers a server runs
// (--reasoning-parser, --tool-call-parser, vLLM's names), the syntax one
// request's output follows, and the OpenAI fields a choice's text becomes —
// `reasoning_content`, `content`, `tool_calls` — whole (non-streaming) or as
// deltas (streaming). The parsing itself is text/chat_output_parser.h.
#ifndef SPAR_SERVICES_HTTP_CHAT_OUTPUT_H_
#define SPAR_SERVICES_HTTP_CHAT_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/http/json_fields.h"
#include "text/chat_output_parser.h"

namespace spar::http {

struct ChatParsers {
  bool reasoning = false;   // <think> … </think> → reasoning_content
  bool tool_calls = false;  // tool-call blocks of `format` → tool_calls
  ToolCallFormat format = ToolCallFormat::kGlm;  // GLM XML or DeepSeek-V3.2 DSML
};

// `reasoning`: auto | glm45 | deepseek_v3 | none; `tools`: auto | glm47 |
// glm45 | deepseek_v32 | none. auto picks by the model: GLM-5
// (glm_moe_dsa) glm45 + glm47, DeepSeek-V3.2 (deepseek_v32) deepseek_v3 +
// its DSML calls.
absl::StatusOr<ChatParsers> ChatParsersFor(absl::string_view reasoning, absl::string_view tools,
                                           absl::string_view model_type);

// The syntax of one request's output: `prompt` is its rendered chat
// template (thinking is on when it ends with <think>); tool calls are
// parsed when the request has tools and tool_choice is not "none".
ChatOutputSyntax ChatSyntaxFor(const ChatParsers& parsers, bool has_tools, bool tool_choice_none,
                               absl::string_view prompt);

// One OpenAI tool call: {id, type, function: {name, arguments}}. Each raw
// value becomes a JSON string when the call says so (DSML string="true"),
// the JSON it spells when the call says it is not a string (string="false";
// a string when it spells none); without a flag (GLM) a string when the
// tool's schema says the parameter is a string, else the JSON it spells (a
// number, an object, …), else a string.
Json ToolCallJson(const ToolCallText& call, const Json& tools, const std::string& id);

// One choice's output across updates: feed the whole text so far, get what
// to send. Deterministic tool call ids: `id_prefix` + index.
class ChatOutputStream {
 public:
  // `tools` (the request's list) must outlive the stream.
  ChatOutputStream(ChatOutputSyntax syntax, const Json* tools, std::string id_prefix);

  // The delta fields (reasoning_content, content, tool_calls) that `text`
  // (the whole text so far) adds to what earlier calls returned; empty when
  // nothing is new.
  Json Delta(absl::string_view text, bool final);

  // The message fields of the whole `text` (content null when empty and a
  // tool was called; reasoning_content only when the syntax has reasoning).
  Json Message(absl::string_view text) const;

  // Whether the text fed to Delta called a tool (finish_reason "tool_calls").
  bool CalledTools() const { return !parser_.output().tool_calls.empty(); }

 private:
  Json CallJson(const ToolCallText& call, size_t index) const;

  const ChatOutputSyntax syntax_;
  const Json* tools_;
  const std::string id_prefix_;
  ChatOutputParser parser_;  // incremental: a delta costs what it adds
  size_t reasoning_sent_ = 0, content_sent_ = 0, calls_sent_ = 0;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_CHAT_OUTPUT_H_
