#include "services/scheduler/chat_input.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "services/http/chat_messages.h"
#include "text/json_depth.h"

namespace spar {
namespace {

using http::Json;

absl::Status Bad(const std::string& field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", message)), field);
}

// A JSON object the client sent as text. Parsing does not recurse; what
// later copies and renders it does, so the depth is bounded here as the
// HTTP API bounds a body's (text/json_depth.h).
absl::StatusOr<Json> JsonObjectField(const std::string& text, const std::string& field, absl::string_view what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(field, absl::StrCat("must be a JSON object (", what, ")"));
  if (JsonDepth(j, ChatTemplate::kMaxJsonDepth) > ChatTemplate::kMaxJsonDepth) {
    return Bad(field, absl::StrCat("nests more than ", ChatTemplate::kMaxJsonDepth, " levels deep"));
  }
  return j;
}

// The OpenAI JSON a /v1/chat/completions client would send for `m`. Unset
// proto3 strings (a tool call's id, type, arguments) are left out, as an
// OpenAI client leaves out what it does not set.
absl::StatusOr<Json> MessageJson(const v1::ChatCompletionMessage& m, const std::string& field) {
  Json j = Json::object();
  j["role"] = m.role();
  if (m.has_content() && m.content_parts_size() > 0) return Bad(field, "sets both content and content_parts: send one");
  if (m.has_content()) {
    j["content"] = m.content();
  } else if (m.content_parts_size() > 0) {
    Json parts = Json::array();
    for (const v1::ContentPart& part : m.content_parts()) parts.push_back({{"type", part.type()}, {"text", part.text()}});
    j["content"] = std::move(parts);
  }
  if (m.has_name()) j["name"] = m.name();
  if (m.tool_calls_size() > 0) {
    Json calls = Json::array();
    for (const v1::ToolCall& c : m.tool_calls()) {
      Json call = Json::object();
      if (!c.id().empty()) call["id"] = c.id();
      if (!c.type().empty()) call["type"] = c.type();
      if (c.has_function()) {
        Json function = {{"name", c.function().name()}};
        if (!c.function().arguments().empty()) function["arguments"] = c.function().arguments();
        call["function"] = std::move(function);
      }
      calls.push_back(std::move(call));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (m.has_tool_call_id()) j["tool_call_id"] = m.tool_call_id();
  if (m.has_reasoning()) j["reasoning"] = m.reasoning();
  return j;
}

// NormalizeChatMessages names paths of the OpenAI JSON
// ("messages[1].content[0].type"); the client sent the proto's fields.
absl::Status AsProtoField(const absl::Status& status) {
  const std::optional<std::string> field = FieldOf(status);
  if (!field) return status;
  const std::string proto = absl::StrCat("chat.", absl::StrReplaceAll(*field, {{".content[", ".content_parts["}}));
  std::string message(status.message());
  if (absl::StartsWith(message, *field)) message = proto + message.substr(field->size());
  return WithField(absl::Status(status.code(), message), proto);
}

absl::StatusOr<Json> ToolsJson(const v1::ChatInput& chat) {
  Json tools = Json::array();
  for (int i = 0; i < chat.tools_size(); ++i) {
    const v1::ChatCompletionTool& t = chat.tools(i);
    const std::string field = absl::StrCat("chat.tools[", i, "]");
    if (!t.type().empty() && t.type() != "function") return Bad(field + ".type", "must be \"function\"");
    if (t.function().name().empty()) return Bad(field + ".function.name", "must be a non-empty string");
    const v1::FunctionDefinition& f = t.function();
    Json function = {{"name", f.name()}};
    if (f.has_description()) function["description"] = f.description();
    if (f.has_parameters_json()) {
      SPAR_ASSIGN_OR_RETURN(function["parameters"],
                            JsonObjectField(f.parameters_json(), field + ".function.parameters_json", "a JSON schema"));
    }
    if (f.has_strict()) function["strict"] = f.strict();
    tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return tools;
}

}  // namespace

absl::StatusOr<std::string> RenderChatInput(const v1::ChatInput& chat, const ChatTemplate* chat_template) {
  Json messages = Json::array();
  for (int i = 0; i < chat.messages_size(); ++i) {
    SPAR_ASSIGN_OR_RETURN(Json m, MessageJson(chat.messages(i), absl::StrCat("chat.messages[", i, "]")));
    messages.push_back(std::move(m));
  }
  auto normalized = http::NormalizeChatMessages(messages);
  if (!normalized.ok()) return AsProtoField(normalized.status());
  ChatTemplateOptions options;
  options.add_generation_prompt = !chat.has_add_generation_prompt() || chat.add_generation_prompt();
  SPAR_ASSIGN_OR_RETURN(Json tools, ToolsJson(chat));
  if (!tools.empty()) options.tools = std::move(tools);
  if (!chat.chat_template_kwargs_json().empty()) {
    SPAR_ASSIGN_OR_RETURN(options.kwargs, JsonObjectField(chat.chat_template_kwargs_json(),
                                                          "chat.chat_template_kwargs_json",
                                                          "e.g. {\"enable_thinking\": false}"));
  }
  return http::RenderChatPrompt(chat_template, *normalized, options, "chat.messages", "send text or token_ids");
}

}  // namespace spar
