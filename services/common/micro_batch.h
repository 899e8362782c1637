// The domain form of the pipeline's unit of work, shared by the scheduler
// (which builds plans and reads results) and the workers (which execute
// them). worker_convert.h maps these to and from spar.v1 worker.proto.
#ifndef SPAR_SERVICES_COMMON_MICRO_BATCH_H_
#define SPAR_SERVICES_COMMON_MICRO_BATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/sampling_params.h"
#include "engine/step_plan.h"

namespace spar {

// What the last stage needs to sample a sequence. Sent when a sequence
// starts (or restarts after preemption); the token history for penalties is
// rebuilt from the plans' tokens (positions < prompt_len are prompt).
// Constrained decoding of one sequence (worker.proto Constraint).
struct SamplingConstraint {
  std::string spec;  // grammar/constraint.h ConstraintSpec JSON
  std::vector<int32_t> end_token_ids;
  int max_tokens = 0;
};

struct SequenceSampling {
  SamplingParams params;  // seed already resolved
  int32_t prompt_len = 0;
  int top_logprobs = 0;
  // A prefix-cache hit: the tokens at positions [0, start_pos) already in
  // the cache, which the plan does not carry; the history starts with them.
  std::vector<int32_t> cached_tokens;
  std::optional<SamplingConstraint> constraint;
};

// Speculative decoding of one sequence (worker.proto Speculation): the
// last stage verifies the trailing num_draft_tokens tokens and proposes
// num_drafts_wanted drafts for the next step with the MTP layer.
struct SequenceSpeculation {
  int num_draft_tokens = 0;
  int num_drafts_wanted = 0;
  std::optional<int32_t> next_token;  // a prefill chunk without logits: the token after it
};

struct PlannedSequence {
  SequenceStep step;                         // seq_id, start_pos, tokens, block_table, num_logits
  // (Re)creates the sampling state: on a sequence's first chunk, which
  // starts at start_pos = sampling->cached_tokens.size().
  std::optional<SequenceSampling> sampling;
  std::optional<SequenceSpeculation> speculation;  // present: a speculative sequence
};

struct MicroBatchPlan {
  uint64_t id = 0;
  std::vector<PlannedSequence> seqs;
  std::vector<int64_t> release;  // sampling states to drop before the forward
};

struct SampledToken {
  int64_t seq_id = 0;
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  bool constraint_finished = false;  // a constrained output is complete with this token
};

struct StageTiming {
  int stage = 0;
  int64_t queue_ns = 0;
  int64_t compute_ns = 0;
};

// What the last stage's speculation did for one sequence with logits.
struct SpeculationOutcome {
  int64_t seq_id = 0;
  int num_draft_tokens = 0;  // verified
  int num_accepted = 0;      // of them accepted
  std::vector<int32_t> drafts;  // proposals for the next step
};

struct MicroBatchResult {
  uint64_t id = 0;
  absl::Status status;                // a stage failed: the whole micro-batch failed
  // Per sequence that asked for logits its output tokens, in order: one, or
  // under speculation the accepted drafts and the target's next token.
  std::vector<SampledToken> tokens;
  std::vector<StageTiming> timings;
  std::vector<SpeculationOutcome> speculation;  // per speculative sequence with logits
};

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_MICRO_BATCH_H_
