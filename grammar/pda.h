// The pushdown side of a CompiledGrammar: stacks of states and the moves
// between them. A stack is its top state plus an interned, shared chain of
// return states below it (StackNode), so equal stacks are equal pointers,
// a byte step copies nothing, and only a call allocates (one node).
// Grammars may be ambiguous, so a position is a set of stacks.
//
// `boundary` marks the bottom of what is known: the matcher's real bottom
// (nullptr: popping it is the end of the root rule, i.e. "accepting"), or
// the frame below a state whose token table is being precomputed
// (state_masks.h: popping it "escapes" into an unknown caller).
#ifndef SPAR_GRAMMAR_PDA_H_
#define SPAR_GRAMMAR_PDA_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "grammar/compiled_grammar.h"

namespace spar::grammar {

struct StackNode {
  int32_t state;            // a return state
  int32_t cost;             // Dist(state) + below's cost: bytes to unwind from here
  const StackNode* below;   // nullptr or the boundary: the end of the chain
};

struct Stack {
  int32_t top = 0;
  const StackNode* below = nullptr;
  bool operator==(const Stack& o) const { return top == o.top && below == o.below; }
  // Bytes that finish everything on the stack.
  int32_t Cost(const CompiledGrammar& g) const {
    return g.Dist(top) + (below != nullptr ? below->cost : 0);
  }
};

// Owns interned nodes. Not thread-safe.
class StackArena {
 public:
  const StackNode* Intern(const CompiledGrammar& g, int32_t state, const StackNode* below);
  void Clear();
  size_t size() const { return nodes_.size(); }

 private:
  std::deque<StackNode> nodes_;
  absl::flat_hash_map<std::pair<int32_t, const StackNode*>, const StackNode*> index_;
};

// What a set of stacks can do without consuming a byte.
struct Closure {
  bool reached_boundary = false;  // some stack can pop its last frame
  int32_t min_cost = CompiledGrammar::kUnreachable;
};

// Adds to *stacks every stack reachable by calls and returns (no byte),
// then keeps only those whose top has byte edges (the rest can only pop,
// and what they pop to is in the set). `boundary` is never popped.
Closure CloseStacks(const CompiledGrammar& g, StackArena& arena, const StackNode* boundary,
                    std::vector<Stack>* stacks);

// The closed set after `byte` from the closed set `in` (empty: rejected).
Closure StepStacks(const CompiledGrammar& g, StackArena& arena, const StackNode* boundary,
                   const std::vector<Stack>& in, unsigned char byte, std::vector<Stack>* out);

// Whether `bytes` can follow the closed set `in`; on success the closure
// of where they lead (min_cost: bytes to finish from there).
bool Simulate(const CompiledGrammar& g, StackArena& arena, const std::vector<Stack>& in, absl::string_view bytes,
              Closure* after);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_PDA_H_
