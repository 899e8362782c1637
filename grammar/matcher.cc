#include "grammar/matcher.h"

#include <utility>

namespace spar::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), arena_(std::make_unique<StackArena>()) {
  stacks_.push_back(Stack{grammar_->root_start(), nullptr});
  closure_ = CloseStacks(*grammar_, *arena_, nullptr, &stacks_);
}

bool GrammarMatcher::Advance(absl::string_view bytes) {
  std::vector<Stack> cur = stacks_, next;
  Closure c = closure_;
  for (unsigned char b : bytes) {
    if (cur.empty()) return false;
    c = StepStacks(*grammar_, *arena_, nullptr, cur, b, &next);
    if (next.empty() && !c.reached_boundary) return false;
    cur.swap(next);
  }
  stacks_ = std::move(cur);
  closure_ = c;
  return true;
}

GrammarMatcher::Outcome GrammarMatcher::Probe(absl::string_view bytes) const {
  Outcome o;
  std::vector<Stack> cur = stacks_, next;
  Closure c = closure_;
  for (unsigned char b : bytes) {
    if (cur.empty()) {
      scratch_.Clear();
      return o;
    }
    c = StepStacks(*grammar_, scratch_, nullptr, cur, b, &next);
    if (next.empty() && !c.reached_boundary) {
      scratch_.Clear();
      return o;
    }
    cur.swap(next);
  }
  o.ok = true;
  o.accepting = c.reached_boundary;
  o.terminated = c.reached_boundary && cur.empty();
  o.min_cost = c.reached_boundary ? 0 : c.min_cost;
  scratch_.Clear();
  return o;
}

}  // namespace spar::grammar
