// Preemption by recompute: when a running sequence needs KV blocks and none
// are free, the most recently admitted running sequence that is not in
// flight gives up all its blocks and returns to the waiting queue; it is
// later recomputed from its prompt and the tokens it already produced
// (sampling is a function of seed and output index, so it continues with
// exactly the tokens it would have produced). vLLM V1 preempts the same way.
//
// Pure and stateless.
#ifndef SPAR_SERVICES_SCHEDULER_PREEMPTION_POLICY_H_
#define SPAR_SERVICES_SCHEDULER_PREEMPTION_POLICY_H_

#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

namespace spar {

struct PreemptionCandidate {
  int64_t seq = 0;
  int64_t blocks = 0;      // blocks it holds
  bool in_flight = false;  // in a micro-batch on the pipeline: not preemptible
};

class PreemptionPolicy {
 public:
  // Blocks that preempting every eligible candidate would free.
  static int64_t Reclaimable(const std::vector<PreemptionCandidate>& running,
                             const std::unordered_set<int64_t>& protected_seqs);
  // The victim: the last eligible entry of `running` (admission order), or
  // none. Eligible: holds blocks, not in flight, not protected (the
  // requester and sequences already in the batch being built).
  static std::optional<int64_t> PickVictim(const std::vector<PreemptionCandidate>& running,
                                           const std::unordered_set<int64_t>& protected_seqs);
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_PREEMPTION_POLICY_H_
