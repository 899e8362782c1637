#include "services/scheduler/generation_convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "text/utf8.h"

namespace spar {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view rule, const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule, ", got ", got));
}

std::string Num(double v) { return std::isnan(v) ? "NaN" : absl::StrCat(v); }

}  // namespace

absl::StatusOr<GenerateParams> ParseGenerateRequest(const v1::GenerateRequest& r, const ApiLimits& limits) {
  GenerateParams p;
  if (r.request_id().size() > static_cast<size_t>(limits.max_request_id_bytes)) {
    return Bad("request_id", absl::StrCat("must be at most ", limits.max_request_id_bytes, " bytes"),
               absl::StrCat(r.request_id().size(), " bytes"));
  }
  if (!IsValidUtf8(r.request_id())) return absl::InvalidArgumentError("request_id is not valid UTF-8");
  p.request_id = r.request_id();
  if (!r.model().empty() && r.model() != limits.served_model_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", r.model(), "\" is not served here (this server serves \"", limits.served_model_name,
                     "\")"));
  }

  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText:
      if (r.text().empty()) return absl::InvalidArgumentError("text is empty: a prompt is required");
      if (!IsValidUtf8(r.text())) return absl::InvalidArgumentError("text is not valid UTF-8");
      p.text = r.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      if (r.token_ids().ids_size() == 0) return absl::InvalidArgumentError("token_ids.ids is empty: a prompt is required");
      for (int i = 0; i < r.token_ids().ids_size(); ++i) {
        const int32_t id = r.token_ids().ids(i);
        if (id < 0 || id >= limits.vocab_size) {
          return Bad(absl::StrCat("token_ids.ids[", i, "]"), absl::StrCat("must be in [0, ", limits.vocab_size, ")"),
                     absl::StrCat(id));
        }
      }
      p.prompt_ids.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
      if (static_cast<int64_t>(p.prompt_ids.size()) >= limits.max_model_len) {
        return Bad("token_ids.ids", absl::StrCat("must be shorter than the context length (", limits.max_model_len,
                                                 " tokens)"),
                   absl::StrCat(p.prompt_ids.size(), " tokens"));
      }
      break;
    default:
      return absl::InvalidArgumentError("prompt is missing: set text or token_ids");
  }

  const v1::SamplingParams& s = r.sampling();
  if (s.has_temperature()) {
    if (!(s.temperature() >= 0 && s.temperature() <= 100)) {
      return Bad("sampling.temperature", "must be in [0, 100]", Num(s.temperature()));
    }
    p.sampling.temperature = s.temperature();
  }
  if (s.has_top_p()) {
    if (!(s.top_p() > 0 && s.top_p() <= 1)) return Bad("sampling.top_p", "must be in (0, 1]", Num(s.top_p()));
    p.sampling.top_p = s.top_p();
  }
  if (s.has_top_k()) {
    if (s.top_k() < -1) return Bad("sampling.top_k", "must be >= 0 (0 or -1: off)", absl::StrCat(s.top_k()));
    p.sampling.top_k = s.top_k() < 0 ? 0 : s.top_k();
  }
  if (s.has_min_p()) {
    if (!(s.min_p() >= 0 && s.min_p() <= 1)) return Bad("sampling.min_p", "must be in [0, 1]", Num(s.min_p()));
    p.sampling.min_p = s.min_p();
  }
  if (s.has_repetition_penalty()) {
    if (!(s.repetition_penalty() > 0 && s.repetition_penalty() <= 100)) {
      return Bad("sampling.repetition_penalty", "must be in (0, 100]", Num(s.repetition_penalty()));
    }
    p.sampling.repetition_penalty = s.repetition_penalty();
  }
  if (s.has_frequency_penalty()) {
    if (!(s.frequency_penalty() >= -2 && s.frequency_penalty() <= 2)) {
      return Bad("sampling.frequency_penalty", "must be in [-2, 2]", Num(s.frequency_penalty()));
    }
    p.sampling.frequency_penalty = s.frequency_penalty();
  }
  if (s.has_presence_penalty()) {
    if (!(s.presence_penalty() >= -2 && s.presence_penalty() <= 2)) {
      return Bad("sampling.presence_penalty", "must be in [-2, 2]", Num(s.presence_penalty()));
    }
    p.sampling.presence_penalty = s.presence_penalty();
  }
  if (s.has_seed()) p.seed = s.seed();
  if (s.has_n()) {
    if (s.n() < 1 || s.n() > static_cast<uint32_t>(limits.max_n)) {
      return Bad("sampling.n", absl::StrCat("must be in [1, ", limits.max_n, "]"), absl::StrCat(s.n()));
    }
    p.n = static_cast<int>(s.n());
  }

  const v1::StoppingCriteria& st = r.stopping();
  if (st.has_max_tokens()) {
    if (st.max_tokens() < 1 || st.max_tokens() >= limits.max_model_len) {
      return Bad("stopping.max_tokens", absl::StrCat("must be in [1, ", limits.max_model_len - 1, "]"),
                 absl::StrCat(st.max_tokens()));
    }
    p.max_tokens = static_cast<int>(st.max_tokens());
  }
  if (st.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Bad("stopping.stop_token_ids", absl::StrCat("may hold at most ", limits.max_stop_token_ids, " ids"),
               absl::StrCat(st.stop_token_ids_size()));
  }
  for (int i = 0; i < st.stop_token_ids_size(); ++i) {
    const int32_t id = st.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Bad(absl::StrCat("stopping.stop_token_ids[", i, "]"), absl::StrCat("must be in [0, ", limits.vocab_size, ")"),
                 absl::StrCat(id));
    }
    p.stop_token_ids.push_back(id);
  }
  if (st.stop_strings_size() > limits.max_stop_strings) {
    return Bad("stopping.stop_strings", absl::StrCat("may hold at most ", limits.max_stop_strings, " strings"),
               absl::StrCat(st.stop_strings_size()));
  }
  for (int i = 0; i < st.stop_strings_size(); ++i) {
    const std::string& stop = st.stop_strings(i);
    const std::string field = absl::StrCat("stopping.stop_strings[", i, "]");
    if (stop.empty() || stop.size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return Bad(field, absl::StrCat("must be 1 to ", limits.max_stop_string_bytes, " bytes"),
                 absl::StrCat(stop.size(), " bytes"));
    }
    if (!IsValidUtf8(stop)) return absl::InvalidArgumentError(absl::StrCat(field, " is not valid UTF-8"));
    p.stop_strings.push_back(stop);
  }
  p.include_stop_strings = st.include_stop_strings();
  p.ignore_eos = st.ignore_eos();

  const v1::ResponseOptions& o = r.response();
  p.output_text = !o.has_output_text() || o.output_text();
  p.output_logprobs = o.output_logprobs();
  if (o.top_logprobs() > 20) return Bad("response.top_logprobs", "must be in [0, 20]", absl::StrCat(o.top_logprobs()));
  p.top_logprobs = static_cast<int>(o.top_logprobs());
  p.skip_special_tokens = !o.has_skip_special_tokens() || o.skip_special_tokens();
  p.echo_prompt_ids = o.prompt_token_ids();
  return p;
}

