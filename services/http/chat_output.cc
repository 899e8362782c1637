#include "services/http/chat_output.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace spar::http {
namespace {

// The JSON-schema type of `key` in the tool named `name`'s parameters; empty
// when the request does not say.
std::vector<std::string> ParamTypes(const Json& tools, const std::string& name, const std::string& key) {
  std::vector<std::string> out;
  if (!tools.is_array()) return out;
  for (const Json& t : tools) {
    const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || fn->value("name", "") != name) continue;
    const Json& props = fn->value("parameters", Json::object()).value("properties", Json::object());
    if (!props.is_object() || !props.contains(key) || !props[key].is_object()) return out;
    const Json type = props[key].value("type", Json());
    if (type.is_string()) out.push_back(type.get<std::string>());
    if (type.is_array()) {
      for (const Json& x : type) {
        if (x.is_string()) out.push_back(x.get<std::string>());
      }
    }
    return out;
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatParsers> ChatParsersFor(absl::string_view reasoning, absl::string_view tools,
                                           absl::string_view model_type) {
  const bool glm = model_type == "glm_moe_dsa";
  const bool deepseek = model_type == "deepseek_v32";
  ChatParsers p;
  if (reasoning == "auto") {
    p.reasoning = glm || deepseek;
  } else if (reasoning == "glm45" || reasoning == "deepseek_v3") {
    p.reasoning = true;
  } else if (reasoning != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reasoning-parser must be auto, glm45, deepseek_v3 or none, got \"", reasoning, "\""));
  }
  if (tools == "auto") {
    p.tool_calls = glm || deepseek;
    p.format = deepseek ? ToolCallFormat::kDsml : ToolCallFormat::kGlm;
  } else if (tools == "glm47" || tools == "glm45") {
    p.tool_calls = true;
  } else if (tools == "deepseek_v32") {
    p.tool_calls = true;
    p.format = ToolCallFormat::kDsml;
  } else if (tools != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--tool-call-parser must be auto, glm47, glm45, deepseek_v32 or none, got \"", tools, "\""));
  }
  return p;
}

ChatOutputSyntax ChatSyntaxFor(const ChatParsers& parsers, bool has_tools, bool tool_choice_none,
                               absl::string_view prompt) {
  ChatOutputSyntax s;
  s.reasoning = parsers.reasoning;
  s.starts_in_reasoning = parsers.reasoning && absl::EndsWith(absl::StripTrailingAsciiWhitespace(prompt), "<think>");
  s.tool_calls = parsers.tool_calls && has_tools && !tool_choice_none;
  s.format = parsers.format;
  return s;
}

Json ToolCallJson(const ToolCallText& call, const Json& tools, const std::string& id) {
  Json args = Json::object();
  for (size_t i = 0; i < call.args.size(); ++i) {
    const auto& [key, raw] = call.args[i];
    const std::optional<bool> flag = i < call.arg_string.size() ? call.arg_string[i] : std::nullopt;
    bool string_only;
    if (flag) {
      string_only = *flag;
    } else {
      const std::vector<std::string> types = ParamTypes(tools, call.name, key);
      string_only = types.size() == 1 && types[0] == "string";
    }
    Json value;
    if (!string_only) value = Json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (string_only || value.is_discarded()) value = raw;
    args[key] = std::move(value);
  }
  return {{"id", id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", args.dump(-1, ' ', false, Json::error_handler_t::replace)}}}};
}

ChatOutputStream::ChatOutputStream(ChatOutputSyntax syntax, const Json* tools, std::string id_prefix)
    : syntax_(syntax), tools_(tools), id_prefix_(std::move(id_prefix)), parser_(syntax) {}

Json ChatOutputStream::CallJson(const ToolCallText& call, size_t index) const {
  return ToolCallJson(call, *tools_, absl::StrCat(id_prefix_, index));
}

Json ChatOutputStream::Delta(absl::string_view text, bool final) {
  parser_.Feed(text, final);
  const ChatOutput& out = parser_.output();
  Json delta = Json::object();
  // The parse of a longer text extends the parse of a shorter one; guard
  // anyway, so a violation can never resend or cut text.
  if (out.reasoning.size() > reasoning_sent_) {
    delta["reasoning_content"] = out.reasoning.substr(reasoning_sent_);
    reasoning_sent_ = out.reasoning.size();
  }
  if (out.content.size() > content_sent_) {
    delta["content"] = out.content.substr(content_sent_);
    content_sent_ = out.content.size();
  }
  if (out.tool_calls.size() > calls_sent_) {
    Json calls = Json::array();
    for (size_t i = calls_sent_; i < out.tool_calls.size(); ++i) {
      Json c = CallJson(out.tool_calls[i], i);
      c["index"] = i;
      calls.push_back(std::move(c));
    }
    delta["tool_calls"] = std::move(calls);
    calls_sent_ = out.tool_calls.size();
  }
  return delta;
}

Json ChatOutputStream::Message(absl::string_view text) const {
  const ChatOutput out = ParseChatOutput(text, syntax_, /*final=*/true);
  Json calls = Json::array();
  for (size_t i = 0; i < out.tool_calls.size(); ++i) calls.push_back(CallJson(out.tool_calls[i], i));
  const bool no_content = absl::StripAsciiWhitespace(out.content).empty() && !calls.empty();
  Json m = {{"role", "assistant"}, {"content", no_content ? Json(nullptr) : Json(out.content)}};
  if (syntax_.reasoning) m["reasoning_content"] = out.reasoning.empty() ? Json(nullptr) : Json(out.reasoning);
  m["tool_calls"] = std::move(calls);
  return m;
}

}  // namespace spar::http
