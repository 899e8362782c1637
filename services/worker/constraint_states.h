// Constrained decoding on the last pipeline stage: one grammar matcher per
// constrained sequence, created with the sequence's sampling state (the
// plan's SamplingState.constraint), advanced by the plans' own output
// tokens (so a preempted sequence that is recomputed rebuilds it exactly,
// as the penalty history is rebuilt), asked for the mask of each token
// sampled and whether a sampled token completes the output.
//
// The constraint engine (the model's vocabulary, its token tables and the
// compiled constraints, grammar/constraint_engine.h) is built on first use
// from the model directory's tokenizer.json, so stages that never see a
// constrained request pay nothing.
//
// Thread-compatible (owned by the worker's compute thread).
#ifndef SPAR_SERVICES_WORKER_CONSTRAINT_STATES_H_
#define SPAR_SERVICES_WORKER_CONSTRAINT_STATES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "grammar/constraint_engine.h"
#include "services/common/micro_batch.h"

namespace spar {

class ConstraintStates {
 public:
  // `vocab_size`: the model's logits width (the masks' width).
  ConstraintStates(std::string model_dir, int32_t vocab_size)
      : model_dir_(std::move(model_dir)), vocab_size_(vocab_size) {}

  // (Re)creates `seq`'s constraint, or drops it when `sampling` has none.
  // INVALID_ARGUMENT for a spec that does not compile.
  absl::Status Reset(int64_t seq, const SequenceSampling& sampling);
  // Tokens at positions [start_pos, ...) of `seq`; its outputs advance the
  // matcher. A no-op for unconstrained sequences.
  absl::Status Observe(int64_t seq, int32_t start_pos, const std::vector<int32_t>& tokens);
  // The mask of `seq`'s output token `step` (null: unconstrained), valid
  // until `seq` is observed, reset or released.
  const uint32_t* Mask(int64_t seq, uint64_t step);
  // `token`, `seq`'s output token `step`, completes its constrained output.
  bool Finishes(int64_t seq, int32_t token, uint64_t step) const;
  bool Constrained(int64_t seq) const { return states_.count(seq) > 0; }
  void Release(int64_t seq) { states_.erase(seq); }
  void Clear() { states_.clear(); }
  size_t size() const { return states_.size(); }

 private:
  absl::Status EnsureEngine();

  struct State {
    std::unique_ptr<grammar::SequenceConstraint> constraint;
    int32_t prompt_len = 0;
    std::vector<uint32_t> mask;
  };
  const std::string model_dir_;
  const int32_t vocab_size_;
  std::unique_ptr<grammar::ConstraintEngine> engine_;
  std::unordered_map<int64_t, State> states_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_CONSTRAINT_STATES_H_
