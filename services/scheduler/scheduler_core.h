// The scheduler's state machine, without threads, clocks or networking:
// sequences (waiting, running, finished), KV block tables, micro-batches in
// flight, stop conditions on tokens, deadlines and aborts. The Scheduler
// (scheduler.h) drives it from its loop thread; tests drive it step by step
// with a fake pipeline.
//
//   Submit ──▶ waiting ──(BatchPolicy admits)──▶ running ──▶ finished
//                 ▲                                 │
//                 └──────── preempted (recompute) ◀─┘
//
// A micro-batch plan carries, per sequence, its new tokens, its whole block
// table and (on a sequence's first chunk) the last stage's sampling state;
// finished sequences' sampling states are released through a later plan.
// With speculative decoding (limits.num_speculative_tokens > 0) a decode
// step also carries the drafts the last stage proposed, a result brings
// the accepted ones plus the next token, and the block table is trimmed
// back to the positions that stay in the cache.
// Both together: drafts and the drafting's positions are only ever written
// past the computed length, into blocks of the sequence's own (never a
// shared or keyed one); only accepted tokens count towards the computed
// length that gets keyed; blocks are keyed with the token after them,
// which the MTP layer's rows read (PrefixCacheOptions::lookahead_tokens).
//
// Prefix caching (block_ledger.h): admission shares the cached leading
// blocks of a sequence's tokens, so its first chunk starts after them (its
// sampling state then carries the tokens it skips, for the penalties); each
// result publishes the full blocks it completed. The n > 1 sequences of one
// request share the prompt: the others wait until the first has computed
// the prompt's full blocks, then start from them.
//
// Thread-compatible.
#ifndef SPAR_SERVICES_SCHEDULER_SCHEDULER_CORE_H_
#define SPAR_SERVICES_SCHEDULER_SCHEDULER_CORE_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/speculation_limits.h"
#include "services/common/micro_batch.h"
#include "services/scheduler/admission_queue.h"
#include "services/scheduler/batch_policy.h"
#include "services/scheduler/block_ledger.h"

namespace spar {

struct CoreOptions {
  int64_t num_blocks = 256;
  BatchLimits limits;
  int max_in_flight = 1;      // micro-batches on the pipeline at once (= stages)
  size_t max_waiting = 256;   // admission queue bound, in sequences
  int64_t max_model_len = 0;  // prompt + output tokens per sequence
  std::vector<int64_t> eos_token_ids;
  // Spread sequences evenly over the micro-batches in flight (each takes at
  // most ceil(active / max_in_flight)), so every stage has work.
  bool balance = true;
  // Automatic prefix caching; the salt names the model and the stages'
  // cache formats (PrefixCacheOptions).
  bool enable_prefix_caching = true;
  std::string prefix_cache_salt;
};

// One sequence to generate.
struct SequenceRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // seed resolved
  int top_logprobs = 0;
  int max_tokens = 16;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<absl::Time> deadline;
  std::optional<std::string> constraint;  // a ConstraintSpec (GenerateParams::constraint)
};

enum class SeqFinishReason { kLength, kStop, kAborted };

struct SeqFinish {
  SeqFinishReason reason = SeqFinishReason::kLength;
  std::optional<int32_t> stop_token;  // kStop by token: the id (not in the output)
  bool stop_token_is_eos = false;
  absl::Status status;                // kAborted: why (DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, ...)
  int num_output_tokens = 0;
};

// What happened to a sequence, in order: a new output token, or its end.
struct SeqEvent {
  int64_t seq = 0;
  std::optional<SampledToken> token;
  std::optional<SeqFinish> finish;
  // With a token: the prompt tokens the sequence shared from the prefix
  // cache when it was first admitted (usage's cached_prompt_tokens).
  int32_t cached_prompt_tokens = 0;
};

// Speculative decoding since the core started (vLLM's spec-decode
// counters): verify steps of a sequence with drafts, drafts verified,
// drafts accepted, accepted by draft position (0 = the first draft).
struct SpecDecodeCounts {
  uint64_t drafts = 0;
  uint64_t draft_tokens = 0;
  uint64_t accepted_tokens = 0;
  std::array<uint64_t, kMaxSpeculativeTokens> accepted_per_position{};
  SpecDecodeCounts& operator+=(const SpecDecodeCounts& o);
};

struct CoreStats {
  size_t waiting = 0;
  size_t running = 0;
  size_t in_flight = 0;
  int64_t used_blocks = 0;
  int64_t total_blocks = 0;
  uint64_t preemptions = 0;
  uint64_t micro_batches = 0;
  // Prompt positions sent to the pipeline to compute (prefix-cache hits
  // excluded; recomputation after a preemption included).
  uint64_t prefill_tokens = 0;
  PrefixCacheStats prefix_cache;
  SpecDecodeCounts spec;
};

