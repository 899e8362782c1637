#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/rule_compiler.h"

namespace spar::grammar {
namespace {

constexpr int32_t kInf = CompiledGrammar::kUnreachable;

int32_t AddSat(int32_t a, int32_t b) { return a >= kInf || b >= kInf ? kInf : std::min(kInf, a + b); }

}  // namespace

// Fewest steps to finish, to a fixed point (worklist over dependents): a
// byte edge is one step, a call the callee's shortest, a shortcut its
// weight.
std::vector<int32_t> CompiledGrammar::Distances(const CompiledGrammar& g, const std::vector<std::vector<CallEdge>>& calls,
                                                const std::vector<std::vector<std::pair<int32_t, int32_t>>>& shortcuts) {
  const int32_t n = g.num_states();
  std::vector<int32_t> dist(n, kInf);
  std::vector<std::vector<int32_t>> dependents(n);  // states whose value reads this one
  for (int32_t s = 0; s < n; ++s) {
    for (int b = 0; b < 256; ++b) {
      const int32_t t = g.next_[static_cast<size_t>(s) * 256 + b];
      if (t >= 0 && (dependents[t].empty() || dependents[t].back() != s)) dependents[t].push_back(s);
    }
    for (const CallEdge& c : calls[s]) {
      dependents[c.ret].push_back(s);
      dependents[c.callee_start].push_back(s);
    }
    if (!shortcuts.empty()) {
      for (const auto& [t, w] : shortcuts[s]) dependents[t].push_back(s);
    }
  }
  auto evaluate = [&](int32_t s) {
    if (g.final_[s]) return 0;
    int32_t best = kInf;
    int32_t last = kNoState;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = g.next_[static_cast<size_t>(s) * 256 + b];
      if (t >= 0 && t != last) {
        best = std::min(best, AddSat(1, dist[t]));
        last = t;
      }
    }
    for (const CallEdge& c : calls[s]) best = std::min(best, AddSat(dist[c.callee_start], dist[c.ret]));
    if (!shortcuts.empty()) {
      for (const auto& [t, w] : shortcuts[s]) best = std::min(best, AddSat(w, dist[t]));
    }
    return best;
  };
  std::deque<int32_t> queue;
  std::vector<bool> queued(n, true);
  for (int32_t s = 0; s < n; ++s) queue.push_back(s);
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    queued[s] = false;
    const int32_t v = evaluate(s);
    if (v < dist[s]) {
      dist[s] = v;
      for (int32_t d : dependents[s]) {
        if (!queued[d]) {
          queued[d] = true;
          queue.push_back(d);
        }
      }
    }
  }
  return dist;
}

