#include "services/http/chat_messages.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/status_field.h"

namespace spar::http {
namespace {

absl::Status Bad(const std::string& field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", message)), field);
}

// A message's fields: OpenAI's (user/system/developer/assistant/tool
// messages, and what the clients echo back of an assistant answer:
// refusal, annotations, audio, function_call) and vLLM's
// reasoning_content / reasoning. Anything else is refused, as unknown
// top-level fields are: a misspelt field must not be dropped silently.
constexpr absl::string_view kMessageFields[] = {
    "role",      "content", "name",        "tool_calls", "tool_call_id", "reasoning_content",
    "reasoning", "refusal", "annotations", "audio",      "function_call"};
constexpr absl::string_view kTextPartFields[] = {"type", "text"};

template <size_t N>
absl::Status CheckKnownKeys(const Json& object, const std::string& field, const absl::string_view (&known)[N]) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (absl::string_view k : known) ok = ok || it.key() == k;
    if (!ok) {
      return Bad(absl::StrCat(field, ".", it.key()),
                 absl::StrCat("is not a known field here (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> Content(const Json& content, const std::string& field, bool nullable) {
  if (content.is_null()) {
    if (!nullable) return Bad(field, "is required");
    return Json(nullptr);
  }
  if (content.is_string()) return content;
  if (!content.is_array()) return WrongType(field, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pfield = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return WrongType(pfield, "an object", part);
    if (absl::Status known = CheckKnownKeys(part, pfield, kTextPartFields); !known.ok()) {
      // An unknown "type" is the clearer error (images, audio).
      const Json* type = Find(part, "type");
      if (type == nullptr || *type == "text") return known;
    }
    const Json* type = Find(part, "type");
    if (type == nullptr || !type->is_string()) return Bad(pfield + ".type", "must be a string such as \"text\"");
    if (*type != "text") {
      return Bad(pfield + ".type", absl::StrCat("\"", type->get<std::string>(),
                                                "\" is not supported: spar serves text-only models (use \"text\")"));
    }
    const Json* t = Find(part, "text");
    if (t == nullptr || !t->is_string()) return Bad(pfield + ".text", "must be a string");
    if (i > 0) text += "\n";
    text += t->get<std::string>();
  }
  return Json(text);
}

absl::StatusOr<Json> ToolCalls(const Json& calls, const std::string& field) {
  if (!calls.is_array()) return WrongType(field, "an array", calls);
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string cfield = absl::StrCat(field, "[", i, "]");
    if (!c.is_object()) return WrongType(cfield, "an object", c);
    Json call = Json::object();
    if (const Json* id = Find(c, "id")) {
      if (!id->is_string()) return WrongType(cfield + ".id", "a string", *id);
      call["id"] = *id;
    }
    if (const Json* type = Find(c, "type"); type != nullptr && *type != "function") {
      return Bad(cfield + ".type", "must be \"function\"");
    }
    call["type"] = "function";
    const Json* fn = Find(c, "function");
    if (fn == nullptr || !fn->is_object()) return Bad(cfield + ".function", "must be an object with name and arguments");
    const Json* name = Find(*fn, "name");
    if (name == nullptr || !name->is_string()) return Bad(cfield + ".function.name", "must be a string");
    Json function = {{"name", *name}};
    const Json* args = Find(*fn, "arguments");
    if (args == nullptr) {
      function["arguments"] = Json::object();
    } else if (args->is_object()) {
      function["arguments"] = *args;
    } else if (args->is_string()) {
      const std::string& text = args->get_ref<const std::string&>();
      Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object()) {
        return Bad(cfield + ".function.arguments", "must be a JSON object (as a string or an object)");
      }
      function["arguments"] = std::move(parsed);
    } else {
      return WrongType(cfield + ".function.arguments", "a JSON string or an object", *args);
    }
    call["function"] = std::move(function);
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

absl::StatusOr<Json> NormalizeChatMessages(const Json& messages) {
  if (!messages.is_array()) return WrongType("messages", "an array", messages);
  if (messages.empty()) return Bad("messages", "must hold at least one message");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(field, "an object", m);
    if (absl::Status s = CheckKnownKeys(m, field, kMessageFields); !s.ok()) return s;
    const Json* role = Find(m, "role");
    if (role == nullptr || !role->is_string()) return Bad(field + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return Bad(field + ".role",
                 absl::StrCat("\"", r, "\" is not one of system, developer, user, assistant, tool"));
    }
    const bool assistant = r == "assistant";
    Json msg = {{"role", r}};
    auto content_it = m.find("content");
    const Json content_in = content_it == m.end() ? Json(nullptr) : *content_it;
    auto content = Content(content_in, field + ".content", assistant);
    if (!content.ok()) return content.status();
    msg["content"] = std::move(*content);
    if (const Json* name = Find(m, "name")) {
      if (!name->is_string()) return WrongType(field + ".name", "a string", *name);
      msg["name"] = *name;
    }
    if (const Json* calls = Find(m, "tool_calls")) {
      if (!assistant) return Bad(field + ".tool_calls", "is only allowed on assistant messages");
      auto tc = ToolCalls(*calls, field + ".tool_calls");
      if (!tc.ok()) return tc.status();
      if (!tc->empty()) msg["tool_calls"] = std::move(*tc);
    }
    if (const Json* id = Find(m, "tool_call_id")) {
      if (r != "tool") return Bad(field + ".tool_call_id", "is only allowed on tool messages");
      if (!id->is_string()) return WrongType(field + ".tool_call_id", "a string", *id);
      msg["tool_call_id"] = *id;
    }
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (const Json* rc = Find(m, key)) {
        if (!assistant) return Bad(absl::StrCat(field, ".", key), "is only allowed on assistant messages");
        if (!rc->is_string()) return WrongType(absl::StrCat(field, ".", key), "a string", *rc);
        msg["reasoning_content"] = *rc;
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate* chat_template, const Json& messages,
                                             const ChatTemplateOptions& options, absl::string_view field,
                                             absl::string_view no_template_hint) {
  if (chat_template == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this model has no chat template (tokenizer_config.json chat_template or --chat-template); ",
        no_template_hint));
  }
  auto prompt = chat_template->Apply(messages, options);
  if (!prompt.ok()) {
    return WithField(absl::InvalidArgumentError(absl::StrCat(field, ": the chat template failed: ",
                                                             prompt.status().message())),
                     field);
  }
  return prompt;
}

}  // namespace spar::http
