// spar generate (--model DIR | --server HOST:PORT) (--prompt TEXT | --prompt-ids 1,2,3) [flags]
// With --model: runs the engine in-process. With --server: streams the
// completion from a running spar-scheduler (spar.v1 Generation API).
// Either way the completion streams to stdout and a summary to stderr.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <grpcpp/client_context.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "services/cli/commands.h"
#include "services/common/args.h"
#include "services/common/cache_flags.h"
#include "services/common/daemon.h"
#include "services/scheduler/generation_convert.h"
#include "services/scheduler/startup_checks.h"
#include "spar/v1/generation.grpc.pb.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace spar {
namespace {

struct GenerateFlags {
  std::string model, server, prompt, prompt_ids, backend = "cpu", stop, request_id, api_key;
  int64_t max_tokens = 32, top_k = 0, seed = -1, num_blocks = 256, n = 1, top_logprobs = 0, max_model_len = 0;
  int64_t num_speculative_tokens = 0;
  double gpu_memory_utilization = 0;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0, frequency_penalty = 0.0,
         presence_penalty = 0.0, timeout_s = 300;
  bool ignore_eos = false, show_ids = false, logprobs = false, chat = false, enforce_eager = false;
  CacheDtypeFlags cache;
  CacheDtypes cache_dtypes;  // parsed from `cache`

  // The sampling flags as every layer holds them (the seed is the request's).
  SamplingParams Sampling() const {
    SamplingParams s;
    s.temperature = static_cast<float>(temperature);
    s.top_p = static_cast<float>(top_p);
    s.top_k = static_cast<int32_t>(top_k);
    s.min_p = static_cast<float>(min_p);
    s.repetition_penalty = static_cast<float>(repetition_penalty);
    s.frequency_penalty = static_cast<float>(frequency_penalty);
    s.presence_penalty = static_cast<float>(presence_penalty);
    return s;
  }
};

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(std::string("--prompt-ids: \"") + std::string(part) + "\" is not an integer");
    }
    ids.push_back(id);
  }
  return ids;
}

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_ABORTED:
      return "aborted";
    default:
      return "unfinished";
  }
}

// Streams from a scheduler. Returns the exit code.
int RunRemote(const GenerateFlags& f) {
  v1::GenerateRequest req;
  req.set_request_id(f.request_id);
  if (!f.prompt_ids.empty()) {
    auto ids = ParseIds(f.prompt_ids);
    if (!ids.ok()) {
      std::cerr << "generate: " << ids.status().message() << "\n";
      return 2;
    }
    req.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  } else if (f.chat) {
    // The server renders it with its chat template (spar.v1.ChatInput).
    v1::ChatCompletionMessage* m = req.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(f.prompt);
  } else {
    req.set_text(f.prompt);
  }
  v1::SamplingParams* s = req.mutable_sampling();
  SamplingParamsToProto(f.Sampling(), s);
  if (f.seed >= 0) s->set_seed(static_cast<uint64_t>(f.seed));
  s->set_n(static_cast<uint32_t>(f.n));
  v1::StoppingCriteria* st = req.mutable_stopping();
  st->set_max_tokens(static_cast<uint32_t>(f.max_tokens));
  st->set_ignore_eos(f.ignore_eos);
  if (!f.stop.empty()) st->add_stop_strings(f.stop);
  req.mutable_response()->set_output_logprobs(f.logprobs);
  req.mutable_response()->set_top_logprobs(static_cast<uint32_t>(f.top_logprobs));

  auto stub = v1::Generation::NewStub(CreatePublicChannel(f.server));
  grpc::ClientContext ctx;
  if (!f.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + f.api_key);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1e3)));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  if (f.n == 1 && !f.prompt.empty()) std::cout << f.prompt << (f.chat ? "\n" : "") << std::flush;
  std::vector<std::vector<int32_t>> ids(f.n);
  std::vector<std::string> texts(f.n);
  std::vector<std::string> finish(f.n, "unfinished");
  std::vector<float> logprobs;
  int prompt_tokens = 0;
  std::string request_id;
  while (reader->Read(&resp)) {
    request_id = resp.request_id();
    if (resp.has_prompt_info()) prompt_tokens = static_cast<int>(resp.prompt_info().num_prompt_tokens());
    const v1::SequenceOutput& o = resp.output();
    if (o.index() >= static_cast<uint32_t>(f.n)) continue;
    ids[o.index()].insert(ids[o.index()].end(), o.token_ids().begin(), o.token_ids().end());
    logprobs.insert(logprobs.end(), o.logprobs().begin(), o.logprobs().end());
    if (f.n == 1) {
      std::cout << o.text() << std::flush;
    } else {
      texts[o.index()] += o.text();
    }
    if (o.has_finish()) finish[o.index()] = FinishName(o.finish().reason());
  }
  grpc::Status status = reader->Finish();
  if (f.n == 1) std::cout << "\n";
  for (int i = 0; f.n > 1 && i < f.n; ++i) std::cout << "[" << i << "] " << (f.chat ? "" : f.prompt) << texts[i] << "\n";
  if (!status.ok()) {
    std::cerr << "generate: " << f.server << ": " << status.error_message() << " (code " << status.error_code()
              << ")\n";
    return 1;
  }
  for (int i = 0; i < f.n; ++i) {
    std::cerr << "[" << request_id << (f.n > 1 ? "/" + std::to_string(i) : "") << ": " << prompt_tokens
              << " prompt tokens, " << ids[i].size() << " generated, finish: " << finish[i] << "]\n";
  }
  if (f.show_ids) {
    for (const auto& seq : ids) {
      for (int32_t id : seq) std::cout << id << " ";
      std::cout << "\n";
    }
  }
  if (f.logprobs) {
    for (float lp : logprobs) std::cout << lp << " ";
    std::cout << "\n";
  }
  return 0;
}

