// How much two engines' (or two runs') top-k selections agree, from their
// ForwardTraces (engine/model.h). Shared by the engine tests.
#ifndef SPAR_TESTS_ENGINE_SELECTION_OVERLAP_H_
#define SPAR_TESTS_ENGINE_SELECTION_OVERLAP_H_

#include <cstdint>
#include <set>

#include "engine/model.h"

namespace spar::testing {

// Of the positions `b` selected at `layer` (valid entries of every token's
// top-k), the share that `a` selected for the same token too.
inline double SelectionOverlap(const ForwardTrace& a, const ForwardTrace& b, int layer, size_t tokens) {
  const int topk = a.topk;
  const auto& sa = a.topk_slots.at(layer);
  const auto& sb = b.topk_slots.at(layer);
  int64_t same = 0, total = 0;
  for (size_t t = 0; t < tokens; ++t) {
    const std::set<int32_t> set_a(sa.begin() + t * topk, sa.begin() + (t + 1) * topk);
    for (int j = 0; j < topk; ++j) {
      if (sb[t * topk + j] < 0) continue;
      ++total;
      same += set_a.count(sb[t * topk + j]);
    }
  }
  return total == 0 ? 1.0 : double(same) / total;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_SELECTION_OVERLAP_H_
