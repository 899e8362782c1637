// Per-sequence sampling state kept by the last pipeline stage: sampling
// parameters, the token history the penalties read, and the position up to
// which the history is known. Created (or re-created after a preemption)
// and released by fields of the micro-batch plans; the history grows from
// the plans' own tokens, so it matches the scheduler's view exactly and is
// rebuilt correctly when a preempted sequence is recomputed.
//
// Thread-compatible (owned by the worker's compute thread).
#ifndef SPAR_SERVICES_WORKER_SAMPLING_STATES_H_
#define SPAR_SERVICES_WORKER_SAMPLING_STATES_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "services/common/micro_batch.h"

namespace spar {

class SamplingStates {
 public:
  // SamplingStates::Create() replaces any state of `seq_id`.
  void Create(int64_t seq_id, const SequenceSampling& sampling);
  // Adds tokens at positions [start_pos, start_pos + tokens) to the history.
  // FAILED_PRECONDITION for an unknown sequence or a gap/overlap with what
  // was observed before (the plan stream would be corrupt).
  absl::Status Observe(int64_t seq_id, int32_t start_pos, const std::vector<int32_t>& tokens);
  // The sample request for the token after everything observed; `history`
  // points into this object and stays valid until the next mutation.
  absl::StatusOr<SampleRequest> Request(int64_t seq_id) const;
  void Release(int64_t seq_id);
  void Clear() { states_.clear(); }
  size_t size() const { return states_.size(); }
  bool Has(int64_t seq_id) const { return states_.count(seq_id) > 0; }

 private:
  struct State {
    SequenceSampling sampling;
    TokenHistory history;
    int32_t next_pos = 0;  // positions [0, next_pos) are in the history
  };
  std::unordered_map<int64_t, State> states_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_SAMPLING_STATES_H_
