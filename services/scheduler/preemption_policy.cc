#include "services/scheduler/preemption_policy.h"

namespace spar {
namespace {
bool Eligible(const PreemptionCandidate& c, const std::unordered_set<int64_t>& protected_seqs) {
  return c.blocks > 0 && !c.in_flight && protected_seqs.count(c.seq) == 0;
}
}  // namespace

int64_t PreemptionPolicy::Reclaimable(const std::vector<PreemptionCandidate>& running,
                                      const std::unordered_set<int64_t>& protected_seqs) {
  int64_t total = 0;
  for (const auto& c : running) {
    if (Eligible(c, protected_seqs)) total += c.blocks;
  }
  return total;
}

std::optional<int64_t> PreemptionPolicy::PickVictim(const std::vector<PreemptionCandidate>& running,
                                                    const std::unordered_set<int64_t>& protected_seqs) {
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    if (Eligible(*it, protected_seqs)) return it->seq;
  }
  return std::nullopt;
}

}  // namespace spar
