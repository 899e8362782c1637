// A deterministic automaton over bytes without rule calls: the building
// block for the parts of a grammar that are regular and would be awkward
// as expressions — valid UTF-8 text, free text up to a closing tag that
// must not contain other tags, bounded numbers (number_range.h). A grammar
// embeds one as an expression (grammar.h, Expr::Automaton); the rule
// compiler copies its states into the rule's automaton.
#ifndef SPAR_GRAMMAR_BYTE_DFA_H_
#define SPAR_GRAMMAR_BYTE_DFA_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace spar::grammar {

struct ByteDfa {
  static constexpr int32_t kDead = -1;
  std::vector<std::array<int32_t, 256>> next;  // [state][byte] -> state or kDead
  std::vector<bool> final;
  int32_t start = 0;

  int32_t AddState(bool is_final);
  int32_t size() const { return static_cast<int32_t>(next.size()); }
  // Whether the automaton accepts `bytes` whole.
  bool Accepts(absl::string_view bytes) const;
};

// Keeps only the states reachable from the start that can reach a final
// state (the start is kept even when nothing is accepted), renumbered in
// breadth-first order so equal automata compare equal.
ByteDfa Trim(const ByteDfa& dfa);

// Strings both accept.
ByteDfa Intersect(const ByteDfa& a, const ByteDfa& b);

// Any well-formed UTF-8 text (final at character boundaries), optionally
// without some ASCII bytes (`excluded`, e.g. control characters).
ByteDfa Utf8Text(absl::string_view excluded_ascii = "");

// Well-formed UTF-8 text that contains none of `terminator` and
// `forbidden`, followed by `terminator`, which ends the automaton (its one
// final state has no transitions): "the reasoning up to </think>, not
// containing <tool_call>".
ByteDfa TextUntil(absl::string_view terminator, const std::vector<std::string>& forbidden);

// Any bytes that never contain one of `patterns` (every state final).
ByteDfa WithoutSubstrings(const std::vector<std::string>& patterns);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_BYTE_DFA_H_
