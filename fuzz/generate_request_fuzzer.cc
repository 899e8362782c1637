// Fuzzes the public gRPC request path after the wire: protobuf bytes of a
// spar.v1.GenerateRequest (malformed ones included) -> ParseGenerateRequest
// (services/scheduler/generation_convert.h), the validation every client
// request passes before the scheduler sees it.
//
// Chat inputs are rendered with GLM-5's real chat template
// (tests/text/data/templates/glm5.jinja), as the scheduler renders them.
//
// Properties: an invalid request is an INVALID_ARGUMENT whose message names
// a field; an accepted one holds only values the scheduler and sampler are
// documented to take (the ranges in generation.proto).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "services/scheduler/generation_convert.h"
#include "spar/v1/generation.pb.h"
#include "text/chat_template.h"
#include "text/utf8.h"

namespace {

const spar::ChatTemplate* Glm5Template() {
  static const spar::ChatTemplate* t = [] {
    auto loaded =
        spar::ChatTemplate::FromFile(std::string(SPAR_SOURCE_DIR) + "/tests/text/data/templates/glm5.jinja");
    SPAR_FUZZ_CHECK(loaded.ok());
    return loaded->release();
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spar::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  spar::ApiLimits limits;
  limits.vocab_size = 320;
  limits.max_model_len = 4096;
  limits.served_model_name = "tiny";
  auto params = spar::ParseGenerateRequest(request, limits, Glm5Template());
  if (!params.ok()) {
    SPAR_FUZZ_CHECK(params.status().code() == absl::StatusCode::kInvalidArgument);
    SPAR_FUZZ_CHECK(!params.status().message().empty());
    return 0;
  }
  const spar::GenerateParams& p = *params;
  SPAR_FUZZ_CHECK(p.text.has_value() != !p.prompt_ids.empty());
  if (p.text) SPAR_FUZZ_CHECK(!p.text->empty() && spar::IsValidUtf8(*p.text));
  SPAR_FUZZ_CHECK(static_cast<int64_t>(p.prompt_ids.size()) < limits.max_model_len);
  for (int32_t id : p.prompt_ids) SPAR_FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  for (int32_t id : p.stop_token_ids) SPAR_FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  SPAR_FUZZ_CHECK(static_cast<int>(p.stop_token_ids.size()) <= limits.max_stop_token_ids);
  SPAR_FUZZ_CHECK(static_cast<int>(p.stop_strings.size()) <= limits.max_stop_strings);
  for (const std::string& s : p.stop_strings) {
    SPAR_FUZZ_CHECK(!s.empty() && static_cast<int>(s.size()) <= limits.max_stop_string_bytes && spar::IsValidUtf8(s));
  }
  SPAR_FUZZ_CHECK(p.n >= 1 && p.n <= limits.max_n);
  if (p.max_tokens) SPAR_FUZZ_CHECK(*p.max_tokens >= 1 && *p.max_tokens < limits.max_model_len);
  const auto& s = p.sampling;
  SPAR_FUZZ_CHECK(s.temperature >= 0 && s.temperature <= 100);
  SPAR_FUZZ_CHECK(s.top_p > 0 && s.top_p <= 1);
  SPAR_FUZZ_CHECK(s.top_k >= 0);
  SPAR_FUZZ_CHECK(s.min_p >= 0 && s.min_p <= 1);
  SPAR_FUZZ_CHECK(s.repetition_penalty > 0 && s.repetition_penalty <= 100);
  SPAR_FUZZ_CHECK(std::fabs(s.frequency_penalty) <= 2 && std::fabs(s.presence_penalty) <= 2);
  SPAR_FUZZ_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= 20);
  SPAR_FUZZ_CHECK(static_cast<int>(p.request_id.size()) <= limits.max_request_id_bytes);
  SPAR_FUZZ_CHECK(spar::IsValidUtf8(p.request_id));
  return 0;
}
