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
};

struct ScheduledStep {
  int64_t seq = 0;
  int32_t start = 0;   // = computed, or on admission the tokens shared from the prefix cache
  int32_t count = 0;   // new tokens this micro-batch
  bool wants_logit = false;  // reaches the end of the known tokens: sample the next one
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
  BatchLimits limits_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BATCH_POLICY_H_
