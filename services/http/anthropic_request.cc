#include "services/http/anthropic_request.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "services/http/chat_messages.h"
#include "services/http/openai_request.h"

namespace spar::http {
namespace {

absl::Status Bad(const std::string& field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", message)), field);
}

const std::set<std::string> kMessageFields = {"model",       "messages",       "system",      "max_tokens",
                                              "stop_sequences", "stream",      "temperature", "top_p",
                                              "top_k",       "tools",          "tool_choice", "thinking",
                                              "metadata",    "service_tier"};
const std::set<std::string> kCountFields = {"model", "messages", "system", "tools", "tool_choice", "thinking"};

absl::Status CheckKeys(const Json& object, const std::string& field, const std::set<std::string>& known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!known.count(it.key())) {
      return Bad(field.empty() ? it.key() : absl::StrCat(field, ".", it.key()), "is not a known field here");
    }
  }
  return absl::OkStatus();
}

// Text of a string or of text blocks (joined with "\n", as the OpenAI
// layer joins text parts).
absl::StatusOr<std::string> TextOf(const Json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(field, "a string or an array of text blocks", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& b = content[i];
    const std::string bfield = absl::StrCat(field, "[", i, "]");
    if (!b.is_object()) return WrongType(bfield, "an object", b);
    const Json* type = Find(b, "type");
    if (type == nullptr || *type != "text") return Bad(bfield + ".type", "must be \"text\" here");
    SPAR_RETURN_IF_ERROR(CheckKeys(b, bfield, {"type", "text", "cache_control", "citations"}));
    const Json* t = Find(b, "text");
    if (t == nullptr || !t->is_string()) return Bad(bfield + ".text", "must be a string");
    if (i > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

// One Anthropic message as OpenAI-form messages: a user turn may carry
// tool results (each a tool message, in order) and text.
absl::Status AppendMessage(const Json& m, size_t index, Json* out) {
  const std::string field = absl::StrCat("messages[", index, "]");
  if (!m.is_object()) return WrongType(field, "an object", m);
  SPAR_RETURN_IF_ERROR(CheckKeys(m, field, {"role", "content"}));
  const Json* role = Find(m, "role");
  if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant")) {
    return Bad(field + ".role", "must be \"user\" or \"assistant\"");
  }
  const bool assistant = *role == "assistant";
  const Json* content = Find(m, "content");
  if (content == nullptr) return Bad(field + ".content", "is required");
  if (content->is_string()) {
    out->push_back({{"role", role->get<std::string>()}, {"content", *content}});
    return absl::OkStatus();
  }
  if (!content->is_array()) return WrongType(field + ".content", "a string or an array of content blocks", *content);
  std::string text, reasoning;
  bool has_text = false, has_reasoning = false;
  Json calls = Json::array();
  auto flush_user_text = [&] {
    if (!assistant && has_text) out->push_back({{"role", "user"}, {"content", text}});
    text.clear();
    has_text = false;
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& b = (*content)[i];
    const std::string bfield = absl::StrCat(field, ".content[", i, "]");
    if (!b.is_object()) return WrongType(bfield, "an object", b);
    const Json* type = Find(b, "type");
    if (type == nullptr || !type->is_string()) return Bad(bfield + ".type", "must be a string");
    const std::string t = type->get<std::string>();
    if (t == "text") {
      SPAR_RETURN_IF_ERROR(CheckKeys(b, bfield, {"type", "text", "cache_control", "citations"}));
      const Json* s = Find(b, "text");
      if (s == nullptr || !s->is_string()) return Bad(bfield + ".text", "must be a string");
      if (has_text) text += "\n";
      text += s->get<std::string>();
      has_text = true;
    } else if (t == "tool_use" && assistant) {
      SPAR_RETURN_IF_ERROR(CheckKeys(b, bfield, {"type", "id", "name", "input", "cache_control"}));
      const Json* id = Find(b, "id");
      const Json* name = Find(b, "name");
      const Json* input = Find(b, "input");
      if (id == nullptr || !id->is_string()) return Bad(bfield + ".id", "must be a string");
      if (name == nullptr || !name->is_string()) return Bad(bfield + ".name", "must be a string");
      if (input != nullptr && !input->is_object()) return WrongType(bfield + ".input", "an object", *input);
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", input != nullptr ? *input : Json::object()}}}});
    } else if (t == "tool_result" && !assistant) {
      SPAR_RETURN_IF_ERROR(CheckKeys(b, bfield, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
      const Json* id = Find(b, "tool_use_id");
      if (id == nullptr || !id->is_string()) return Bad(bfield + ".tool_use_id", "must be a string");
      std::string result;
      if (const Json* c = Find(b, "content")) {
        SPAR_ASSIGN_OR_RETURN(result, TextOf(*c, bfield + ".content"));
      }
      SPAR_ASSIGN_OR_RETURN(auto is_error, GetBool(b, "is_error"));
      if (is_error.value_or(false)) result = absl::StrCat("Error: ", result);
      flush_user_text();  // tool results answer the calls before any new text
      out->push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (t == "thinking" && assistant) {
      SPAR_RETURN_IF_ERROR(CheckKeys(b, bfield, {"type", "thinking", "signature", "cache_control"}));
      const Json* s = Find(b, "thinking");
      if (s == nullptr || !s->is_string()) return Bad(bfield + ".thinking", "must be a string");
      reasoning += s->get<std::string>();
      has_reasoning = true;
    } else if (t == "redacted_thinking" && assistant) {
      continue;  // opaque to this model
    } else {
      return Bad(bfield + ".type", absl::StrCat("\"", t, "\" is not supported in a", assistant ? "n assistant" : " user",
                                                " message (text, ", assistant ? "tool_use, thinking" : "tool_result",
                                                "; spar serves text-only models)"));
    }
  }
  if (assistant) {
    Json msg = {{"role", "assistant"}, {"content", has_text ? Json(text) : Json(nullptr)}};
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    if (has_reasoning) msg["reasoning_content"] = reasoning;
    out->push_back(std::move(msg));
  } else {
    flush_user_text();
  }
  return absl::OkStatus();
}

// Anthropic tools as OpenAI-style functions (what the chat templates print).
absl::StatusOr<Json> Tools(const Json& tools) {
  if (!tools.is_array()) return WrongType("tools", "an array", tools);
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string field = absl::StrCat("tools[", i, "]");
    if (!t.is_object()) return WrongType(field, "an object", t);
    if (const Json* type = Find(t, "type"); type != nullptr && *type != "custom") {
      return Bad(field + ".type", "is a server tool, which spar does not run (only custom tools: name, input_schema)");
    }
    SPAR_RETURN_IF_ERROR(CheckKeys(t, field, {"type", "name", "description", "input_schema", "cache_control"}));
    const Json* name = Find(t, "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return Bad(field + ".name", "must be a non-empty string");
    }
    const Json* schema = Find(t, "input_schema");
    if (schema == nullptr || !schema->is_object()) return Bad(field + ".input_schema", "must be an object (a JSON schema)");
    Json fn = {{"name", *name}};
    if (const Json* d = Find(t, "description")) {
      if (!d->is_string()) return WrongType(field + ".description", "a string", *d);
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

absl::Status ParseToolChoice(const Json& j, AnthropicRequest* r) {
  const Json* choice = Find(j, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (!choice->is_object()) return WrongType("tool_choice", "an object", *choice);
  SPAR_RETURN_IF_ERROR(CheckKeys(*choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
  const Json* type = Find(*choice, "type");
  if (type == nullptr || !type->is_string()) return Bad("tool_choice.type", "must be auto, any, tool or none");
  SPAR_ASSIGN_OR_RETURN(auto no_parallel, GetBool(*choice, "disable_parallel_tool_use"));
  const std::string t = type->get<std::string>();
  if (t == "auto") return absl::OkStatus();
  if (t == "none") {
    r->tool_choice_none = true;
    return absl::OkStatus();
  }
  ToolChoice tc;
  tc.parallel = !no_parallel.value_or(false);
  std::string field = "tool_choice";
  if (t == "tool") {
    SPAR_ASSIGN_OR_RETURN(auto name, GetString(*choice, "name"));
    if (!name) return Bad("tool_choice.name", "is required for a tool choice of type tool");
    tc.name = *name;
    field = "tool_choice.name";
  } else if (t != "any") {
    return Bad("tool_choice.type", "must be auto, any, tool or none");
  }
  SPAR_ASSIGN_OR_RETURN(r->constraint,
                        ToolCallConstraint(tc, r->template_options.tools,
                                           [](size_t i) { return absl::StrCat("tools[", i, "].input_schema"); }, field));
  return absl::OkStatus();
}

GenerateFieldNames AnthropicNames() {
  GenerateFieldNames n = OpenAiFieldNames();
  n.text = n.token_ids = "messages";
  n.stop_strings = "stop_sequences";
  return n;
}

}  // namespace

absl::StatusOr<AnthropicRequest> ParseAnthropicRequest(absl::string_view body, bool count_tokens) {
  SPAR_ASSIGN_OR_RETURN(Json j, ParseJsonObjectBody(body));
  SPAR_RETURN_IF_ERROR(CheckKeys(j, "", count_tokens ? kCountFields : kMessageFields));
  AnthropicRequest r;
  r.names = AnthropicNames();
  SPAR_ASSIGN_OR_RETURN(auto model, GetString(j, "model"));
  if (!model) return Bad("model", "is required");
  r.model = *model;
  Json messages = Json::array();
  if (const Json* system = Find(j, "system")) {
    SPAR_ASSIGN_OR_RETURN(std::string text, TextOf(*system, "system"));
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const Json* in = Find(j, "messages");
  if (in == nullptr) return Bad("messages", "is required");
  if (!in->is_array()) return WrongType("messages", "an array", *in);
  if (in->empty()) return Bad("messages", "must hold at least one message");
  for (size_t i = 0; i < in->size(); ++i) SPAR_RETURN_IF_ERROR(AppendMessage((*in)[i], i, &messages));
  SPAR_ASSIGN_OR_RETURN(r.messages, NormalizeChatMessages(messages));
  if (const Json* tools = Find(j, "tools")) {
    SPAR_ASSIGN_OR_RETURN(Json t, Tools(*tools));
    if (!t.empty()) r.template_options.tools = std::move(t);
  }
  SPAR_RETURN_IF_ERROR(ParseToolChoice(j, &r));
  // Thinking is off unless asked for (Anthropic's default); the templates
  // read enable_thinking.
  bool thinking = false;
  if (const Json* t = Find(j, "thinking")) {
    if (!t->is_object()) return WrongType("thinking", "an object", *t);
    SPAR_RETURN_IF_ERROR(CheckKeys(*t, "thinking", {"type", "budget_tokens"}));
    const Json* type = Find(*t, "type");
    if (type == nullptr || (*type != "enabled" && *type != "disabled")) {
      return Bad("thinking.type", "must be \"enabled\" or \"disabled\"");
    }
    SPAR_ASSIGN_OR_RETURN(auto budget, GetInt(*t, "budget_tokens"));
    if (budget && *budget < 1) return Bad("thinking.budget_tokens", "must be >= 1");
    thinking = *type == "enabled";
  }
  r.template_options.kwargs = {{"enable_thinking", thinking}};
  if (count_tokens) return r;

  GenerateParams& p = r.params;
  SPAR_ASSIGN_OR_RETURN(auto max_tokens, GetInt(j, "max_tokens"));
  if (!max_tokens) return Bad("max_tokens", "is required");
  p.max_tokens = static_cast<int>(std::clamp<int64_t>(*max_tokens, INT32_MIN, INT32_MAX));
  SPAR_ASSIGN_OR_RETURN(auto stream, GetBool(j, "stream"));
  r.stream = stream.value_or(false);
  SPAR_ASSIGN_OR_RETURN(auto temperature, GetNumber(j, "temperature"));
  if (temperature) p.sampling.temperature = static_cast<float>(*temperature);
  SPAR_ASSIGN_OR_RETURN(auto top_p, GetNumber(j, "top_p"));
  if (top_p) p.sampling.top_p = static_cast<float>(*top_p);
  SPAR_ASSIGN_OR_RETURN(auto top_k, GetInt(j, "top_k"));
  if (top_k) p.sampling.top_k = static_cast<int>(std::clamp<int64_t>(*top_k, INT32_MIN, INT32_MAX));
  if (const Json* stops = Find(j, "stop_sequences")) {
    if (!stops->is_array()) return WrongType("stop_sequences", "an array of strings", *stops);
    for (size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string()) return WrongType(absl::StrCat("stop_sequences[", i, "]"), "a string", (*stops)[i]);
      p.stop_strings.push_back((*stops)[i].get<std::string>());
    }
  }
  if (const Json* meta = Find(j, "metadata"); meta != nullptr && !meta->is_object()) {
    return WrongType("metadata", "an object", *meta);
  }
  SPAR_ASSIGN_OR_RETURN(auto tier, GetString(j, "service_tier"));
  (void)tier;
  return r;
}

absl::StatusOr<GenerateParams> BuildAnthropicParams(const AnthropicRequest& r, const ChatTemplate* chat_template,
                                                    const ApiLimits& limits) {
  SPAR_ASSIGN_OR_RETURN(std::string prompt, RenderChatPrompt(chat_template, r.messages, r.template_options, "messages",
                                                             "this API needs one"));
  GenerateParams p = r.params;
  p.text = std::move(prompt);
  SPAR_RETURN_IF_ERROR(ValidateGenerateParams(&p, limits, r.names));
  return p;
}

}  // namespace spar::http