// Literal runs (states with one byte edge, no call, not final: a tag, a
// key, a name) can be written with fewer tokens than bytes; each state of
// a run gets a shortcut to the run's end weighted by the fewest tokens that
// spell the rest of the run.
std::vector<std::vector<std::pair<int32_t, int32_t>>> CompiledGrammar::LiteralShortcuts(
    const CompiledGrammar& g, const LiteralTokens& literal_tokens) {
  const int32_t n = g.num_states();
  std::vector<std::vector<std::pair<int32_t, int32_t>>> out(n);
  auto single = [&](int32_t s, unsigned char* byte) {
    if (g.final_[s] || !g.Calls(s).empty()) return kNoState;
    int32_t target = kNoState;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = g.Next(s, static_cast<unsigned char>(b));
      if (t == kNoState) continue;
      if (target != kNoState) return kNoState;  // a choice: not a literal
      target = t;
      *byte = static_cast<unsigned char>(b);
    }
    return target;
  };
  for (int32_t s = 0; s < n; ++s) {
    std::string run;
    int32_t cur = s;
    unsigned char b = 0;
    for (int32_t next; run.size() < 256 && (next = single(cur, &b)) != kNoState; cur = next) run.push_back(static_cast<char>(b));
    if (run.size() < 2) continue;
    const int32_t w = literal_tokens(run);
    if (w > 0 && w < static_cast<int32_t>(run.size())) out[s].emplace_back(cur, w);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(const Grammar& grammar,
                                                                               const LiteralTokens& literal_tokens) {
  const auto& rules = grammar.rules();
  if (grammar.root() < 0 || grammar.root() >= static_cast<int>(rules.size())) {
    return absl::InvalidArgumentError("grammar: no root rule");
  }
  // The rules reachable from the root, compiled in discovery order.
  std::map<int, int> index;  // rule id -> position in `dfas`
  std::vector<int> order;
  std::vector<RuleDfa> dfas;
  std::deque<int> work = {grammar.root()};
  index[grammar.root()] = 0;
  order.push_back(grammar.root());
  // A bound on the whole automaton, which bounds the time compiling takes
  // (a schema with many huge repetition counts).
  constexpr int64_t kMaxStates = 200000;
  int64_t total = 0;
  while (!work.empty()) {
    const int r = work.front();
    work.pop_front();
    SPAR_ASSIGN_OR_RETURN(RuleDfa d, CompileRule(rules[r].body, static_cast<int>(kMaxStates - total)));
    total += d.size();
    if (total > kMaxStates) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the grammar needs more than ", kMaxStates, " automaton states (repetition bounds too large)"));
    }
    for (const auto& calls : d.calls) {
      for (const auto& [callee, ret] : calls) {
        if (callee < 0 || callee >= static_cast<int>(rules.size())) {
          return absl::InvalidArgumentError(absl::StrCat("grammar: rule ", rules[r].name, " calls unknown rule ", callee));
        }
        if (index.emplace(callee, static_cast<int>(order.size())).second) {
          order.push_back(callee);
          work.push_back(callee);
        }
      }
    }
    dfas.push_back(std::move(d));
  }

  auto g = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  std::vector<int32_t> offset(dfas.size() + 1, 0);
  for (size_t i = 0; i < dfas.size(); ++i) offset[i + 1] = offset[i] + dfas[i].size();
  const int32_t n = offset.back();
  g->next_.assign(static_cast<size_t>(n) * 256, kNoState);
  g->final_.assign(n, 0);
  g->has_bytes_.assign(n, 0);
  g->rule_of_.assign(n, 0);
  g->shared_key_.assign(n, "");
  for (int r : order) g->rule_names_.push_back(rules[r].name);
  std::vector<std::vector<CallEdge>> calls(n);
  for (size_t i = 0; i < dfas.size(); ++i) {
    const RuleDfa& d = dfas[i];
    const Rule& rule = rules[order[i]];
    for (int32_t s = 0; s < d.size(); ++s) {
      const int32_t gs = offset[i] + s;
      for (int b = 0; b < 256; ++b) {
        if (d.next[s][b] >= 0) g->next_[static_cast<size_t>(gs) * 256 + b] = offset[i] + d.next[s][b];
      }
      g->final_[gs] = d.final[s];
      g->rule_of_[gs] = static_cast<int>(i);
      if (!rule.shared_key.empty()) g->shared_key_[gs] = absl::StrCat(rule.shared_key, "#", s);
      for (const auto& [callee, ret] : d.calls[s]) calls[gs].push_back({offset[index[callee]], offset[i] + ret});
    }
  }

  std::vector<int32_t> dist = Distances(*g, calls, {});
  g->root_start_ = 0;
  if (dist[0] >= kInf) {
    return absl::InvalidArgumentError("the grammar accepts no output at all (its constraints cannot be satisfied)");
  }

  // Drop edges into dead ends.
  for (int32_t s = 0; s < n; ++s) {
    for (int b = 0; b < 256; ++b) {
      int32_t& t = g->next_[static_cast<size_t>(s) * 256 + b];
      if (t >= 0 && dist[t] >= kInf) t = kNoState;
      if (t >= 0) g->has_bytes_[s] = 1;
    }
    auto& cs = calls[s];
    cs.erase(std::remove_if(cs.begin(), cs.end(),
                            [&](const CallEdge& c) { return dist[c.callee_start] >= kInf || dist[c.ret] >= kInf; }),
             cs.end());
  }
  g->call_begin_.assign(n + 1, 0);
  for (int32_t s = 0; s < n; ++s) {
    g->call_begin_[s + 1] = g->call_begin_[s] + static_cast<int32_t>(calls[s].size());
    g->calls_.insert(g->calls_.end(), calls[s].begin(), calls[s].end());
  }
  g->dist_ = std::move(dist);
  if (literal_tokens) g->dist_ = Distances(*g, calls, LiteralShortcuts(*g, literal_tokens));

  // Left recursion: rule R reaches a call of rule C before any byte; a
  // cycle of those would let the matcher push forever.
  const int num_rules = static_cast<int>(dfas.size());
  std::vector<std::vector<int>> left_calls(num_rules);
  for (int r = 0; r < num_rules; ++r) {
    std::vector<int32_t> stack = {offset[r]};
    std::vector<bool> seen(n, false);
    seen[offset[r]] = true;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (const CallEdge& c : g->Calls(s)) {
        left_calls[r].push_back(g->rule_of_[c.callee_start]);
        if (g->dist_[c.callee_start] == 0 && !seen[c.ret]) {  // the callee may match nothing
          seen[c.ret] = true;
          stack.push_back(c.ret);
        }
      }
    }
  }
  std::vector<int> color(num_rules, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int, size_t>> path;
  for (int r0 = 0; r0 < num_rules; ++r0) {
    if (color[r0] != 0) continue;
    path.emplace_back(r0, 0);
    color[r0] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left_calls[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int c = left_calls[r][i++];
      if (color[c] == 1) {
        return absl::InvalidArgumentError(absl::StrCat("the rule ", g->rule_names_[c],
                                                       " refers to itself before consuming any text (left recursion)"));
      }
      if (color[c] == 0) {
        color[c] = 1;
        path.emplace_back(c, 0);
      }
    }
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

}  // namespace spar::grammar
