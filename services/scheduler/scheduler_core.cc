#include "services/scheduler/scheduler_core.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace spar {

namespace {

// The prompt tokens a sibling can share from the first sequence of its
// request: the prompt's full blocks, short of its last token.
int32_t SharedPromptTokens(int32_t prompt_len) {
  return prompt_len < 1 ? 0 : (prompt_len - 1) / kCacheBlockTokens * kCacheBlockTokens;
}

}  // namespace

void AccumulateCounters(const CoreStats& from, CoreStats* into) {
  into->preemptions += from.preemptions;
  into->micro_batches += from.micro_batches;
  into->prefill_tokens += from.prefill_tokens;
  into->prefix_cache.queries += from.prefix_cache.queries;
  into->prefix_cache.hits += from.prefix_cache.hits;
  into->prefix_cache.evictions += from.prefix_cache.evictions;
  into->spec += from.spec;
}

SchedulerCore::SchedulerCore(CoreOptions options)
    : options_(std::move(options)),
      // With the MTP layer a block's rows also read the token after it.
      ledger_(options_.num_blocks, PrefixCacheOptions{options_.enable_prefix_caching, options_.prefix_cache_salt,
                                                      options_.limits.num_speculative_tokens > 0 ? 1 : 0}),
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
    if (options_.enable_prefix_caching && i > 0 && SharedPromptTokens(s.prompt_len) > 0 &&
        s.tokens == seqs_.at(ids[0]).tokens) {
      s.prefix_leader = ids[0];
    }
    if (r.constraint) s.sampling.constraint = ConstraintFor(*r.constraint, s);
    seqs_.emplace(s.id, std::move(s));
  }
  return ids;
}

