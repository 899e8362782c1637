#include "services/common/worker_convert.h"

#include "absl/strings/str_cat.h"
#include "engine/speculation_limits.h"
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
  out->mutable_cached_tokens()->Add(s.cached_tokens.begin(), s.cached_tokens.end());
  if (s.constraint) {
    v1::Constraint* c = out->mutable_constraint();
    c->set_spec(s.constraint->spec);
    c->mutable_end_token_ids()->Add(s.constraint->end_token_ids.begin(), s.constraint->end_token_ids.end());
    c->set_max_tokens(s.constraint->max_tokens);
  }
}

absl::StatusOr<SequenceSampling> SamplingFromProto(const v1::SamplingState& in) {
  SequenceSampling s;
  s.params.temperature = in.temperature();
  s.params.top_k = in.top_k();
  s.params.top_p = in.top_p();
  s.params.min_p = in.min_p();
  s.params.repetition_penalty = in.repetition_penalty();
  s.params.frequency_penalty = in.frequency_penalty();
  s.params.presence_penalty = in.presence_penalty();
  s.params.seed = in.seed();
  // The public APIs' rule set (base/sampling_params.h): a worker takes from
  // the wire only what the scheduler's front door would have taken.
  static constexpr SamplingFieldNames kNames{"sampling.temperature",        "sampling.top_p",
                                             "sampling.top_k",              "sampling.min_p",
                                             "sampling.repetition_penalty", "sampling.frequency_penalty",
                                             "sampling.presence_penalty"};
  if (auto bad = CheckSamplingParams(&s.params, kNames)) {
    return absl::InvalidArgumentError(absl::StrCat(bad->field, " ", bad->rule, ", got ", bad->got));
  }
  if (in.prompt_len() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.prompt_len must be >= 1, got ", in.prompt_len()));
  }
  if (in.top_logprobs() < 0 || in.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", in.top_logprobs()));
  }
  s.prompt_len = in.prompt_len();
  s.top_logprobs = in.top_logprobs();
  s.cached_tokens.assign(in.cached_tokens().begin(), in.cached_tokens().end());
  if (in.has_constraint()) {
    if (in.constraint().spec().empty()) return absl::InvalidArgumentError("sampling.constraint.spec is empty");
    if (in.constraint().max_tokens() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.constraint.max_tokens must be >= 1, got ", in.constraint().max_tokens()));
    }
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
    if (p.speculation) {
      v1::Speculation* sp = q->mutable_speculation();
      sp->set_num_draft_tokens(p.speculation->num_draft_tokens);
      sp->set_num_drafts_wanted(p.speculation->num_drafts_wanted);
      if (p.speculation->next_token) sp->set_next_token(*p.speculation->next_token);
    }
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
    if (q.tokens_size() == 0) return bad("tokens is empty");
    const int drafts = q.has_speculation() ? q.speculation().num_draft_tokens() : 0;
    if (drafts < 0 || drafts > kMaxSpeculativeTokens || drafts >= q.tokens_size()) {
      return bad("speculation.num_draft_tokens ", drafts, " must be in [0, ", kMaxSpeculativeTokens,
                 "] and below the ", q.tokens_size(), " tokens");
    }
    if (drafts > 0 ? q.num_logits() != drafts + 1 : (q.num_logits() != 0 && q.num_logits() != 1)) {
      return bad("num_logits must be ", drafts > 0 ? absl::StrCat(drafts + 1, " (the drafts + 1)") : "0 or 1", ", got ",
                 q.num_logits());
    }
    if (q.has_speculation()) {
      const v1::Speculation& sp = q.speculation();
      if (sp.num_drafts_wanted() < 0 || sp.num_drafts_wanted() > kMaxSpeculativeTokens) {
        return bad("speculation.num_drafts_wanted ", sp.num_drafts_wanted(), " must be in [0, ", kMaxSpeculativeTokens,
                   "]");
      }
      if (sp.num_drafts_wanted() > 0 && q.num_logits() == 0) return bad("drafts wanted from a chunk without logits");
    }
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
    if (q.has_speculation()) {
      SequenceSpeculation sp;
      sp.num_draft_tokens = q.speculation().num_draft_tokens();
      sp.num_drafts_wanted = q.speculation().num_drafts_wanted();
      if (q.speculation().has_next_token()) sp.next_token = q.speculation().next_token();
      p.speculation = sp;
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
  for (const SpeculationOutcome& o : result.speculation) {
    v1::SpeculationResult* p = out->add_speculation();
    p->set_seq_id(o.seq_id);
    p->set_num_draft_tokens(o.num_draft_tokens);
    p->set_num_accepted(o.num_accepted);
    p->mutable_draft_token_ids()->Add(o.drafts.begin(), o.drafts.end());
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
  for (const v1::SpeculationResult& p : in.speculation()) {
    r.speculation.push_back({p.seq_id(), p.num_draft_tokens(), p.num_accepted(),
                             std::vector<int32_t>(p.draft_token_ids().begin(), p.draft_token_ids().end())});
  }
  return r;
}

}  // namespace spar
