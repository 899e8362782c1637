// Chat templates: the model's `chat_template` (a Jinja template from
// tokenizer_config.json or chat_template.jinja) rendered the way
// transformers' apply_chat_template does, by spar's own Jinja subset
// interpreter (text/jinja_*.h).
//
// Supported: {% if/elif/else %}, {% for %} (loop.*, else, inline `if`,
// tuple unpacking), {% set %} (namespace attributes, block form),
// {% macro %}, {% break/continue %}, {% generation %} (ignored), comments,
// whitespace control and transformers' trim_blocks/lstrip_blocks; Python
// string/list/dict methods and the filters and tests chat templates use
// (tojson, trim, length, default, map, selectattr, ...); globals range,
// namespace, dict, raise_exception, strftime_now.
//
// Values print as Python's str() does (None, True), as transformers does.
// Rendering is bounded by RenderLimits; a template that exceeds them, or
// calls raise_exception, fails with a status naming the line. Contexts,
// messages, tools and kwargs nested deeper than kMaxJsonDepth are refused
// (text/json_depth.h says why).
#ifndef SPAR_TEXT_CHAT_TEMPLATE_H_
#define SPAR_TEXT_CHAT_TEMPLATE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "text/jinja_ast.h"
#include "text/jinja_interpreter.h"

namespace spar {

using ChatTemplateLimits = jinja::RenderLimits;

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // OpenAI-style tool list; omitted from the context when null or empty.
  nlohmann::ordered_json tools;
  // Extra template variables (chat_template_kwargs), e.g.
  // {"enable_thinking": false}. They override the defaults above.
  nlohmann::ordered_json kwargs;
};

class ChatTemplate {
 public:
  static constexpr int kMaxJsonDepth = 64;

  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(absl::string_view source,
                                                              ChatTemplateLimits limits = {});
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromFile(const std::string& path,
                                                                 ChatTemplateLimits limits = {});
  // Reads "chat_template" (a string, or a list of {name, template}: the one
  // named "default") and the bos/eos tokens from tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromTokenizerConfig(absl::string_view config_json,
                                                                            ChatTemplateLimits limits = {});
  // A model whose prompt format is code rather than a Jinja template
  // (DeepSeek-V3.2's encoding_dsv32.py: text/dsv32_encoding.h): Apply runs
  // `encoder`; Render has no template to render. `name` is its source().
  using Encoder = std::function<absl::StatusOr<std::string>(const nlohmann::ordered_json& messages,
                                                            const ChatTemplateOptions& options)>;
  static std::unique_ptr<ChatTemplate> FromEncoder(std::string name, Encoder encoder);

  // Renders with `context` (an object) as the template's variables.
  // Thread-safe: each call has its own interpreter state. Parse request
  // JSON with nlohmann::ordered_json: a plain nlohmann::json sorts object
  // keys, and tool schemas would then print in a different order than
  // transformers prints them.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  // apply_chat_template: messages, tools, add_generation_prompt, the
  // configured bos_token/eos_token, then options.kwargs.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate() = default;

  std::string source_;
  Encoder encoder_;  // set: not a Jinja template
  jinja::Body body_;
  ChatTemplateLimits limits_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace spar

#endif  // SPAR_TEXT_CHAT_TEMPLATE_H_
