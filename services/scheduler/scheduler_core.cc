#include "services/scheduler/scheduler_core.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace spar {

SchedulerCore::SchedulerCore(CoreOptions options)
    : options_(std::move(options)),
      ledger_(options_.num_blocks),
      waiting_(options_.max_waiting),
      policy_(options_.limits) {}

absl::StatusOr<std::vector<int64_t>> SchedulerCore::Submit(std::vector<SequenceRequest> seqs) {
  if (seqs.empty()) return absl::InvalidArgumentError("no sequences to generate");
  for (const SequenceRequest& r : seqs) {
    if (r.prompt.empty()) return absl::InvalidArgumentError("prompt is empty: at least one token is required");
    if (r.max_tokens < 1) return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 1, got ", r.max_tokens));
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    if (options_.max_model_len > 0 && total > options_.max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat("prompt (", r.prompt.size(), " tokens) + max_tokens (",
                                                     r.max_tokens, ") exceeds the context length of ",
                                                     options_.max_model_len, " tokens"));
    }
    if (BlockLedger::BlocksFor(total) > ledger_.num_blocks()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "prompt (", r.prompt.size(), " tokens) + max_tokens (", r.max_tokens, ") needs ",
          BlockLedger::BlocksFor(total), " KV blocks; the cache has ", ledger_.num_blocks(), " in all"));
    }
  }
  std::vector<int64_t> ids;
  for (size_t i = 0; i < seqs.size(); ++i) ids.push_back(next_seq_ + static_cast<int64_t>(i));
  if (absl::Status s = waiting_.Admit(ids); !s.ok()) return s;
  next_seq_ += static_cast<int64_t>(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    SequenceRequest& r = seqs[i];
    Seq s;
    s.id = ids[i];
    s.prompt_len = static_cast<int32_t>(r.prompt.size());
    s.tokens = std::move(r.prompt);
    s.sampling.params = r.sampling;
    s.sampling.prompt_len = s.prompt_len;
    s.sampling.top_logprobs = r.top_logprobs;
    s.max_tokens = r.max_tokens;
    s.stop_token_ids = std::move(r.stop_token_ids);
    s.ignore_eos = r.ignore_eos;
    s.deadline = r.deadline;
    if (r.constraint) s.sampling.constraint = ConstraintFor(*r.constraint, s);
    seqs_.emplace(s.id, std::move(s));
  }
  return ids;
}

std::optional<MicroBatchPlan> SchedulerCore::NextMicroBatch(absl::Time now) {
  if (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) return std::nullopt;
  std::vector<SeqView> running, waiting;
  running.reserve(running_.size());
  for (int64_t id : running_) {
    const Seq& s = seqs_.at(id);
    running.push_back({id, s.computed, static_cast<int32_t>(s.tokens.size()), s.in_flight});
  }
  for (int64_t id : waiting_.items()) {
    const Seq& s = seqs_.at(id);
    waiting.push_back({id, 0, static_cast<int32_t>(s.tokens.size()), false});
  }
  int cap = 0;
  if (options_.balance && options_.max_in_flight > 1) {
    const int64_t active = static_cast<int64_t>(running.size() + waiting.size());
    cap = static_cast<int>(std::max<int64_t>(1, (active + options_.max_in_flight - 1) / options_.max_in_flight));
  }
  BatchDecision d = policy_.Plan(running, waiting, &ledger_, cap);

  for (int64_t id : d.preempted) {
    Seq& s = seqs_.at(id);
    s.running = false;
    s.computed = 0;
    s.needs_sampling = true;
    ++s.preemptions;
    ++preemptions_;
    running_.erase(std::find(running_.begin(), running_.end(), id));
    // Victims come youngest first, so the oldest ends up at the front.
    waiting_.Requeue(id);
  }
  for (int64_t id : d.admitted) {
    waiting_.Remove(id);
    seqs_.at(id).running = true;
    running_.push_back(id);
  }
  if (d.steps.empty() && (pending_release_.empty() || !in_flight_.empty())) return std::nullopt;

  MicroBatchPlan plan;
  plan.id = next_batch_++;
  plan.seqs.reserve(d.steps.size());
  for (const ScheduledStep& step : d.steps) {
    Seq& s = seqs_.at(step.seq);
    PlannedSequence p;
    p.step.seq_id = s.id;
    p.step.start_pos = step.start;
    p.step.tokens.assign(s.tokens.begin() + step.start, s.tokens.begin() + step.start + step.count);
    p.step.block_table = ledger_.Table(s.id);
    p.step.num_logits = step.wants_logit ? 1 : 0;
    if (s.needs_sampling) {
      p.sampling = s.sampling;
      s.needs_sampling = false;
      s.ever_sent = true;
    }
    s.in_flight = true;
    plan.seqs.push_back(std::move(p));
  }
  plan.release = std::move(pending_release_);
  pending_release_.clear();
  in_flight_[plan.id] = InFlight{std::move(d.steps), now};
  ++micro_batches_;
  return plan;
}

