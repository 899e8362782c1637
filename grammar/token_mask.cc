#include "grammar/token_mask.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"

namespace spar::grammar {
namespace {

void Set(uint32_t* words, int32_t id) { words[id >> 5] |= 1u << (id & 31); }
void Clear(uint32_t* words, int32_t id) { words[id >> 5] &= ~(1u << (id & 31)); }

// ORs the state's accepted tokens whose cost is at most `limit` (< 0: any)
// into `out`.
void AddAccepted(const StateTable& t, int64_t limit, int32_t words, uint32_t* out, std::vector<uint32_t>& scratch) {
  if (t.accepted_count == 0) return;
  const bool all = limit < 0 || t.max_cost <= limit;
  if (!all && limit < t.common_cost) {
    for (const auto& [cost, id] : t.cheaper) {
      if (cost > limit) break;
      Set(out, id);
    }
    return;
  }
  if (all) {
    if (!t.accepted_bits.empty()) {
      for (int32_t w = 0; w < words; ++w) out[w] |= t.accepted_bits[w];
    } else {
      for (int32_t id : t.accepted_list) Set(out, id);
    }
    return;
  }
  // Everything but the dearer tokens above the limit.
  if (!t.accepted_bits.empty()) {
    scratch.assign(t.accepted_bits.begin(), t.accepted_bits.end());
    for (const auto& [cost, id] : t.dearer) {
      if (cost <= limit) break;
      Clear(scratch.data(), id);
    }
    for (int32_t w = 0; w < words; ++w) out[w] |= scratch[w];
    return;
  }
  std::vector<int32_t> excluded;
  for (const auto& [cost, id] : t.dearer) {
    if (cost <= limit) break;
    excluded.push_back(id);
  }
  std::sort(excluded.begin(), excluded.end());
  for (int32_t id : t.accepted_list) {
    if (!std::binary_search(excluded.begin(), excluded.end(), id)) Set(out, id);
  }
}

bool AnySet(const uint32_t* words, int32_t n) {
  for (int32_t w = 0; w < n; ++w) {
    if (words[w] != 0) return true;
  }
  return false;
}

MaskStats Fill(StateMasks& tables, const GrammarMatcher& matcher, const MaskOptions& options, int64_t remaining,
               uint32_t* words) {
  const CompiledGrammar& g = matcher.grammar();
  const TokenVocab& vocab = tables.vocab();
  const int32_t n = vocab.mask_words();
  std::memset(words, 0, sizeof(uint32_t) * n);
  MaskStats stats;
  stats.budget_applied = remaining >= 0;
  std::vector<uint32_t> scratch;
  StackArena arena;  // nodes of the escape simulations
  absl::flat_hash_map<const StackNode*, std::vector<Stack>> callers;
  for (const Stack& st : matcher.stacks()) {
    ++stats.stacks;
    const StateTable& t = tables.Get(st.top);
    const int32_t below_cost = st.below != nullptr ? st.below->cost : 0;
    if (remaining < 0) {
      AddAccepted(t, -1, n, words, scratch);
    } else if (remaining - below_cost >= 0) {
      AddAccepted(t, remaining - below_cost, n, words, scratch);
    }
    if (st.below == nullptr || t.escapes.empty()) continue;
    auto [it, fresh] = callers.try_emplace(st.below);
    if (fresh) {
      it->second.push_back(Stack{st.below->state, st.below->below});
      CloseStacks(g, arena, nullptr, &it->second);
    }
    const std::vector<Stack>& caller = it->second;
    if (caller.empty()) continue;
    for (const StateTable::Escape& e : t.escapes) {
      ++stats.escape_groups;
      Closure after;
      if (!Simulate(g, arena, caller, e.rest, &after)) continue;
      const int32_t cost = after.reached_boundary ? 0 : after.min_cost;
      if (remaining >= 0 && cost > remaining) continue;
      for (int32_t id : e.ids) Set(words, id);
    }
  }
  for (int32_t id : options.end_ids) {
    if (id >= 0 && id < vocab.size()) Clear(words, id);
  }
  for (int32_t id : vocab.special_ids()) {
    if (std::find(options.allowed_special.begin(), options.allowed_special.end(), id) == options.allowed_special.end()) {
      Clear(words, id);
    }
  }
  if (matcher.accepting()) {
    for (int32_t id : options.end_ids) {
      if (id >= 0 && id < vocab.size()) Set(words, id);
    }
  }
  return stats;
}

}  // namespace

MaskStats FillTokenMask(StateMasks& tables, const GrammarMatcher& matcher, const MaskOptions& options,
                        uint32_t* words) {
  const int32_t n = tables.vocab().mask_words();
  MaskStats stats = Fill(tables, matcher, options, options.remaining, words);
  if (AnySet(words, n)) return stats;
  if (options.remaining >= 0) {
    // Nothing can be finished in time (the budget was smaller than the
    // shortest output to begin with): finish as soon as possible instead,
    // with the smallest budget that allows a token. One that makes progress
    // exists at the current cost - 1 (a byte of the shortest completion).
    int64_t lo = options.remaining + 1, hi = std::max<int64_t>(lo, matcher.min_cost() - 1);
    stats = Fill(tables, matcher, options, hi, words);
    if (AnySet(words, n)) {
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        Fill(tables, matcher, options, mid, words);
        if (AnySet(words, n)) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      stats = Fill(tables, matcher, options, hi, words);
    } else {
      stats = Fill(tables, matcher, options, -1, words);
    }
    stats.budget_dropped = true;
    if (AnySet(words, n)) return stats;
  }
  for (int32_t id : options.end_ids) {
    if (id >= 0 && id < tables.vocab().size()) Set(words, id);
  }
  return stats;
}

}  // namespace spar::grammar