// Adds the monotonic counters of `from` (preemptions, micro-batches,
// prefill tokens, prefix-cache queries, hits and evictions, speculative
// decoding's counts) to `into`: the
// scheduler's totals over the cores of successive pipeline connections.
void AccumulateCounters(const CoreStats& from, CoreStats* into);

class SchedulerCore {
 public:
  explicit SchedulerCore(CoreOptions options);

  const CoreOptions& options() const { return options_; }

  // Admits one request's sequences, all or none: INVALID_ARGUMENT for an
  // empty prompt or one that exceeds max_model_len with max_tokens,
  // RESOURCE_EXHAUSTED when they could never fit the KV cache or the queue
  // is full. Returns their ids.
  absl::StatusOr<std::vector<int64_t>> Submit(std::vector<SequenceRequest> seqs);

  // The next micro-batch, or none (pipeline full, or nothing to do).
  std::optional<MicroBatchPlan> NextMicroBatch(absl::Time now);
  // Applies a micro-batch's result; unknown ids (already failed) are ignored.
  std::vector<SeqEvent> OnResult(const MicroBatchResult& result);

  // Ends a sequence now (abort, client gone, stop string): frees its blocks
  // at once even when it is in flight (the pipeline executes micro-batches
  // in order, so a later micro-batch reusing the blocks writes after the
  // in-flight one). No event. False if unknown.
  bool Finish(int64_t seq);
  // Sequences whose deadline has passed, ended with DEADLINE_EXCEEDED.
  std::vector<SeqEvent> ExpireDeadlines(absl::Time now);
  // Fails every sequence with `status` and forgets the micro-batches in
  // flight (the pipeline broke; caches are treated as lost).
  std::vector<SeqEvent> FailAll(const absl::Status& status);
  // Micro-batches in flight sent before `cutoff`.
  bool HasInFlightOlderThan(absl::Time cutoff) const;

  CoreStats Stats() const;
  const BlockLedger& ledger() const { return ledger_; }
  bool Has(int64_t seq) const { return seqs_.count(seq) > 0; }
  // Output tokens so far (tests).
  std::vector<int32_t> OutputOf(int64_t seq) const;
  uint64_t preemptions_of(int64_t seq) const;
  bool idle() const { return seqs_.empty() && in_flight_.empty(); }
  bool has_pending_releases() const { return !pending_release_.empty(); }

 private:
  struct Seq {
    int64_t id = 0;
    std::vector<int32_t> tokens;  // prompt + output
    int32_t prompt_len = 0;
    int32_t computed = 0;         // tokens in the KV cache
    bool running = false;         // admitted (holds or held blocks)
    bool in_flight = false;
    bool needs_sampling = true;   // the last stage has no (current) state
    bool ever_sent = false;       // the last stage may hold state to release
    bool ever_admitted = false;
    int32_t cached_prompt_tokens = 0;  // shared from the prefix cache at the first admission
    // n > 1: the request's first sequence, whose prompt this one shares
    // (0: none); admission waits until that prompt's full blocks are in.
    int64_t prefix_leader = 0;
    SequenceSampling sampling;
    int max_tokens = 0;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    std::optional<absl::Time> deadline;
    uint64_t preemptions = 0;
    // The last stage's proposals, verified by the next decode step (never
    // part of `tokens` before they are accepted).
    std::vector<int32_t> drafts;
    int num_output() const { return static_cast<int>(tokens.size()) - prompt_len; }
  };
  struct InFlight {
    std::vector<ScheduledStep> steps;
    absl::Time sent;
  };

  // Applies the output tokens of one step of `s` (several under
  // speculation) and its drafts; returns the events.
  void ApplyTokens(Seq& s, const ScheduledStep& step, const std::vector<const SampledToken*>& tokens,
                   const SpeculationOutcome* spec, uint64_t batch, std::vector<SeqEvent>* events);
  // Removes `seq` everywhere; frees its blocks.
  void Remove(int64_t seq);
  // A waiting sibling whose leader has not yet computed the shared prompt.
  bool Deferred(const Seq& s) const;
  // The last stage's constraint instructions for `spec` on `s`.
  SamplingConstraint ConstraintFor(const std::string& spec, const Seq& s) const;
  SeqEvent End(Seq& s, SeqFinish finish);

  CoreOptions options_;
  BlockLedger ledger_;
  AdmissionQueue waiting_;
  BatchPolicy policy_;
  std::unordered_map<int64_t, Seq> seqs_;
  std::vector<int64_t> running_;  // admission order
  std::map<uint64_t, InFlight> in_flight_;
  std::vector<int64_t> pending_release_;
  int64_t next_seq_ = 1;
  uint64_t next_batch_ = 1;
  uint64_t preemptions_ = 0;
  uint64_t micro_batches_ = 0;
  uint64_t prefill_tokens_ = 0;
  SpecDecodeCounts spec_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_SCHEDULER_CORE_H_