std::optional<MicroBatchPlan> SchedulerCore::NextMicroBatch(absl::Time now) {
  if (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) return std::nullopt;
  std::vector<SeqView> running, waiting;
  running.reserve(running_.size());
  auto view = [&](const Seq& s, int32_t computed, bool in_flight) {
    SeqView v{s.id, computed, static_cast<int32_t>(s.tokens.size()), in_flight};
    v.drafts = DraftsToVerify(static_cast<int>(s.drafts.size()), s.num_output(), s.max_tokens);
    v.max_total = s.prompt_len + s.max_tokens;
    v.speculates = !s.sampling.constraint.has_value();
    if (options_.max_model_len > 0) v.max_total = static_cast<int32_t>(std::min<int64_t>(v.max_total, options_.max_model_len));
    return v;
  };
  for (int64_t id : running_) {
    const Seq& s = seqs_.at(id);
    running.push_back(view(s, s.computed, s.in_flight));
  }
  for (int64_t id : waiting_.items()) {
    const Seq& s = seqs_.at(id);
    SeqView v = view(s, 0, false);
    v.tokens = s.tokens;
    v.deferred = Deferred(s);
    waiting.push_back(v);
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
    s.drafts.clear();  // the recomputation proposes new ones
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
  for (const ScheduledStep& step : d.steps) {
    Seq& s = seqs_.at(step.seq);
    if (!s.ever_admitted) {
      s.ever_admitted = true;
      s.cached_prompt_tokens = step.start;
    }
    // Prompt positions only: drafts follow the last known token.
    const int32_t known_end = step.start + step.count - step.num_drafts;
    prefill_tokens_ += static_cast<uint64_t>(std::max(0, std::min(known_end, s.prompt_len) - step.start));
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
    const int32_t known_end = step.start + step.count - step.num_drafts;
    p.step.tokens.assign(s.tokens.begin() + step.start, s.tokens.begin() + known_end);
    p.step.tokens.insert(p.step.tokens.end(), s.drafts.begin(), s.drafts.begin() + step.num_drafts);
    p.step.block_table = ledger_.Table(s.id);
    p.step.num_logits = step.wants_logit ? 1 + step.num_drafts : 0;
    if (options_.limits.num_speculative_tokens > 0 && !s.sampling.constraint) {  // SeqView::speculates
      SequenceSpeculation sp;
      sp.num_draft_tokens = step.num_drafts;
      sp.num_drafts_wanted = step.drafts_wanted;
      // The MTP layer reads, at a chunk's last row, the token after it.
      if (!step.wants_logit) sp.next_token = s.tokens[known_end];
      p.speculation = sp;
    }
    if (s.needs_sampling) {
      p.sampling = s.sampling;
      // A prefix-cache hit: the last stage's history starts with the
      // tokens the plan skips.
      p.sampling->cached_tokens.assign(s.tokens.begin(), s.tokens.begin() + step.start);
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
  // A sequence's tokens in result order (several under speculation).
  std::unordered_map<int64_t, std::vector<const SampledToken*>> sampled;
  for (const SampledToken& t : result.tokens) sampled[t.seq_id].push_back(&t);
  std::unordered_map<int64_t, const SpeculationOutcome*> spec;
  for (const SpeculationOutcome& o : result.speculation) spec[o.seq_id] = &o;
  static const std::vector<const SampledToken*> kNone;
  for (const ScheduledStep& step : steps) {
    auto sit = seqs_.find(step.seq);
    if (sit == seqs_.end()) continue;  // ended while in flight
    Seq& s = sit->second;
    s.in_flight = false;
    if (!step.wants_logit) {
      // A prefill chunk (never drafts): every stage has written these rows,
      // so their full blocks can be shared.
      s.computed = step.start + step.count;
      ledger_.Commit(s.id, s.tokens, s.computed);
      continue;
    }
    auto tok = sampled.find(s.id);
    auto sp = spec.find(s.id);
    ApplyTokens(s, step, tok == sampled.end() ? kNone : tok->second, sp == spec.end() ? nullptr : sp->second,
                result.id, &events);
  }
  return events;
}

void SchedulerCore::ApplyTokens(Seq& s, const ScheduledStep& step, const std::vector<const SampledToken*>& tokens,
                                const SpeculationOutcome* spec, uint64_t batch, std::vector<SeqEvent>* events) {
  auto abort = [&](std::string why) {
    SeqFinish f;
    f.reason = SeqFinishReason::kAborted;
    f.status = absl::InternalError(absl::StrCat("micro-batch ", batch, ", sequence ", s.id, ": ", why));
    events->push_back(End(s, f));
  };
  // An ending sequence first publishes its computed full blocks (its
  // prompt stays reusable after it is gone).
  auto finish = [&](SeqFinish f) {
    ledger_.Commit(s.id, s.tokens, s.computed);
    events->push_back(End(s, std::move(f)));
  };
  const int accepted = static_cast<int>(tokens.size()) - 1;
  if (tokens.empty()) return abort("no token returned");
  if (accepted > step.num_drafts) {
    return abort(absl::StrCat(tokens.size(), " tokens returned for ", step.num_drafts, " drafts"));
  }
  if (step.num_drafts > 0 || step.drafts_wanted > 0) {
    if (spec == nullptr || spec->num_draft_tokens != step.num_drafts || spec->num_accepted != accepted) {
      return abort("the speculation result does not match the plan");
    }
  }
  // The cache keeps the step's known tokens and the accepted drafts: only
  // they count as computed (and so ever get keyed); the rejected drafts'
  // rows are rewritten by a later step.
  s.computed = step.start + step.count - step.num_drafts + accepted;
  s.drafts.clear();
  if (step.num_drafts > 0) {
    spec_.drafts += 1;
    spec_.draft_tokens += static_cast<uint64_t>(step.num_drafts);
    spec_.accepted_tokens += static_cast<uint64_t>(accepted);
    for (int i = 0; i < accepted && i < kMaxSpeculativeTokens; ++i) spec_.accepted_per_position[i] += 1;
  }
  const auto& eos = options_.eos_token_ids;
  for (const SampledToken* tok : tokens) {
    const int32_t t = tok->token;
    const bool is_eos = !s.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end();
    const bool is_stop = std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), t) != s.stop_token_ids.end();
    if (is_eos || is_stop) {
      SeqFinish f;
      f.reason = SeqFinishReason::kStop;
      f.stop_token = t;
      f.stop_token_is_eos = is_eos && !is_stop;
      return finish(f);
    }
    s.tokens.push_back(t);
    events->push_back({s.id, *tok, std::nullopt, s.cached_prompt_tokens});
    if (tok->constraint_finished) {  // a constrained output is complete: nothing may follow
      SeqFinish f;
      f.reason = SeqFinishReason::kStop;
      return finish(f);
    }
    if (s.num_output() >= s.max_tokens ||
        (options_.max_model_len > 0 && static_cast<int64_t>(s.tokens.size()) >= options_.max_model_len)) {
      SeqFinish f;
      f.reason = SeqFinishReason::kLength;
      return finish(f);
    }
  }
  if (spec != nullptr) s.drafts = spec->drafts;
  if (options_.limits.num_speculative_tokens > 0) {
    // Rejected drafts and the drafting's positions leave the block table.
    // The end never falls inside a shared block (those lie below the
    // computed length); if it did, the sequence recomputes from that
    // block's start into a block of its own.
    const int64_t valid = ledger_.TrimTail(s.id, s.computed);
    if (valid < s.computed) {
      s.computed = static_cast<int32_t>(valid);
      s.drafts.clear();
    }
  }
  ledger_.Commit(s.id, s.tokens, s.computed);
}

SpecDecodeCounts& SpecDecodeCounts::operator+=(const SpecDecodeCounts& o) {
  drafts += o.drafts;
  draft_tokens += o.draft_tokens;
  accepted_tokens += o.accepted_tokens;
  for (size_t i = 0; i < accepted_per_position.size(); ++i) accepted_per_position[i] += o.accepted_per_position[i];
  return *this;
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
  ledger_.Forget(id).IgnoreError();
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

bool SchedulerCore::Deferred(const Seq& s) const {
  if (s.prefix_leader == 0) return false;
  auto it = seqs_.find(s.prefix_leader);
  if (it == seqs_.end()) return false;  // the first sequence is gone: compute alone
  const Seq& leader = it->second;
  return leader.computed < SharedPromptTokens(leader.prompt_len);
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
  // The pipeline broke: what the stages cached is lost with it.
  ledger_.DropCachedContent();
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
  s.spec = spec_;
  s.prefill_tokens = prefill_tokens_;
  s.prefix_cache = ledger_.prefix_stats();
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
