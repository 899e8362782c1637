// What spar-scheduler checks once at start-up, so that a model it cannot
// serve is refused with one line (and a non-zero exit) instead of failing
// every request later: the engine can serve the config, the tokenizer's ids
// fit the model's vocabulary, and the chat template loads and renders a
// probe conversation.
#ifndef SPAR_SERVICES_SCHEDULER_STARTUP_CHECKS_H_
#define SPAR_SERVICES_SCHEDULER_STARTUP_CHECKS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace spar {

// Every id of `tokenizer` (vocabulary and added tokens) is below the
// model's vocab_size: a larger one has no embedding row and no logit.
absl::Status CheckTokenizerFitsModel(const Tokenizer& tokenizer, const ModelConfig& config);

// `--chat-template dsv32-encoding`: DeepSeek-V3.2's encoding in C++
// (text/dsv32_encoding.h) instead of a Jinja file.
inline constexpr char kDsv32EncodingTemplate[] = "dsv32-encoding";

// The chat template: `path` (--chat-template) when given, else the model
// directory's chat_template.jinja, else tokenizer_config.json's
// chat_template, else for a DeepSeek-V3.2 model (config.json model_type
// deepseek_v32, which ships its format as encoding_dsv32.py) the encoding.
// Null when the model has none: chat is then refused per request. Any template found must parse and render a
// one-message conversation that contains the message; else the error says
// which template failed and how.
absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadCheckedChatTemplate(const std::string& model_dir,
                                                                      const std::string& path);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_STARTUP_CHECKS_H_
