#include "services/common/worker_convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "services/common/grpc_status.h"

namespace spar {

void SamplingToProto(const SequenceSampling& s, v1::SamplingState* out) {
  out->set_temperature(s.params.temperature);
  out->set_top_k(s.params.top_k);
  out->set_top_p(s.params.top_p);
  out->set_min_p(s.params.min_p);
  out->set_repetition_penalty(s.params.repetition_penalty);
  out->set_frequency_penalty(s.params.frequency_penalty);
  out->set_presence_penalty(s.params.presence_penalty);
  out->set_seed(s.params.seed);
  out->set_prompt_len(s.prompt_len);
  out->set_top_logprobs(s.top_logprobs);
  if (s.constraint) {
    v1::Constraint* c = out->mutable_constraint();
    c->set_spec(s.constraint->spec);
    c->mutable_end_token_ids()->Add(s.constraint->end_token_ids.begin(), s.constraint->end_token_ids.end());
    c->set_max_tokens(s.constraint->max_tokens);
  }
}

absl::StatusOr<SequenceSampling> SamplingFromProto(const v1::SamplingState& in) {
  auto bad = [](const char* field, auto value, const char* range) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", field, " = ", value, " is outside ", range));
  };
  if (!(in.temperature() >= 0 && std::isfinite(in.temperature()))) return bad("temperature", in.temperature(), "[0, inf)");
  if (!(in.top_p() > 0 && in.top_p() <= 1)) return bad("top_p", in.top_p(), "(0, 1]");
  if (!(in.min_p() >= 0 && in.min_p() <= 1)) return bad("min_p", in.min_p(), "[0, 1]");
  if (!(in.repetition_penalty() > 0 && std::isfinite(in.repetition_penalty()))) {
    return bad("repetition_penalty", in.repetition_penalty(), "(0, inf)");
  }
  if (!std::isfinite(in.frequency_penalty())) return bad("frequency_penalty", in.frequency_penalty(), "finite values");
  if (!std::isfinite(in.presence_penalty())) return bad("presence_penalty", in.presence_penalty(), "finite values");
  if (in.prompt_len() < 1) return bad("prompt_len", in.prompt_len(), "[1, inf)");
  if (in.top_logprobs() < 0 || in.top_logprobs() > kMaxTopLogprobs) {
    return bad("top_logprobs", in.top_logprobs(), "[0, 20]");
  }
  SequenceSampling s;
  s.params.temperature = in.temperature();
  s.params.top_k = in.top_k();
  s.params.top_p = in.top_p();
  s.params.min_p = in.min_p();
  s.params.repetition_penalty = in.repetition_penalty();
  s.params.frequency_penalty = in.frequency_penalty();
  s.params.presence_penalty = in.presence_penalty();
  s.params.seed = in.seed();
  s.prompt_len = in.prompt_len();
  s.top_logprobs = in.top_logprobs();
  if (in.has_constraint()) {
    if (in.constraint().spec().empty()) return absl::InvalidArgumentError("sampling.constraint.spec is empty");
    if (in.constraint().max_tokens() < 1) return bad("constraint.max_tokens", in.constraint().max_tokens(), "[1, inf)");
    SamplingConstraint c;
    c.spec = in.constraint().spec();
    c.end_token_ids.assign(in.constraint().end_token_ids().begin(), in.constraint().end_token_ids().end());
    c.max_tokens = in.constraint().max_tokens();
    s.constraint = std::move(c);
  }
  return s;
}

void PlanToProto(const MicroBatchPlan& plan, uint64_t epoch, v1::MicroBatch* out) {
  out->set_epoch(epoch);
  out->set_batch_id(plan.id);
  for (const PlannedSequence& p : plan.seqs) {
    v1::SequencePlan* q = out->add_seqs();
    q->set_seq_id(p.step.seq_id);
    q->set_start_pos(p.step.start_pos);
    q->mutable_tokens()->Add(p.step.tokens.begin(), p.step.tokens.end());
    q->mutable_block_table()->Add(p.step.block_table.begin(), p.step.block_table.end());
    q->set_num_logits(p.step.num_logits);
    if (p.sampling) SamplingToProto(*p.sampling, q->mutable_sampling());
  }
  out->mutable_release_seq_ids()->Add(plan.release.begin(), plan.release.end());
}

