#include "services/scheduler/generation_validate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/sampling_params.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "text/utf8.h"

namespace spar {
namespace {

absl::Status CheckPrompt(GenerateParams* p, const ApiLimits& limits, const GenerateFieldNames& names) {
  if (p->text) {
    if (p->text->empty()) return WithField(absl::InvalidArgumentError(absl::StrCat(names.text, " is empty: a prompt is required")), names.text);
    if (!IsValidUtf8(*p->text)) return WithField(absl::InvalidArgumentError(absl::StrCat(names.text, " is not valid UTF-8")), names.text);
    p->prompt_field = names.text;
    return absl::OkStatus();
  }
  if (p->prompt_ids.empty()) {
    return WithField(absl::InvalidArgumentError(absl::StrCat(names.token_ids, " is empty: a prompt is required")),
                     names.token_ids);
  }
  for (size_t i = 0; i < p->prompt_ids.size(); ++i) {
    const int32_t id = p->prompt_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      return InvalidField(absl::StrCat(names.token_ids, "[", i, "]"), absl::StrCat("must be in [0, ", limits.vocab_size, ")"),
                          absl::StrCat(id));
    }
  }
  if (static_cast<int64_t>(p->prompt_ids.size()) >= limits.max_model_len) {
    return InvalidField(names.token_ids,
                        absl::StrCat("must be shorter than the context length (", limits.max_model_len, " tokens)"),
                        absl::StrCat(p->prompt_ids.size(), " tokens"));
  }
  p->prompt_field = names.token_ids;
  return absl::OkStatus();
}

}  // namespace

const GenerateFieldNames& GrpcFieldNames() {
  static const GenerateFieldNames* names = new GenerateFieldNames{
      .request_id = "request_id",
      .text = "text",
      .token_ids = "token_ids.ids",
      .temperature = "sampling.temperature",
      .top_p = "sampling.top_p",
      .top_k = "sampling.top_k",
      .min_p = "sampling.min_p",
      .repetition_penalty = "sampling.repetition_penalty",
      .frequency_penalty = "sampling.frequency_penalty",
      .presence_penalty = "sampling.presence_penalty",
      .n = "sampling.n",
      .max_tokens = "stopping.max_tokens",
      .stop_token_ids = "stopping.stop_token_ids",
      .stop_strings = "stopping.stop_strings",
      .top_logprobs = "response.top_logprobs",
  };
  return *names;
}

absl::Status ValidateGenerateParams(GenerateParams* p, const ApiLimits& limits, const GenerateFieldNames& names) {
  if (p->request_id.size() > static_cast<size_t>(limits.max_request_id_bytes)) {
    return InvalidField(names.request_id, absl::StrCat("must be at most ", limits.max_request_id_bytes, " bytes"),
                        absl::StrCat(p->request_id.size(), " bytes"));
  }
  if (!IsValidUtf8(p->request_id)) {
    return WithField(absl::InvalidArgumentError(absl::StrCat(names.request_id, " is not valid UTF-8")), names.request_id);
  }
  SPAR_RETURN_IF_ERROR(CheckPrompt(p, limits, names));

  const SamplingFieldNames sampling_names{names.temperature,        names.top_p,
                                          names.top_k,              names.min_p,
                                          names.repetition_penalty, names.frequency_penalty,
                                          names.presence_penalty};
  if (auto bad = CheckSamplingParams(&p->sampling, sampling_names)) return InvalidField(bad->field, bad->rule, bad->got);
  if (p->n < 1 || p->n > limits.max_n) {
    return InvalidField(names.n, absl::StrCat("must be in [1, ", limits.max_n, "]"), absl::StrCat(p->n));
  }

  p->max_tokens_field = names.max_tokens;
  if (p->max_tokens && (*p->max_tokens < 1 || *p->max_tokens >= limits.max_model_len)) {
    return InvalidField(names.max_tokens, absl::StrCat("must be in [1, ", limits.max_model_len - 1, "]"),
                        absl::StrCat(*p->max_tokens));
  }
  if (p->stop_token_ids.size() > static_cast<size_t>(limits.max_stop_token_ids)) {
    return InvalidField(names.stop_token_ids, absl::StrCat("may hold at most ", limits.max_stop_token_ids, " ids"),
                        absl::StrCat(p->stop_token_ids.size()));
  }
  for (size_t i = 0; i < p->stop_token_ids.size(); ++i) {
    const int32_t id = p->stop_token_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      return InvalidField(absl::StrCat(names.stop_token_ids, "[", i, "]"),
                          absl::StrCat("must be in [0, ", limits.vocab_size, ")"), absl::StrCat(id));
    }
  }
  if (p->stop_strings.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return InvalidField(names.stop_strings, absl::StrCat("may hold at most ", limits.max_stop_strings, " strings"),
                        absl::StrCat(p->stop_strings.size()));
  }
  for (size_t i = 0; i < p->stop_strings.size(); ++i) {
    const std::string& stop = p->stop_strings[i];
    const std::string field = absl::StrCat(names.stop_strings, "[", i, "]");
    if (stop.empty() || stop.size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return InvalidField(field, absl::StrCat("must be 1 to ", limits.max_stop_string_bytes, " bytes"),
                          absl::StrCat(stop.size(), " bytes"));
    }
    if (!IsValidUtf8(stop)) return WithField(absl::InvalidArgumentError(absl::StrCat(field, " is not valid UTF-8")), field);
  }
  if (p->top_logprobs < 0 || p->top_logprobs > limits.max_top_logprobs) {
    return InvalidField(names.top_logprobs, absl::StrCat("must be in [0, ", limits.max_top_logprobs, "]"),
                        absl::StrCat(p->top_logprobs));
  }
  return absl::OkStatus();
}

}  // namespace spar
