#include "services/scheduler/batch_policy.h"

#include <algorithm>
#include <unordered_set>

#include "engine/speculation_limits.h"
#include "services/scheduler/preemption_policy.h"

namespace spar {

BatchDecision BatchPolicy::Plan(const std::vector<SeqView>& running, const std::vector<SeqView>& waiting,
                                BlockLedger* ledger, int seq_cap) const {
  BatchDecision d;
  const int cap = seq_cap > 0 ? std::min(seq_cap, limits_.max_seqs) : limits_.max_seqs;
  int64_t budget = limits_.max_batch_tokens;
  std::unordered_set<int64_t> in_batch;
  std::unordered_set<int64_t> preempted;
  // Sequences admitted after running[i]: the only ones it may preempt
  // (first come, first served also under memory pressure).
  auto candidates = [&](size_t i) {
    std::vector<PreemptionCandidate> out;
    for (size_t j = i + 1; j < running.size(); ++j) {
      const SeqView& v = running[j];
      if (preempted.count(v.id)) continue;
      out.push_back({v.id, ledger->BlocksFreedBy(v.id), v.in_flight});
    }
    return out;
  };

  for (size_t i = 0; i < running.size(); ++i) {
    const SeqView& s = running[i];
    if (static_cast<int>(d.steps.size()) >= cap || budget <= 0) break;
    if (s.in_flight || preempted.count(s.id) || s.total <= s.computed) continue;
    const Span span = SpanOf(s, budget);
    const int64_t end = span.table_end;
    if (!ledger->CanGrow(s.id, end)) {
      // Preempt only when it is enough; otherwise this sequence waits for
      // blocks held by micro-batches in flight or by this batch.
      std::unordered_set<int64_t> protect = in_batch;
      protect.insert(s.id);
      const int64_t shortfall = ledger->Shortfall(s.id, end) - ledger->num_free();
      if (PreemptionPolicy::Reclaimable(candidates(i), protect) < shortfall) continue;
      while (!ledger->CanGrow(s.id, end)) {
        auto victim = PreemptionPolicy::PickVictim(candidates(i), protect);
        if (!victim) break;
        ledger->Free(*victim).IgnoreError();
        preempted.insert(*victim);
        d.preempted.push_back(*victim);
      }
    }
    if (!ledger->Grow(s.id, end).ok()) continue;
    d.steps.push_back(span.step);
    in_batch.insert(s.id);
    budget -= span.step.count;
  }

  int admitted_running = 0;
  for (const SeqView& s : running) admitted_running += preempted.count(s.id) == 0;
  if (!d.preempted.empty()) return d;  // a round that preempted admits no one
  for (const SeqView& s : waiting) {
    if (static_cast<int>(d.steps.size()) >= cap || budget <= 0) break;
    if (admitted_running >= limits_.max_running) break;
    if (s.deferred) continue;
    // First come, first served: a head that does not fit blocks the rest.
    // The blocks cover the first chunk after the shared prefix and, when
    // that chunk reaches the last token, the drafting's positions.
    const absl::StatusOr<int32_t> start = ledger->Admit(s.id, s.tokens, budget, DraftingPositions(s));
    if (!start.ok()) break;
    SeqView after_hit = s;
    after_hit.computed = *start;
    const Span span = SpanOf(after_hit, budget);
    if (!ledger->Grow(s.id, span.table_end).ok()) {  // Admit covered it: cannot fail
      ledger->Free(s.id).IgnoreError();
      break;
    }
    d.steps.push_back(span.step);
    d.admitted.push_back(s.id);
    ++admitted_running;
    budget -= span.step.count;
  }
  return d;
}

BatchPolicy::Span BatchPolicy::SpanOf(const SeqView& s, int64_t budget) const {
  Span span;
  ScheduledStep& step = span.step;
  step.seq = s.id;
  step.start = s.computed;
  const int64_t known = s.total - s.computed;
  // Drafts follow the last known token: only a decode step verifies them.
  step.num_drafts = known == 1 ? static_cast<int32_t>(std::clamp<int64_t>(budget - 1, 0, s.drafts)) : 0;
  step.count = static_cast<int32_t>(std::min<int64_t>(known, budget)) + step.num_drafts;
  step.wants_logit = step.count - step.num_drafts == known;
  const int64_t step_end = static_cast<int64_t>(s.computed) + step.count;
  if (limits_.num_speculative_tokens > 0 && s.speculates && step.wants_logit) {
    step.drafts_wanted = DraftsWanted(limits_.num_speculative_tokens, step_end, s.max_total);
  }
  span.table_end = SpeculativeStepEnd(step_end, step.drafts_wanted);
  return span;
}

int64_t BatchPolicy::DraftingPositions(const SeqView& s) const {
  if (limits_.num_speculative_tokens == 0 || !s.speculates) return 0;
  const int64_t end = s.total;  // a chunk reaching the last token ends there, drafts or not
  return SpeculativeStepEnd(end, DraftsWanted(limits_.num_speculative_tokens, end, s.max_total)) - end;
}

}  // namespace spar
