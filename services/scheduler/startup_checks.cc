#include "services/scheduler/startup_checks.h"

#include "base/log.h"
#include "engine/model_config.h"
#include "text/dsv32_encoding.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"

namespace spar {
namespace {

// The conversation every chat template must render: one user message.
absl::Status ProbeChatTemplate(const ChatTemplate& t) {
  constexpr char kProbe[] = "Hello";
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", kProbe}}};
  auto prompt = t.Apply(messages, ChatTemplateOptions{});
  if (!prompt.ok()) return prompt.status();
  if (prompt->find(kProbe) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("its prompt leaves the message out: \"", *prompt, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTokenizerFitsModel(const Tokenizer& tokenizer, const ModelConfig& config) {
  if (tokenizer.vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json has token ids up to ", tokenizer.vocab_size() - 1, ", beyond the model's vocabulary (",
        "config.json vocab_size ", config.vocab_size, "): the tokenizer does not belong to this model"));
  }
  return absl::OkStatus();
}

namespace {

// No Jinja template: DeepSeek-V3.2 ships its prompt format as code
// (encoding_dsv32.py), which text/dsv32_encoding.h implements.
std::unique_ptr<ChatTemplate> WithoutTemplate(const std::string& model_dir) {
  auto config = LoadModelConfig(model_dir + "/config.json");
  if (config.ok() && config->model_type == "deepseek_v32") {
    SPAR_LOG(INFO) << "no chat template in " << model_dir << ": using DeepSeek-V3.2's encoding (encoding_dsv32.py rules)";
    return Dsv32ChatTemplate();
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadCheckedChatTemplate(const std::string& model_dir,
                                                                      const std::string& path) {
  std::string source, file;
  absl::StatusOr<std::unique_ptr<ChatTemplate>> t;
  if (path == kDsv32EncodingTemplate) {
    source = path;
    t = Dsv32ChatTemplate();
  } else if (!path.empty()) {
    source = absl::StrCat("--chat-template ", path);
    file = path;
    t = ChatTemplate::FromFile(path);
  } else if (const std::string jinja = model_dir + "/chat_template.jinja"; ::access(jinja.c_str(), F_OK) == 0) {
    source = file = jinja;
    t = ChatTemplate::FromFile(jinja);
  } else {
    source = model_dir + "/tokenizer_config.json";
    auto config = ReadFileToString(source);
    if (!config.ok()) return WithoutTemplate(model_dir);  // no tokenizer_config.json: no template
    t = ChatTemplate::FromTokenizerConfig(*config);
    if (!t.ok() && absl::IsNotFound(t.status())) return WithoutTemplate(model_dir);  // no chat_template in it
  }
  if (!t.ok()) {
    // FromFile names the file itself; said once is enough.
    absl::string_view why = t.status().message();
    if (!file.empty()) absl::ConsumePrefix(&why, file + ": ");
    return absl::Status(t.status().code(), absl::StrCat("chat template (", source, "): ", why));
  }
  if (absl::Status probe = ProbeChatTemplate(**t); !probe.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template (", source,
                                                   ") fails to render a one-message conversation: ", probe.message()));
  }
  return t;
}

}  // namespace spar
