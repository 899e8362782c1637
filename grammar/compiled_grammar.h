// A grammar's rules as one automaton: every rule's minimal DFA
// (rule_compiler.h) placed in one global state space, so a pushdown stack
// frame is a single state id (the caller's return state). Also, per state,
// the fewest tokens that finish its rule from there (Dist) — what the token
// budget reads (token_mask.h): a byte is one token (byte-level vocabularies
// have every byte), and with a vocabulary at hand a literal run (a tag such
// as <arg_key>, a key, a name) costs the fewest tokens that spell it — with
// edges into states that can never finish removed, so a matcher never walks
// into a dead end.
//
// Compile refuses, naming the rule: left recursion (a rule that reaches a
// call of itself without consuming a byte: the matcher could loop), and a
// root that can never finish. Immutable and thread-safe once built.
#ifndef SPAR_GRAMMAR_COMPILED_GRAMMAR_H_
#define SPAR_GRAMMAR_COMPILED_GRAMMAR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grammar/grammar.h"

namespace spar::grammar {

struct CallEdge {
  int32_t callee_start;  // the callee rule's start state
  int32_t ret;           // where the caller continues once it returns
};

class CompiledGrammar {
 public:
  static constexpr int32_t kNoState = -1;
  static constexpr int32_t kUnreachable = INT32_MAX / 4;

  // The fewest tokens that spell a literal run; empty: a byte each.
  using LiteralTokens = std::function<int32_t(absl::string_view literal)>;
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const Grammar& grammar,
                                                                        const LiteralTokens& literal_tokens = {});

  int32_t num_states() const { return static_cast<int32_t>(final_.size()); }
  int32_t root_start() const { return root_start_; }
  int32_t Next(int32_t state, unsigned char byte) const { return next_[static_cast<size_t>(state) * 256 + byte]; }
  bool IsFinal(int32_t state) const { return final_[state] != 0; }
  bool HasByteEdges(int32_t state) const { return has_bytes_[state] != 0; }
  absl::Span<const CallEdge> Calls(int32_t state) const {
    return absl::MakeConstSpan(calls_.data() + call_begin_[state], call_begin_[state + 1] - call_begin_[state]);
  }
  // Fewest tokens (see above) from `state` to a final state of its own
  // rule (nested calls counted at their shortest).
  int32_t Dist(int32_t state) const { return dist_[state]; }
  // Key under which the state's token-mask table may be shared between
  // grammars (its rule's shared_key + the state's index in the rule); empty
  // for a grammar's own rules.
  const std::string& SharedKey(int32_t state) const { return shared_key_[state]; }
  int rule_of(int32_t state) const { return rule_of_[state]; }
  const std::string& rule_name(int rule) const { return rule_names_[rule]; }

 private:
  CompiledGrammar() = default;
  static std::vector<int32_t> Distances(const CompiledGrammar& g, const std::vector<std::vector<CallEdge>>& calls,
                                        const std::vector<std::vector<std::pair<int32_t, int32_t>>>& shortcuts);
  static std::vector<std::vector<std::pair<int32_t, int32_t>>> LiteralShortcuts(const CompiledGrammar& g,
                                                                                const LiteralTokens& literal_tokens);

  std::vector<int32_t> next_;  // [state * 256 + byte]
  std::vector<uint8_t> final_, has_bytes_;
  std::vector<int32_t> call_begin_;
  std::vector<CallEdge> calls_;
  std::vector<int32_t> dist_;
  std::vector<int> rule_of_;
  std::vector<std::string> shared_key_;
  std::vector<std::string> rule_names_;
  int32_t root_start_ = 0;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_COMPILED_GRAMMAR_H_