void UpdateToProto(const GenerationUpdate& u, v1::GenerateResponse* out) {
  out->set_request_id(u.request_id);
  if (u.prompt) {
    v1::PromptInfo* p = out->mutable_prompt_info();
    p->set_num_prompt_tokens(u.prompt->num_prompt_tokens);
    p->mutable_prompt_token_ids()->Add(u.prompt->prompt_ids.begin(), u.prompt->prompt_ids.end());
  }
  v1::SequenceOutput* o = out->mutable_output();
  o->set_index(u.output.index);
  o->set_text(u.output.text);
  o->mutable_token_ids()->Add(u.output.token_ids.begin(), u.output.token_ids.end());
  o->mutable_logprobs()->Add(u.output.logprobs.begin(), u.output.logprobs.end());
  for (const auto& top : u.output.top) {
    v1::TopLogprobs* t = o->add_top_logprobs();
    for (const auto& [id, lp] : top) {
      t->add_token_ids(id);
      t->add_logprobs(lp);
    }
  }
  if (u.output.finish) {
    const FinishInfo& f = *u.output.finish;
    v1::FinishInfo* pf = o->mutable_finish();
    switch (f.reason) {
      case SeqFinishReason::kLength:
        pf->set_reason(v1::FINISH_REASON_LENGTH);
        break;
      case SeqFinishReason::kStop:
        pf->set_reason(v1::FINISH_REASON_STOP);
        break;
      case SeqFinishReason::kAborted:
        pf->set_reason(v1::FINISH_REASON_ABORTED);
        break;
    }
    pf->set_num_output_tokens(f.num_output_tokens);
    if (f.stop_string) {
      pf->set_stop_string(*f.stop_string);
    } else if (f.eos_token_id) {
      pf->set_eos_token_id(*f.eos_token_id);
    } else if (f.stop_token_id) {
      pf->set_stop_token_id(*f.stop_token_id);
    }
  }
  if (u.usage) {
    v1::Usage* us = out->mutable_usage();
    us->set_prompt_tokens(u.usage->prompt_tokens);
    us->set_completion_tokens(u.usage->completion_tokens);
    us->set_total_tokens(u.usage->prompt_tokens + u.usage->completion_tokens);
  }
}

}  // namespace spar
