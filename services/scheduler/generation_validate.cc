#include "services/scheduler/generation_validate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "text/utf8.h"

namespace spar {
namespace {

std::string Num(double v) { return std::isnan(v) ? "NaN" : absl::StrCat(v); }

absl::Status CheckRange(const std::string& field, double v, double lo, bool lo_open, double hi,
                        absl::string_view rule) {
  const bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;  // false for NaN
  return ok ? absl::OkStatus() : InvalidField(field, rule, Num(v));
}

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

  ref::SamplingParams& s = p->sampling;
  SPAR_RETURN_IF_ERROR(CheckRange(names.temperature, s.temperature, 0, false, 100, "must be in [0, 100]"));
  SPAR_RETURN_IF_ERROR(CheckRange(names.top_p, s.top_p, 0, true, 1, "must be in (0, 1]"));
  if (s.top_k < -1) return InvalidField(names.top_k, "must be >= 0 (0 or -1: off)", absl::StrCat(s.top_k));
  if (s.top_k < 0) s.top_k = 0;
  SPAR_RETURN_IF_ERROR(CheckRange(names.min_p, s.min_p, 0, false, 1, "must be in [0, 1]"));
  SPAR_RETURN_IF_ERROR(CheckRange(names.repetition_penalty, s.repetition_penalty, 0, true, 100, "must be in (0, 100]"));
  SPAR_RETURN_IF_ERROR(CheckRange(names.frequency_penalty, s.frequency_penalty, -2, false, 2, "must be in [-2, 2]"));
  SPAR_RETURN_IF_ERROR(CheckRange(names.presence_penalty, s.presence_penalty, -2, false, 2, "must be in [-2, 2]"));
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
