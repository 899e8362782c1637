#include "grammar/pda.h"

#include <algorithm>

namespace spar::grammar {

const StackNode* StackArena::Intern(const CompiledGrammar& g, int32_t state, const StackNode* below) {
  auto [it, fresh] = index_.try_emplace(std::make_pair(state, below), nullptr);
  if (fresh) {
    const int32_t below_cost = below != nullptr ? below->cost : 0;
    nodes_.push_back(StackNode{state, std::min(CompiledGrammar::kUnreachable, g.Dist(state) + below_cost), below});
    it->second = &nodes_.back();
  }
  return it->second;
}

void StackArena::Clear() {
  index_.clear();
  nodes_.clear();
}

namespace {

bool Contains(const std::vector<Stack>& v, const Stack& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

Closure CloseStacks(const CompiledGrammar& g, StackArena& arena, const StackNode* boundary, std::vector<Stack>* stacks) {
  Closure c;
  // Most sets hold one to a few stacks: a linear membership test beats
  // hashing here.
  std::vector<Stack>& all = *stacks;
  for (size_t i = 0; i < all.size(); ++i) {
    const Stack s = all[i];
    c.min_cost = std::min(c.min_cost, s.Cost(g));
    for (const CallEdge& e : g.Calls(s.top)) {
      const Stack pushed{e.callee_start, arena.Intern(g, e.ret, s.below)};
      if (!Contains(all, pushed)) all.push_back(pushed);
    }
    if (g.IsFinal(s.top)) {
      if (s.below == boundary) {
        c.reached_boundary = true;
      } else {
        const Stack popped{s.below->state, s.below->below};
        if (!Contains(all, popped)) all.push_back(popped);
      }
    }
  }
  all.erase(std::remove_if(all.begin(), all.end(), [&](const Stack& s) { return !g.HasByteEdges(s.top); }),
            all.end());
  return c;
}

Closure StepStacks(const CompiledGrammar& g, StackArena& arena, const StackNode* boundary,
                   const std::vector<Stack>& in, unsigned char byte, std::vector<Stack>* out) {
  out->clear();
  for (const Stack& s : in) {
    const int32_t t = g.Next(s.top, byte);
    if (t == CompiledGrammar::kNoState) continue;
    const Stack moved{t, s.below};
    if (!Contains(*out, moved)) out->push_back(moved);
  }
  if (out->empty()) return Closure();
  return CloseStacks(g, arena, boundary, out);
}

bool Simulate(const CompiledGrammar& g, StackArena& arena, const std::vector<Stack>& in, absl::string_view bytes,
              Closure* after) {
  std::vector<Stack> cur = in, next;
  Closure c;
  for (const Stack& s : cur) c.min_cost = std::min(c.min_cost, s.Cost(g));
  for (unsigned char b : bytes) {
    if (cur.empty()) return false;  // the grammar ended before this byte
    c = StepStacks(g, arena, nullptr, cur, b, &next);
    if (next.empty() && !c.reached_boundary) return false;
    cur.swap(next);
  }
  if (after != nullptr) *after = c;
  return true;
}

}  // namespace spar::grammar
