#include "grammar/rule_compiler.h"

#include <algorithm>
#include <bitset>
#include <deque>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace spar::grammar {
namespace {

struct Nfa {
  struct State {
    std::vector<int32_t> eps;
    std::vector<std::pair<std::bitset<256>, int32_t>> bytes;
    std::vector<std::pair<int, int32_t>> calls;
  };
  std::vector<State> states;
  int max_states = 0;
  bool overflow = false;

  int32_t Add() {
    if (static_cast<int>(states.size()) >= max_states) {
      overflow = true;
      return 0;  // keep building harmlessly; the caller reports the overflow
    }
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
  void Eps(int32_t a, int32_t b) { states[a].eps.push_back(b); }
};

struct Frag {
  int32_t start, end;
};

Frag Build(Nfa& nfa, const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kBytes: {
      const int32_t start = nfa.Add();
      int32_t cur = start;
      for (unsigned char c : e.bytes) {
        if (nfa.overflow) break;
        const int32_t next = nfa.Add();
        std::bitset<256> set;
        set.set(c);
        nfa.states[cur].bytes.emplace_back(set, next);
        cur = next;
      }
      return {start, cur};
    }
    case Expr::Kind::kClass: {
      const int32_t start = nfa.Add(), end = nfa.Add();
      if (e.byte_set.any()) nfa.states[start].bytes.emplace_back(e.byte_set, end);
      return {start, end};
    }
    case Expr::Kind::kSeq: {
      const int32_t start = nfa.Add();
      int32_t cur = start;
      for (const Expr& item : e.items) {
        if (nfa.overflow) break;
        const Frag f = Build(nfa, item);
        nfa.Eps(cur, f.start);
        cur = f.end;
      }
      return {start, cur};
    }
    case Expr::Kind::kAlt: {
      const int32_t start = nfa.Add(), end = nfa.Add();
      for (const Expr& item : e.items) {
        if (nfa.overflow) break;
        const Frag f = Build(nfa, item);
        nfa.Eps(start, f.start);
        nfa.Eps(f.end, end);
      }
      return {start, end};
    }
    case Expr::Kind::kRepeat: {
      const int32_t start = nfa.Add();
      int32_t cur = start;
      for (int i = 0; i < e.min && !nfa.overflow; ++i) {
        const Frag f = Build(nfa, e.items[0]);
        nfa.Eps(cur, f.start);
        cur = f.end;
      }
      if (e.max < 0) {
        const Frag f = Build(nfa, e.items[0]);
        const int32_t end = nfa.Add();
        nfa.Eps(cur, f.start);
        nfa.Eps(cur, end);
        nfa.Eps(f.end, f.start);
        nfa.Eps(f.end, end);
        return {start, end};
      }
      const int32_t end = nfa.Add();
      nfa.Eps(cur, end);
      for (int i = e.min; i < e.max && !nfa.overflow; ++i) {
        const Frag f = Build(nfa, e.items[0]);
        nfa.Eps(cur, f.start);
        nfa.Eps(f.end, end);
        cur = f.end;
      }
      return {start, end};
    }
    case Expr::Kind::kCall: {
      const int32_t start = nfa.Add(), end = nfa.Add();
      nfa.states[start].calls.emplace_back(e.rule, end);
      return {start, end};
    }
    case Expr::Kind::kAutomaton: {
      const ByteDfa& d = *e.dfa;
      const int32_t start = nfa.Add(), end = nfa.Add();
      const int32_t base = static_cast<int32_t>(nfa.states.size());
      for (int32_t s = 0; s < d.size() && !nfa.overflow; ++s) nfa.Add();
      if (nfa.overflow) return {start, end};
      nfa.Eps(start, base + d.start);
      for (int32_t s = 0; s < d.size(); ++s) {
        std::map<int32_t, std::bitset<256>> by_target;
        for (int c = 0; c < 256; ++c) {
          if (d.next[s][c] != ByteDfa::kDead) by_target[d.next[s][c]].set(c);
        }
        for (const auto& [t, set] : by_target) nfa.states[base + s].bytes.emplace_back(set, base + t);
        if (d.final[s]) nfa.Eps(base + s, end);
      }
      return {start, end};
    }
  }
  return {nfa.Add(), nfa.Add()};
}

using StateSet = std::vector<int32_t>;

StateSet Closure(const Nfa& nfa, StateSet set) {
  std::vector<int32_t> stack(set.begin(), set.end());
  std::vector<bool> seen(nfa.states.size(), false);
  for (int32_t s : set) seen[s] = true;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t t : nfa.states[s].eps) {
      if (!seen[t]) {
        seen[t] = true;
        set.push_back(t);
        stack.push_back(t);
      }
    }
  }
  std::sort(set.begin(), set.end());
  return set;
}

// Moore refinement: states with equal futures merge; the result is
// renumbered breadth-first from the start. Bytes that every state treats
// alike form one class, so a signature has one entry per class, not 256.
// Refinement takes as many rounds as the longest chain of distinguishable
// states (a counted repetition: its count), so automata above
// kMaxMinimizeStates are kept as built (already deterministic; minimal or
// not, the matcher is the same language).
constexpr int32_t kMaxMinimizeStates = 3000;

struct SignatureHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

