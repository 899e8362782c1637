#include "text/chat_template.h"

#include "absl/strings/str_cat.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "text/json_depth.h"

namespace spar {
namespace {

using json = nlohmann::json;

// bos_token/eos_token are strings or AddedToken objects {"content": ...}.
std::string TokenString(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(absl::string_view source, ChatTemplateLimits limits) {
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->source_ = std::string(source);
  t->limits_ = limits;
  SPAR_ASSIGN_OR_RETURN(t->body_, jinja::ParseTemplate(t->source_, jinja::ParseLimits{}));
  return t;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromFile(const std::string& path, ChatTemplateLimits limits) {
  SPAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto t = Parse(text, limits);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromTokenizerConfig(absl::string_view config_json,
                                                                                ChatTemplateLimits limits) {
  const json config = json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json: not a JSON object");
  }
  auto it = config.find("chat_template");
  if (it == config.end()) return absl::NotFoundError("tokenizer_config.json has no \"chat_template\"");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const json& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        source = entry["template"].get<std::string>();
      }
    }
    if (source.empty()) return absl::NotFoundError("tokenizer_config.json: no chat template named \"default\"");
  } else {
    return absl::InvalidArgumentError("tokenizer_config.json: \"chat_template\" must be a string or a list");
  }
  SPAR_ASSIGN_OR_RETURN(std::unique_ptr<ChatTemplate> t, Parse(source, limits));
  t->bos_token_ = TokenString(config, "bos_token");
  t->eos_token_ = TokenString(config, "eos_token");
  return t;
}

namespace {

// Refuses JSON deeper than the template engine's recursive conversion can
// take (checked before anything copies it).
absl::Status CheckDepth(const nlohmann::ordered_json& j, absl::string_view what, int levels_above = 0) {
  const int limit = ChatTemplate::kMaxJsonDepth + levels_above;
  if (JsonDepth(j, limit) > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " nest more than ", ChatTemplate::kMaxJsonDepth, " levels deep"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return absl::InvalidArgumentError("chat template context must be a JSON object");
  if (encoder_) return absl::FailedPreconditionError(absl::StrCat(source_, " is a prompt encoder, not a template"));
  SPAR_RETURN_IF_ERROR(CheckDepth(context, "the chat template context's values", /*levels_above=*/1));
  jinja::Interpreter interpreter(limits_);
  return interpreter.Render(body_, jinja::Value::FromJson(context));
}

std::unique_ptr<ChatTemplate> ChatTemplate::FromEncoder(std::string name, Encoder encoder) {
  auto t = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  t->source_ = std::move(name);
  t->encoder_ = std::move(encoder);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                                const ChatTemplateOptions& options) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  SPAR_RETURN_IF_ERROR(CheckDepth(messages, "messages"));
  SPAR_RETURN_IF_ERROR(CheckDepth(options.tools, "tools"));
  SPAR_RETURN_IF_ERROR(CheckDepth(options.kwargs, "chat template kwargs"));
  if (encoder_) return encoder_(messages, options);
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  if (!options.tools.is_null() && !(options.tools.is_array() && options.tools.empty())) context["tools"] = options.tools;
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  if (options.kwargs.is_object()) {
    for (auto it = options.kwargs.begin(); it != options.kwargs.end(); ++it) context[it.key()] = it.value();
  } else if (!options.kwargs.is_null()) {
    return absl::InvalidArgumentError("chat template kwargs must be a JSON object");
  }
  return Render(context);
}

}  // namespace spar
