// Where one output stands in a grammar: the closed set of pushdown stacks
// after the bytes so far (pda.h). Advancing by a token's bytes is all or
// nothing; a rejected token leaves the matcher as it was.
//
// Thread-compatible.
#ifndef SPAR_GRAMMAR_MATCHER_H_
#define SPAR_GRAMMAR_MATCHER_H_

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "grammar/compiled_grammar.h"
#include "grammar/pda.h"

namespace spar::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // False (and no change) when the grammar does not allow `bytes` here.
  bool Advance(absl::string_view bytes);
  // Whether Advance(bytes) would succeed, and the state it would lead to:
  // accepting afterwards, nothing allowed afterwards, bytes to finish.
  struct Outcome {
    bool ok = false;
    bool accepting = false;
    bool terminated = false;
    int32_t min_cost = CompiledGrammar::kUnreachable;
  };
  Outcome Probe(absl::string_view bytes) const;

  // The output so far is a complete sentence of the grammar.
  bool accepting() const { return closure_.reached_boundary; }
  // Accepting, and no byte may follow: the output is finished.
  bool terminated() const { return closure_.reached_boundary && stacks_.empty(); }
  // Fewest bytes that make the output complete (0 when accepting).
  int32_t min_cost() const { return closure_.reached_boundary ? 0 : closure_.min_cost; }

  const CompiledGrammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const CompiledGrammar>& grammar_ptr() const { return grammar_; }
  // The closed stacks whose top can consume a byte.
  const std::vector<Stack>& stacks() const { return stacks_; }
  size_t arena_nodes() const { return arena_->size(); }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<StackArena> arena_;  // persistent nodes of every stack so far
  mutable StackArena scratch_;         // Probe's nodes, dropped after each call
  std::vector<Stack> stacks_;
  Closure closure_;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_MATCHER_H_
