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
#include "engine/step_plan.h"
#include "kernels/ref/sampling_ref.h"

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
  ref::SamplingParams params;  // seed already resolved
  int32_t prompt_len = 0;
  int top_logprobs = 0;
  std::optional<SamplingConstraint> constraint;
};

struct PlannedSequence {
  SequenceStep step;                         // seq_id, start_pos, tokens, block_table, num_logits
  std::optional<SequenceSampling> sampling;  // (re)creates the sampling state; required at start_pos 0
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

struct MicroBatchResult {
  uint64_t id = 0;
  absl::Status status;                // a stage failed: the whole micro-batch failed
  std::vector<SampledToken> tokens;   // one per sequence that asked for a logit
  std::vector<StageTiming> timings;
};

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_MICRO_BATCH_H_
