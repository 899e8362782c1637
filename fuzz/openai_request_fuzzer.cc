// Fuzzes the OpenAI request layer (services/http/openai_request.h): the
// JSON body of /v1/completions or /v1/chat/completions, straight from any
// HTTP client, through parsing, the chat template (make-tiny's GLM-style
// one) and validation. Byte 0 picks the endpoint; the rest is the body.
//
// Properties: a refused body is an INVALID_ARGUMENT with a message; an
// accepted one yields validated GenerateParams (the ranges of
// generation.proto), one prompt each.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/tiny_tokenizer.h"
#include "fuzz/fuzz_check.h"
#include "services/http/openai_request.h"
#include "text/chat_template.h"
#include "text/utf8.h"

namespace {

const spar::ChatTemplate& Template() {
  static const spar::ChatTemplate* t = [] {
    spar::ChatTemplateLimits limits;
    limits.max_output_bytes = 1 << 20;
    limits.max_steps = 200000;
    auto parsed = spar::ChatTemplate::FromTokenizerConfig(spar::TinyTokenizerConfigJson(), limits);
    if (!parsed.ok()) std::abort();
    return parsed->release();
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto request = chat ? spar::http::ParseChatRequest(body) : spar::http::ParseCompletionRequest(body, 8);
  if (!request.ok()) {
    SPAR_FUZZ_CHECK(request.status().code() == absl::StatusCode::kInvalidArgument);
    SPAR_FUZZ_CHECK(!request.status().message().empty());
    return 0;
  }
  spar::ApiLimits limits;
  limits.vocab_size = 320;
  limits.max_model_len = 4096;
  limits.served_model_name = "tiny";
  auto params = spar::http::BuildGenerateParams(*request, &Template(), limits);
  if (!params.ok()) {
    SPAR_FUZZ_CHECK(!params.status().message().empty());
    return 0;
  }
  SPAR_FUZZ_CHECK(!params->empty());
  for (const spar::GenerateParams& p : *params) {
    SPAR_FUZZ_CHECK(p.text.has_value() != !p.prompt_ids.empty());
    if (p.text) SPAR_FUZZ_CHECK(spar::IsValidUtf8(*p.text));
    for (int32_t id : p.prompt_ids) SPAR_FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
    SPAR_FUZZ_CHECK(p.n >= 1 && p.n <= limits.max_n);
    if (p.max_tokens) SPAR_FUZZ_CHECK(*p.max_tokens >= 1 && *p.max_tokens < limits.max_model_len);
    SPAR_FUZZ_CHECK(p.sampling.temperature >= 0 && p.sampling.temperature <= 100);
    SPAR_FUZZ_CHECK(p.sampling.top_p > 0 && p.sampling.top_p <= 1);
    SPAR_FUZZ_CHECK(p.sampling.top_k >= 0);
    SPAR_FUZZ_CHECK(p.sampling.min_p >= 0 && p.sampling.min_p <= 1);
    SPAR_FUZZ_CHECK(std::fabs(p.sampling.frequency_penalty) <= 2 && std::fabs(p.sampling.presence_penalty) <= 2);
    SPAR_FUZZ_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= 20);
    SPAR_FUZZ_CHECK(static_cast<int>(p.stop_strings.size()) <= limits.max_stop_strings);
  }
  return 0;
}