// --chat in-process: the prompt as one user message, rendered with the
// template the scheduler would use (startup_checks.h) and its generation
// prompt, as a chat server would send it.
absl::StatusOr<std::string> RenderUserMessage(const std::string& model_dir, const std::string& prompt) {
  SPAR_ASSIGN_OR_RETURN(auto tmpl, LoadCheckedChatTemplate(model_dir, ""));
  if (tmpl == nullptr) return absl::NotFoundError(absl::StrCat(model_dir, " has no chat template"));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return tmpl->Apply(messages, ChatTemplateOptions());
}

int RunLocal(const GenerateFlags& f) {
  auto tokenizer = Tokenizer::FromFile(f.model + "/tokenizer.json");
  if (!tokenizer.ok()) {
    std::cerr << "generate: " << tokenizer.status().message() << "\n";
    return 1;
  }
  GenerationRequest request;
  if (!f.prompt_ids.empty()) {
    auto ids = ParseIds(f.prompt_ids);
    if (!ids.ok()) {
      std::cerr << "generate: " << ids.status().message() << "\n";
      return 2;
    }
    request.prompt = *ids;
  } else {
    auto text = f.chat ? RenderUserMessage(f.model, f.prompt) : absl::StatusOr<std::string>(f.prompt);
    if (!text.ok()) {
      std::cerr << "generate: " << text.status().message() << "\n";
      return 1;
    }
    auto ids = (*tokenizer)->Encode(*text);
    if (!ids.ok()) {
      std::cerr << "generate: " << ids.status().message() << "\n";
      return 1;
    }
    request.prompt = *ids;
  }
  request.max_tokens = static_cast<int>(f.max_tokens);
  request.sampling = f.Sampling();
  if (f.seed >= 0) request.seed = static_cast<uint64_t>(f.seed);
  request.ignore_eos = f.ignore_eos;
  request.top_logprobs = static_cast<int>(f.top_logprobs);
  EngineOptions options;
  options.backend = f.backend;
  options.model.num_blocks = f.num_blocks;
  options.model.gpu_memory_utilization = f.gpu_memory_utilization;
  options.model.max_model_len = f.max_model_len;
  options.backend_options.enforce_eager = f.enforce_eager;
  options.num_speculative_tokens = static_cast<int>(f.num_speculative_tokens);
  options.cache_dtypes = f.cache_dtypes;
  auto engine = Engine::Create(f.model, options);
  if (!engine.ok()) {
    std::cerr << "generate: " << engine.status().message() << "\n";
    return 1;
  }
  IncrementalDetokenizer detok(tokenizer->get(), /*skip_special=*/true);
  std::cout << f.prompt << (f.chat ? "\n" : "") << std::flush;  // a chat answer starts on its own line
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
  if (f.num_speculative_tokens > 0) {
    const SpeculationStats& st = (*engine)->speculation_stats();
    std::cerr << "[speculative decoding: " << st.num_drafts << " verify steps, " << st.num_draft_tokens
              << " tokens drafted, " << st.num_accepted_tokens << " accepted ("
              << absl::StrFormat("%.2f", st.mean_acceptance_length()) << " tokens per verify step)]\n";
  }
  if (f.show_ids) {
    for (const auto& t : g.tokens) std::cout << t.id << " ";
    std::cout << "\n";
  }
  if (f.logprobs) {
    for (const auto& t : g.tokens) std::cout << t.logprob << " ";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

int RunGenerate(int argc, char** argv) {
  GenerateFlags f;
  ArgParser args("generate");
  args.AddString("model", &f.model, "run in-process on this model directory (config.json, safetensors, tokenizer.json)");
  args.AddString("server", &f.server, "or: stream from a running spar-scheduler at HOST:PORT");
  args.AddString("prompt", &f.prompt, "prompt text (encoded with the model's tokenizer.json)");
  args.AddString("prompt-ids", &f.prompt_ids, "prompt as comma-separated token ids instead of text");
  args.AddInt("max-tokens", &f.max_tokens, "tokens to generate (default 32)");
  args.AddDouble("temperature", &f.temperature, "0 = greedy (default)");
  args.AddDouble("top-p", &f.top_p, "nucleus sampling mass (default 1 = off)");
  args.AddInt("top-k", &f.top_k, "sample from the k most likely (default 0 = off)");
  args.AddDouble("min-p", &f.min_p, "drop tokens below min_p x the top probability (default 0 = off)");
  args.AddDouble("repetition-penalty", &f.repetition_penalty, "default 1 = off");
  args.AddDouble("frequency-penalty", &f.frequency_penalty, "default 0");
  args.AddDouble("presence-penalty", &f.presence_penalty, "default 0");
  args.AddInt("seed", &f.seed, "sampling seed (default: random)");
  args.AddBool("ignore-eos", &f.ignore_eos, "keep going past end-of-sequence tokens");
  args.AddBool("show-ids", &f.show_ids, "print token ids after the text");
  args.AddString("api-key", &f.api_key, "--server: the key of a scheduler started with --api-key (or SPAR_API_KEY)");
  if (const char* key = std::getenv("SPAR_API_KEY"); key != nullptr) f.api_key = key;
  args.AddBool("logprobs", &f.logprobs, "print the logprob of every generated token after the text");
  args.AddBool("chat", &f.chat,
               "send --prompt as a user message through the chat template (--model: the model's; --server: the "
               "scheduler's)");
  args.AddInt("top-logprobs", &f.top_logprobs, "alternatives per token to compute (default 0)");
  args.AddString("backend", &f.backend, "in-process: cpu (default) or cuda");
  args.AddInt("num-blocks", &f.num_blocks, "in-process: KV cache blocks of 64 tokens (default 256)");
  args.AddDouble("gpu-memory-utilization", &f.gpu_memory_utilization,
                 "in-process, cuda: size the KV cache to this fraction of GPU memory (0..1; 0 = --num-blocks)");
  args.AddInt("max-model-len", &f.max_model_len, "in-process: longest sequence served (default: the model's)");
  args.AddBool("enforce-eager", &f.enforce_eager,
               "in-process, cuda: run decode steps op by op instead of replaying them as CUDA graphs");
  args.AddInt("num-speculative-tokens", &f.num_speculative_tokens,
              "in-process: MTP speculative decoding, drafts verified per step (1-4; default 0 = off)");
  f.cache.Register(&args);
  args.AddInt("n", &f.n, "--server: sequences to generate (default 1)");
  args.AddString("stop", &f.stop, "--server: a stop string");
  args.AddString("request-id", &f.request_id, "--server: the request id (default: assigned)");
  args.AddDouble("timeout-s", &f.timeout_s, "--server: deadline of the call (default 300)");
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  if (f.model.empty() == f.server.empty() || f.prompt.empty() == f.prompt_ids.empty()) {
    std::cerr << "generate: exactly one of --model / --server and one of --prompt / --prompt-ids are required\n"
              << args.Usage();
    return 2;
  }
  if (f.chat && f.prompt.empty()) {
    std::cerr << "generate: --chat needs --prompt (the user message)\n";
    return 2;
  }
  if (!(f.gpu_memory_utilization >= 0 && f.gpu_memory_utilization <= 1) || f.max_model_len < 0) {
    std::cerr << "generate: --gpu-memory-utilization must be in [0, 1] and --max-model-len >= 0\n";
    return 2;
  }
  if (f.num_speculative_tokens < 0 || f.num_speculative_tokens > kMaxSpeculativeTokens) {
    std::cerr << "generate: --num-speculative-tokens must be 0 (off) to " << kMaxSpeculativeTokens << ", got "
              << f.num_speculative_tokens << "\n";
    return 2;
  }
  if (f.num_speculative_tokens > 0 && f.model.empty()) {
    std::cerr << "generate: --num-speculative-tokens is the in-process engine's (--model); a scheduler sets its own\n";
    return 2;
  }
  if (f.n < 1 || f.max_tokens < 1 || f.top_logprobs < 0) {
    std::cerr << "generate: --n and --max-tokens must be >= 1, --top-logprobs >= 0\n";
    return 2;
  }
  if (auto formats = f.cache.Resolve(f.backend); !formats.ok()) {
    std::cerr << "generate: " << formats.status().message() << "\n";
    return 2;
  }
  f.cache_dtypes = *f.cache.Parse();
  return f.server.empty() ? RunLocal(f) : RunRemote(f);
}

}  // namespace spar