absl::StatusOr<MicroBatchPlan> PlanFromProto(const v1::MicroBatch& in) {
  MicroBatchPlan plan;
  plan.id = in.batch_id();
  plan.seqs.reserve(in.seqs_size());
  for (int i = 0; i < in.seqs_size(); ++i) {
    const v1::SequencePlan& q = in.seqs(i);
    auto bad = [&](auto... parts) {
      return absl::InvalidArgumentError(absl::StrCat("micro-batch ", in.batch_id(), " seqs[", i, "] (seq ",
                                                     q.seq_id(), "): ", parts...));
    };
    if (q.num_logits() != 0 && q.num_logits() != 1) return bad("num_logits must be 0 or 1, got ", q.num_logits());
    if (q.tokens_size() == 0) return bad("tokens is empty");
    PlannedSequence p;
    p.step.seq_id = q.seq_id();
    p.step.start_pos = q.start_pos();
    p.step.tokens.assign(q.tokens().begin(), q.tokens().end());
    p.step.block_table.assign(q.block_table().begin(), q.block_table().end());
    p.step.num_logits = q.num_logits();
    if (q.has_sampling()) {
      auto s = SamplingFromProto(q.sampling());
      if (!s.ok()) return bad(s.status().message());
      p.sampling = *s;
    }
    plan.seqs.push_back(std::move(p));
  }
  plan.release.assign(in.release_seq_ids().begin(), in.release_seq_ids().end());
  return plan;
}

void ErrorToProto(const absl::Status& status, int stage, v1::ErrorStatus* out) {
  out->set_code(static_cast<int>(status.code()));
  out->set_message(std::string(status.message()));
  out->set_stage(stage);
}

absl::Status ErrorFromProto(const v1::ErrorStatus& error) {
  if (error.code() == 0) return absl::OkStatus();
  return StatusFromCode(error.code(), absl::StrCat("stage ", error.stage(), ": ", error.message()));
}

void ResultToProto(const MicroBatchResult& result, uint64_t epoch, v1::MicroBatchResult* out) {
  out->set_epoch(epoch);
  out->set_batch_id(result.id);
  for (const SampledToken& t : result.tokens) {
    v1::SampledToken* p = out->add_tokens();
    p->set_seq_id(t.seq_id);
    p->set_token_id(t.token);
    p->set_logprob(t.logprob);
    for (const auto& [id, lp] : t.top) {
      p->add_top_token_ids(id);
      p->add_top_logprobs(lp);
    }
    if (t.constraint_finished) p->set_constraint_finished(true);
  }
  for (const StageTiming& t : result.timings) {
    v1::StageTiming* p = out->add_timings();
    p->set_stage(t.stage);
    p->set_queue_ns(t.queue_ns);
    p->set_compute_ns(t.compute_ns);
  }
  if (!result.status.ok()) ErrorToProto(result.status, -1, out->mutable_error());
}

MicroBatchResult ResultFromProto(const v1::MicroBatchResult& in) {
  MicroBatchResult r;
  r.id = in.batch_id();
  if (in.has_error()) r.status = ErrorFromProto(in.error());
  for (const v1::SampledToken& p : in.tokens()) {
    SampledToken t;
    t.seq_id = p.seq_id();
    t.token = p.token_id();
    t.logprob = p.logprob();
    const int n = std::min(p.top_token_ids_size(), p.top_logprobs_size());
    for (int i = 0; i < n; ++i) t.top.emplace_back(p.top_token_ids(i), p.top_logprobs(i));
    t.constraint_finished = p.constraint_finished();
    r.tokens.push_back(std::move(t));
  }
  for (const v1::StageTiming& p : in.timings()) r.timings.push_back({p.stage(), p.queue_ns(), p.compute_ns()});
  return r;
}

}  // namespace spar
