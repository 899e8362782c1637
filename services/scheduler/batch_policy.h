// Continuous batching: which sequences advance in the next micro-batch, by
// how many tokens, under a per-micro-batch token budget (chunked prefill:
// a prompt longer than the remaining budget advances by a chunk and
// continues in a later micro-batch), a sequence cap, and the KV blocks
// available (preempting by recompute when running sequences run out).
//
// Order: running sequences first, oldest admitted first (decodes and
// unfinished prefills alike), then waiting sequences in queue order.
// A running sequence may preempt only sequences admitted after it.
// Waiting sequences are admitted only when their chunk's blocks are free
// without preempting anyone, and not in a round that preempted (no thrash);
// with prefix caching, admission shares the cached leading blocks of their
// tokens and starts their first chunk after them (BlockLedger::Admit).
// A deferred waiting sequence (one of a request's n > 1 sequences waiting
// for the first to compute the prompt they share) is passed over without
// blocking the queue.
// A sequence in flight on the pipeline is never scheduled again before its
// result is back (so a sequence is in at most one micro-batch in flight).
// Speculative decoding: a decoding sequence brings its drafts too (1 + d
// tokens of the budget; fewer drafts when the budget is short), and a step
// that samples asks for drafts for the next one, whose positions its block
// table must also cover (engine/speculation_limits.h).
//
// Pure: decisions depend only on the arguments. Plan() allocates and frees
// blocks in the ledger it is given; the caller applies the rest.
#ifndef SPAR_SERVICES_SCHEDULER_BATCH_POLICY_H_
#define SPAR_SERVICES_SCHEDULER_BATCH_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "services/scheduler/block_ledger.h"

namespace spar {

struct BatchLimits {
  int64_t max_batch_tokens = 512;  // tokens per micro-batch (all sequences)
  int max_seqs = 256;              // sequences per micro-batch
  int max_running = 256;           // sequences admitted at once
  int num_speculative_tokens = 0;  // drafts per decoding sequence and step (0: off)
};

// The scheduling view of one sequence.
struct SeqView {
  int64_t id = 0;
  int32_t computed = 0;  // tokens already in the KV cache
  int32_t total = 0;     // tokens known: prompt + output so far
  bool in_flight = false;
  // Waiting sequences (computed 0): all their tokens (`total` of them),
  // which admission looks up in the prefix cache; and whether admission
  // waits for now.
  absl::Span<const int32_t> tokens;
  bool deferred = false;
  int32_t drafts = 0;     // speculative drafts it may verify after its known tokens
  int32_t max_total = 0;  // speculation: the most tokens it may reach (prompt + max_tokens)
  bool speculates = true;  // false: never drafts (a constrained sequence; its drafts would not be masked)
};

struct ScheduledStep {
  int64_t seq = 0;
  int32_t start = 0;   // = computed, or on admission the tokens shared from the prefix cache
  int32_t count = 0;   // new tokens this micro-batch, drafts included
  bool wants_logit = false;  // reaches the end of the known tokens: sample the next one
  int32_t num_drafts = 0;     // the last num_drafts of the count are drafts to verify
  int32_t drafts_wanted = 0;  // drafts the last stage proposes for the next step
};

struct BatchDecision {
  std::vector<ScheduledStep> steps;
  std::vector<int64_t> admitted;   // waiting -> running (in `steps`)
  std::vector<int64_t> preempted;  // running -> waiting, blocks freed; in preemption order
};

class BatchPolicy {
 public:
  explicit BatchPolicy(BatchLimits limits) : limits_(limits) {}
  const BatchLimits& limits() const { return limits_; }

  // `running`: admitted sequences in admission order; `waiting`: the queue.
  // `seq_cap` further limits the sequences of this micro-batch (balancing
  // across micro-batches in flight); <= 0: limits().max_seqs.
  BatchDecision Plan(const std::vector<SeqView>& running, const std::vector<SeqView>& waiting, BlockLedger* ledger,
                     int seq_cap = 0) const;

 private:
  // How `s` advances under `budget`: its step, and the positions its block
  // table must cover for it.
  struct Span {
    ScheduledStep step;
    int64_t table_end = 0;
  };
  Span SpanOf(const SeqView& s, int64_t budget) const;
  // A waiting sequence (no drafts): the positions after its last token that
  // a first chunk reaching it must also cover (SpanOf's table_end - total).
  int64_t DraftingPositions(const SeqView& s) const;

  BatchLimits limits_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BATCH_POLICY_H_