std::vector<SeqEvent> SchedulerCore::OnResult(const MicroBatchResult& result) {
  std::vector<SeqEvent> events;
  auto it = in_flight_.find(result.id);
  if (it == in_flight_.end()) return events;
  std::vector<ScheduledStep> steps = std::move(it->second.steps);
  in_flight_.erase(it);
  if (!result.status.ok()) {
    for (const ScheduledStep& step : steps) {
      auto sit = seqs_.find(step.seq);
      if (sit == seqs_.end()) continue;
      SeqFinish f;
      f.reason = SeqFinishReason::kAborted;
      f.status = result.status;
      events.push_back(End(sit->second, f));
    }
    return events;
  }
  std::unordered_map<int64_t, const SampledToken*> sampled;
  for (const SampledToken& t : result.tokens) sampled[t.seq_id] = &t;
  const auto& eos = options_.eos_token_ids;
  for (const ScheduledStep& step : steps) {
    auto sit = seqs_.find(step.seq);
    if (sit == seqs_.end()) continue;  // ended while in flight
    Seq& s = sit->second;
    s.in_flight = false;
    s.computed = step.start + step.count;
    if (!step.wants_logit) continue;
    auto tok = sampled.find(s.id);
    if (tok == sampled.end()) {
      SeqFinish f;
      f.reason = SeqFinishReason::kAborted;
      f.status = absl::InternalError(absl::StrCat("micro-batch ", result.id, " returned no token for sequence ", s.id));
      events.push_back(End(s, f));
      continue;
    }
    const int32_t t = tok->second->token;
    const bool is_eos = !s.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end();
    const bool is_stop = std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), t) != s.stop_token_ids.end();
    if (is_eos || is_stop) {
      SeqFinish f;
      f.reason = SeqFinishReason::kStop;
      f.stop_token = t;
      f.stop_token_is_eos = is_eos && !is_stop;
      events.push_back(End(s, f));
      continue;
    }
    s.tokens.push_back(t);
    events.push_back({s.id, *tok->second, std::nullopt});
    if (tok->second->constraint_finished) {  // a constrained output is complete
      SeqFinish f;
      f.reason = SeqFinishReason::kStop;
      events.push_back(End(s, f));
      continue;
    }
    if (s.num_output() >= s.max_tokens ||
        (options_.max_model_len > 0 && static_cast<int64_t>(s.tokens.size()) >= options_.max_model_len)) {
      SeqFinish f;
      f.reason = SeqFinishReason::kLength;
      events.push_back(End(s, f));
    }
  }
  return events;
}

SamplingConstraint SchedulerCore::ConstraintFor(const std::string& spec, const Seq& s) const {
  SamplingConstraint c;
  c.spec = spec;
  if (!s.ignore_eos) {
    for (int64_t id : options_.eos_token_ids) c.end_token_ids.push_back(static_cast<int32_t>(id));
  }
  c.end_token_ids.insert(c.end_token_ids.end(), s.stop_token_ids.begin(), s.stop_token_ids.end());
  c.max_tokens = s.max_tokens;
  return c;
}

void SchedulerCore::Remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  ledger_.Free(id).IgnoreError();
  waiting_.Remove(id);
  auto r = std::find(running_.begin(), running_.end(), id);
  if (r != running_.end()) running_.erase(r);
  if (it->second.ever_sent) pending_release_.push_back(id);
  seqs_.erase(it);
}

SeqEvent SchedulerCore::End(Seq& s, SeqFinish finish) {
  finish.num_output_tokens = s.num_output();
  const int64_t id = s.id;
  Remove(id);  // invalidates `s`
  return SeqEvent{id, std::nullopt, std::move(finish)};
}

bool SchedulerCore::Finish(int64_t seq) {
  if (!Has(seq)) return false;
  Remove(seq);
  return true;
}

std::vector<SeqEvent> SchedulerCore::ExpireDeadlines(absl::Time now) {
  std::vector<int64_t> expired;
  for (const auto& [id, s] : seqs_) {
    if (s.deadline && *s.deadline <= now) expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  std::vector<SeqEvent> events;
  for (int64_t id : expired) {
    Seq& s = seqs_.at(id);
    SeqFinish f;
    f.reason = SeqFinishReason::kAborted;
    f.status = absl::DeadlineExceededError(
        absl::StrCat("the request's deadline passed after ", s.num_output(), " generated tokens"));
    events.push_back(End(s, f));
  }
  return events;
}

std::vector<SeqEvent> SchedulerCore::FailAll(const absl::Status& status) {
  in_flight_.clear();
  std::vector<int64_t> ids;
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<SeqEvent> events;
  for (int64_t id : ids) {
    SeqFinish f;
    f.reason = SeqFinishReason::kAborted;
    f.status = status;
    events.push_back(End(seqs_.at(id), f));
  }
  pending_release_.clear();
  return events;
}

bool SchedulerCore::HasInFlightOlderThan(absl::Time cutoff) const {
  for (const auto& [id, f] : in_flight_) {
    if (f.sent < cutoff) return true;
  }
  return false;
}

CoreStats SchedulerCore::Stats() const {
  CoreStats s;
  s.waiting = waiting_.size();
  s.running = running_.size();
  s.in_flight = in_flight_.size();
  s.used_blocks = ledger_.num_used();
  s.total_blocks = ledger_.num_blocks();
  s.preemptions = preemptions_;
  s.micro_batches = micro_batches_;
  return s;
}

std::vector<int32_t> SchedulerCore::OutputOf(int64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return std::vector<int32_t>(it->second.tokens.begin() + it->second.prompt_len, it->second.tokens.end());
}

uint64_t SchedulerCore::preemptions_of(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.preemptions;
}

}  // namespace spar
