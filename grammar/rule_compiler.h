// One rule's body (grammar.h) as a minimal deterministic automaton whose
// edges are bytes or calls of other rules: Thompson construction, subset
// construction (bytes and call labels are the alphabet), then Moore
// partition refinement. Deterministic output: the same body always gives
// the same numbering, which shared rules rely on (state_masks.h).
#ifndef SPAR_GRAMMAR_RULE_COMPILER_H_
#define SPAR_GRAMMAR_RULE_COMPILER_H_

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace spar::grammar {

struct RuleDfa {
  // [state][byte] -> state, or -1; state 0 is the start.
  std::vector<std::array<int32_t, 256>> next;
  std::vector<std::vector<std::pair<int, int32_t>>> calls;  // [state] -> (callee rule, return state)
  std::vector<bool> final;
  int32_t size() const { return static_cast<int32_t>(next.size()); }
};

// RESOURCE_EXHAUSTED when the body expands to more than `max_states`
// automaton states (a huge repetition count).
absl::StatusOr<RuleDfa> CompileRule(const Expr& body, int max_states = 200000);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_RULE_COMPILER_H_
