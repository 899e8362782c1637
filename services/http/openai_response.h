// The response side of the OpenAI-compatible API, pure: the scheduler's
// GenerationUpdates of one HTTP request (one scheduler request per prompt,
// n sequences each) become either SSE chunks (stream: true) or, at the
// end, the whole response body. Choice i of prompt p is index p * n + i.
//
//   completions  object "text_completion"; choices[].text; logprobs as
//                {tokens, token_logprobs, top_logprobs, text_offset}
//   chat         object "chat.completion" / "chat.completion.chunk";
//                choices[].message or .delta {role, content, and with
//                the output parsers reasoning_content, tool_calls
//                (services/http/chat_output.h)}; logprobs as
//                {content: [{token, logprob, bytes, top_logprobs}]}
//   both         finish_reason stop | length | abort, vLLM's stop_reason
//                (the stop string or stop token id; null for EOS), usage,
//                token_ids / prompt_token_ids when return_token_ids.
//
// Logprobs of -inf are written as -9999.0 (JSON has no infinity; vLLM's
// convention). Thread-compatible.
#ifndef SPAR_SERVICES_HTTP_OPENAI_RESPONSE_H_
#define SPAR_SERVICES_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "services/http/chat_output.h"
#include "services/http/json_fields.h"
#include "services/http/openai_request.h"
#include "services/http/token_strings.h"
#include "services/scheduler/generation_types.h"

namespace spar::http {

struct ResponseOptions {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;  // the served model name
  int64_t created = 0;
  int n = 1;
  int num_prompts = 1;
  bool logprobs = false;
  int top_logprobs = 0;
  bool echo = false;
  bool return_token_ids = false;
  bool stream = false;  // build SSE chunks (else only the final body)
  bool include_usage = false;
  bool continuous_usage = false;
  // Chat: how the output splits into reasoning_content, content and
  // tool_calls (inactive: all of it is content), and the request's tools
  // (their schemas type the arguments).
  ChatOutputSyntax chat_syntax;
  Json tools;

  static ResponseOptions For(const OpenAiRequest& request, std::string id, std::string model, int64_t created);
};

class ResponseBuilder {
 public:
  // `tokens` must outlive the builder.
  ResponseBuilder(ResponseOptions options, const TokenStrings* tokens);
  // Choices' output streams point at options_.tools: the builder stays put.
  ResponseBuilder(const ResponseBuilder&) = delete;
  ResponseBuilder& operator=(const ResponseBuilder&) = delete;

  // Completions with echo: the text each choice of `prompt` starts with.
  void SetEchoText(int prompt, std::string text);

  // Consumes an update of prompt `prompt`'s request; returns the stream
  // chunks it makes (possibly none). The same state serves Response().
  std::vector<Json> Add(int prompt, const GenerationUpdate& update);

  // The last stream chunk when include_usage: no choices, the usage.
  Json UsageChunk() const;
  // The non-streaming body, once every choice finished.
  Json Response() const;

  int prompt_tokens() const;
  int completion_tokens() const;

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<int32_t> prompt_ids;
    Json logprobs;             // accumulated (non-streaming)
    int64_t text_offset = 0;   // code points so far (completions text_offset)
    bool started = false;      // first chunk sent (role / echo)
    std::unique_ptr<ChatOutputStream> output;  // when chat_syntax is active
    int num_tokens = 0;
    std::optional<FinishInfo> finish;
  };

  Json Chunk(Json choice) const;
  Json Usage() const;
  // Logprobs of the tokens of one update, in the endpoint's format.
  Json LogprobsOf(Choice& c, const SequenceUpdate& u);

  const ResponseOptions options_;
  const TokenStrings* tokens_;
  std::vector<Choice> choices_;
  std::vector<std::string> echo_;
  std::vector<int> prompt_tokens_;      // per prompt
  std::vector<int> completion_tokens_;  // per prompt, from the final usage
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OPENAI_RESPONSE_H_
