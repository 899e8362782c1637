// The shipped tiny GLM-5 chat model (models/tiny-glm5-chat) driven the way a
// server drives it: messages rendered with the model's own chat template
// (tokenizer_config.json), encoded with its tokenizer.json, answered by
// greedy decoding on the engine, decoded without special tokens.
#ifndef SPAR_TESTS_CHAT_TINY_CHAT_H_
#define SPAR_TESTS_CHAT_TINY_CHAT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace spar::testing {

class TinyChat {
 public:
  struct Options {
    std::string backend = "cpu";
    int64_t num_blocks = 1024;
    std::optional<uint64_t> random_topk_seed;  // the random-selection control
    int num_speculative_tokens = 0;            // > 0: the checkpoint's MTP layer drafts
  };

  static absl::StatusOr<std::unique_ptr<TinyChat>> Load(const std::string& dir, const Options& options) {
    auto chat = std::unique_ptr<TinyChat>(new TinyChat());
    SPAR_ASSIGN_OR_RETURN(chat->tokenizer_, Tokenizer::FromFile(dir + "/tokenizer.json"));
    SPAR_ASSIGN_OR_RETURN(std::string config, ReadFileToString(dir + "/tokenizer_config.json"));
    SPAR_ASSIGN_OR_RETURN(chat->template_, ChatTemplate::FromTokenizerConfig(config));
    EngineOptions eo;
    eo.backend = options.backend;
    eo.model.num_blocks = options.num_blocks;
    eo.model.random_topk_seed = options.random_topk_seed;
    eo.num_speculative_tokens = options.num_speculative_tokens;
    SPAR_ASSIGN_OR_RETURN(chat->engine_, Engine::Create(dir, eo));
    return chat;
  }

  // The prompt text for these messages, with the generation prompt.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages, bool enable_thinking = true) const {
    ChatTemplateOptions o;
    if (!enable_thinking) o.kwargs = {{"enable_thinking", false}};
    return template_->Apply(messages, o);
  }

  absl::StatusOr<std::vector<int32_t>> Prompt(const nlohmann::ordered_json& messages, bool enable_thinking = true) const {
    SPAR_ASSIGN_OR_RETURN(std::string text, Render(messages, enable_thinking));
    return tokenizer_->Encode(text);
  }

  // Greedy answers to several prompts in one continuous batch.
  absl::StatusOr<std::vector<std::string>> Answer(const std::vector<std::vector<int32_t>>& prompts,
                                                  int max_tokens = 16) {
    std::vector<GenerationRequest> reqs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      reqs[i].prompt = prompts[i];
      reqs[i].sampling.temperature = 0;
      reqs[i].seed = 0;
      reqs[i].max_tokens = max_tokens;
    }
    SPAR_ASSIGN_OR_RETURN(auto gens, engine_->Generate(reqs));
    std::vector<std::string> out;
    for (const auto& g : gens) {
      std::vector<int32_t> ids;
      for (const auto& t : g.tokens) ids.push_back(t.id);
      SPAR_ASSIGN_OR_RETURN(std::string text, tokenizer_->Decode(ids, /*skip_special=*/true));
      out.push_back(text);
    }
    return out;
  }

  Engine& engine() { return *engine_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  TinyChat() = default;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_CHAT_TINY_CHAT_H_
