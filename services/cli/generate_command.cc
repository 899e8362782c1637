// spar generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [flags]
// Runs the engine in-process and streams the completion to stdout.
#include <cstdio>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/engine.h"
#include "services/cli/args.h"
#include "services/cli/commands.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace spar {

int RunGenerate(int argc, char** argv) {
  std::string model, prompt, prompt_ids, backend = "cpu";
  int64_t max_tokens = 32, top_k = 0, seed = -1, num_blocks = 256;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0;
  bool ignore_eos = false, show_ids = false;
  ArgParser args("generate");
  args.AddString("model", &model, "model directory (config.json, safetensors, tokenizer.json)");
  args.AddString("prompt", &prompt, "prompt text (encoded with the model's tokenizer.json)");
  args.AddString("prompt-ids", &prompt_ids, "prompt as comma-separated token ids instead of text");
  args.AddInt("max-tokens", &max_tokens, "tokens to generate (default 32)");
  args.AddDouble("temperature", &temperature, "0 = greedy (default)");
  args.AddDouble("top-p", &top_p, "nucleus sampling mass (default 1 = off)");
  args.AddInt("top-k", &top_k, "sample from the k most likely (default 0 = off)");
  args.AddDouble("min-p", &min_p, "drop tokens below min_p x the top probability (default 0 = off)");
  args.AddInt("seed", &seed, "sampling seed (default: random)");
  args.AddBool("ignore-eos", &ignore_eos, "keep going past end-of-sequence tokens");
  args.AddBool("show-ids", &show_ids, "print token ids after the text");
  args.AddString("backend", &backend, "cpu (default) or cuda");
  args.AddInt("num-blocks", &num_blocks, "KV cache blocks of 64 tokens (default 256)");
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Usage();
    return 0;
  }
  if (model.empty() || (prompt.empty() == prompt_ids.empty())) {
    std::cerr << "generate: --model and exactly one of --prompt / --prompt-ids are required\n" << args.Usage();
    return 2;
  }
  auto tokenizer = Tokenizer::FromFile(model + "/tokenizer.json");
  if (!tokenizer.ok()) {
    std::cerr << "generate: " << tokenizer.status().message() << "\n";
    return 1;
  }
  GenerationRequest request;
  if (!prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_ids, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "generate: --prompt-ids: \"" << part << "\" is not an integer\n";
        return 2;
      }
      request.prompt.push_back(id);
    }
  } else {
    auto ids = (*tokenizer)->Encode(prompt);
    if (!ids.ok()) {
      std::cerr << "generate: " << ids.status().message() << "\n";
      return 1;
    }
    request.prompt = *ids;
  }
  request.max_tokens = static_cast<int>(max_tokens);
  request.sampling.temperature = static_cast<float>(temperature);
  request.sampling.top_p = static_cast<float>(top_p);
  request.sampling.top_k = static_cast<int>(top_k);
  request.sampling.min_p = static_cast<float>(min_p);
  if (seed >= 0) request.seed = static_cast<uint64_t>(seed);
  request.ignore_eos = ignore_eos;
  EngineOptions options;
  options.backend = backend;
  options.model.num_blocks = num_blocks;
  auto engine = Engine::Create(model, options);
  if (!engine.ok()) {
    std::cerr << "generate: " << engine.status().message() << "\n";
    return 1;
  }
  IncrementalDetokenizer detok(tokenizer->get(), /*skip_special=*/true);
  std::cout << prompt << std::flush;
  // Model vocabularies are padded beyond the tokenizer (GLM-5: 154880 rows);
  // ids without a token print nothing, as in Hugging Face's decode.
  int untokenizable = 0;
  auto result = (*engine)->Generate({request}, [&](size_t, const GeneratedToken& t) {
    auto delta = detok.Add(t.id);
    if (!delta.ok()) {
      ++untokenizable;
      return;
    }
    std::cout << *delta << std::flush;
  });
  std::cout << detok.Finish() << "\n";
  if (!result.ok()) {
    std::cerr << "generate: " << result.status().message() << "\n";
    return 1;
  }
  if (untokenizable > 0) std::cerr << "[" << untokenizable << " generated ids have no token in tokenizer.json]\n";
  const Generation& g = (*result)[0];
  std::cerr << "[" << request.prompt.size() << " prompt tokens, " << g.tokens.size() << " generated, finish: "
            << (g.finish == FinishReason::kStop ? "stop" : "length") << "]\n";
  if (show_ids) {
    for (const auto& t : g.tokens) std::cout << t.id << " ";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace spar