RuleDfa Minimize(const RuleDfa& d) {
  const int32_t n = d.size();
  if (n > kMaxMinimizeStates) return d;
  // Byte classes: bytes with the same column of targets.
  std::vector<int> reps;  // one byte per class
  {
    std::unordered_map<std::vector<int32_t>, int, SignatureHash> seen;
    for (int b = 0; b < 256; ++b) {
      std::vector<int32_t> col(n);
      for (int32_t s = 0; s < n; ++s) col[s] = d.next[s][b];
      if (seen.emplace(std::move(col), b).second) reps.push_back(b);
    }
  }
  std::vector<int32_t> cls(n);
  for (int32_t s = 0; s < n; ++s) cls[s] = d.final[s] ? 1 : 0;
  int32_t classes = -1;
  std::vector<int32_t> sig;
  for (;;) {
    std::unordered_map<std::vector<int32_t>, int32_t, SignatureHash> ids;
    ids.reserve(static_cast<size_t>(n));
    std::vector<int32_t> next_cls(n);
    for (int32_t s = 0; s < n; ++s) {
      sig.clear();
      sig.push_back(cls[s]);
      for (int b : reps) sig.push_back(d.next[s][b] < 0 ? -1 : cls[d.next[s][b]]);
      std::vector<std::pair<int, int32_t>> calls;
      for (const auto& [rule, ret] : d.calls[s]) calls.emplace_back(rule, cls[ret]);
      std::sort(calls.begin(), calls.end());
      calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
      for (const auto& [rule, c] : calls) {
        sig.push_back(rule);
        sig.push_back(c);
      }
      // Class ids in order of first appearance by state: deterministic.
      auto [it, fresh] = ids.emplace(sig, static_cast<int32_t>(ids.size()));
      next_cls[s] = it->second;
    }
    const int32_t count = static_cast<int32_t>(ids.size());
    cls = std::move(next_cls);
    if (count == classes) break;
    classes = count;
  }
  // Representative per class, renumbered breadth-first from the start.
  std::vector<int32_t> rep(classes, -1);
  for (int32_t s = 0; s < n; ++s) {
    if (rep[cls[s]] < 0) rep[cls[s]] = s;
  }
  std::vector<int32_t> order(classes, -1);
  RuleDfa out;
  std::deque<int32_t> work;
  auto id_of = [&](int32_t c) {
    if (order[c] < 0) {
      order[c] = out.size();
      std::array<int32_t, 256> row;
      row.fill(-1);
      out.next.push_back(row);
      out.calls.emplace_back();
      out.final.push_back(d.final[rep[c]]);
      work.push_back(c);
    }
    return order[c];
  };
  id_of(cls[0]);
  while (!work.empty()) {
    const int32_t c = work.front();
    work.pop_front();
    const int32_t s = rep[c];
    const int32_t me = order[c];
    for (int b = 0; b < 256; ++b) {
      if (d.next[s][b] >= 0) {
        const int32_t t = id_of(cls[d.next[s][b]]);
        out.next[me][b] = t;
      }
    }
    std::vector<std::pair<int, int32_t>> calls;
    for (const auto& [rule, ret] : d.calls[s]) calls.emplace_back(rule, cls[ret]);
    std::sort(calls.begin(), calls.end());
    calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
    for (const auto& [rule, rc] : calls) {
      const int32_t t = id_of(rc);
      out.calls[me].emplace_back(rule, t);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RuleDfa> CompileRule(const Expr& body, int max_states) {
  Nfa nfa;
  nfa.max_states = max_states;
  const Frag f = Build(nfa, body);
  if (nfa.overflow) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the grammar expands to more than ", max_states, " automaton states (a repetition bound too large)"));
  }
  RuleDfa dfa;
  std::map<StateSet, int32_t> ids;
  std::vector<StateSet> sets;
  auto id_of = [&](StateSet set) -> int32_t {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    const int32_t id = dfa.size();
    std::array<int32_t, 256> row;
    row.fill(-1);
    dfa.next.push_back(row);
    dfa.calls.emplace_back();
    dfa.final.push_back(std::binary_search(set.begin(), set.end(), f.end));
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  id_of(Closure(nfa, {f.start}));
  for (int32_t d = 0; d < dfa.size(); ++d) {
    if (dfa.size() > max_states) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the grammar expands to more than ", max_states, " automaton states"));
    }
    const StateSet set = sets[d];
    std::vector<std::pair<const std::bitset<256>*, int32_t>> edges;
    std::map<int, StateSet> calls;
    for (int32_t s : set) {
      for (const auto& [bits, t] : nfa.states[s].bytes) edges.emplace_back(&bits, t);
      for (const auto& [rule, t] : nfa.states[s].calls) calls[rule].push_back(t);
    }
    std::map<StateSet, int32_t> by_targets;  // bytes with the same targets share one subset
    for (int b = 0; b < 256; ++b) {
      StateSet targets;
      for (const auto& [bits, t] : edges) {
        if ((*bits)[b]) targets.push_back(t);
      }
      if (targets.empty()) continue;
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      auto it = by_targets.find(targets);
      int32_t t;
      if (it == by_targets.end()) {
        t = id_of(Closure(nfa, targets));
        by_targets.emplace(std::move(targets), t);
      } else {
        t = it->second;
      }
      dfa.next[d][b] = t;
    }
    for (auto& [rule, targets] : calls) {
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      const int32_t t = id_of(Closure(nfa, targets));
      dfa.calls[d].emplace_back(rule, t);
    }
  }
  return Minimize(dfa);
}

}  // namespace spar::grammar
