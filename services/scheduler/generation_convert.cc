#include "services/scheduler/generation_convert.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "services/scheduler/chat_input.h"

namespace spar {
namespace {

// proto3 unsigned fields hold values an int cannot; anything that large is
// out of every range the validator accepts, and still fails there.
int SaturatedInt(uint32_t v) { return v > static_cast<uint32_t>(INT32_MAX) ? INT32_MAX : static_cast<int>(v); }

}  // namespace

absl::StatusOr<GenerateParams> ParseGenerateRequest(const v1::GenerateRequest& r, const ApiLimits& limits,
                                                    const ChatTemplate* chat_template) {
  GenerateParams p;
  GenerateFieldNames names = GrpcFieldNames();
  p.request_id = r.request_id();
  if (!r.model().empty() && r.model() != limits.served_model_name) {
    return WithField(absl::InvalidArgumentError(absl::StrCat("model \"", r.model(),
                                                             "\" is not served here (this server serves \"",
                                                             limits.served_model_name, "\")")),
                     "model");
  }
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText:
      p.text = r.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      p.prompt_ids.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      SPAR_ASSIGN_OR_RETURN(std::string prompt, RenderChatInput(r.chat(), chat_template));
      p.text = std::move(prompt);
      names.text = "chat.messages";
      break;
    }
    default:
      return WithField(absl::InvalidArgumentError("prompt is missing: set text, token_ids or chat"), "prompt");
  }

  const v1::SamplingParams& s = r.sampling();
  SamplingParamsFromProto(s, &p.sampling);
  if (s.has_seed()) p.seed = s.seed();
  if (s.has_n()) p.n = SaturatedInt(s.n());

  const v1::StoppingCriteria& st = r.stopping();
  if (st.has_max_tokens()) p.max_tokens = SaturatedInt(st.max_tokens());
  p.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  p.stop_strings.assign(st.stop_strings().begin(), st.stop_strings().end());
  p.include_stop_strings = st.include_stop_strings();
  p.ignore_eos = st.ignore_eos();

  const v1::ResponseOptions& o = r.response();
  p.output_text = !o.has_output_text() || o.output_text();
  p.output_logprobs = o.output_logprobs();
  p.top_logprobs = SaturatedInt(o.top_logprobs());
  p.skip_special_tokens = !o.has_skip_special_tokens() || o.skip_special_tokens();
  p.echo_prompt_ids = o.prompt_token_ids();
  SPAR_RETURN_IF_ERROR(ValidateGenerateParams(&p, limits, names));
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
    us->set_cached_prompt_tokens(u.usage->cached_prompt_tokens);
  }
}

void SamplingParamsFromProto(const v1::SamplingParams& in, SamplingParams* out) {
  if (in.has_temperature()) out->temperature = in.temperature();
  if (in.has_top_p()) out->top_p = in.top_p();
  if (in.has_top_k()) out->top_k = in.top_k();
  if (in.has_min_p()) out->min_p = in.min_p();
  if (in.has_repetition_penalty()) out->repetition_penalty = in.repetition_penalty();
  if (in.has_frequency_penalty()) out->frequency_penalty = in.frequency_penalty();
  if (in.has_presence_penalty()) out->presence_penalty = in.presence_penalty();
}

void SamplingParamsToProto(const SamplingParams& in, v1::SamplingParams* out) {
  out->set_temperature(in.temperature);
  out->set_top_p(in.top_p);
  out->set_top_k(in.top_k);
  out->set_min_p(in.min_p);
  out->set_repetition_penalty(in.repetition_penalty);
  out->set_frequency_penalty(in.frequency_penalty);
  out->set_presence_penalty(in.presence_penalty);
}

}  // namespace spar
