#include "grammar/state_masks.h"

#include <algorithm>
#include <map>

#include "grammar/pda.h"

namespace spar::grammar {

size_t StateTable::bytes() const {
  size_t n = accepted_bits.size() * 4 + accepted_list.size() * 4 + (cheaper.size() + dearer.size()) * 8;
  for (const Escape& e : escapes) n += e.rest.size() + e.ids.size() * 4;
  return n;
}

std::shared_ptr<const StateTable> SharedTableCache::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tables_.find(key);
  return it == tables_.end() ? nullptr : it->second;
}

void SharedTableCache::Put(const std::string& key, std::shared_ptr<const StateTable> table) {
  std::lock_guard<std::mutex> lock(mu_);
  tables_.emplace(key, std::move(table));
}

size_t SharedTableCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tables_.size();
}

StateMasks::StateMasks(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<SharedTableCache> shared)
    : grammar_(std::move(grammar)), shared_(std::move(shared)), tables_(grammar_->num_states()) {}

const StateTable& StateMasks::Get(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<const StateTable>& slot = tables_[state];
  if (slot == nullptr) {
    const std::string& key = grammar_->SharedKey(state);
    if (!key.empty()) slot = shared_->Find(key);
    if (slot == nullptr) {
      slot = Compute(state);
      ++computed_;
      if (!key.empty()) shared_->Put(key, slot);
    }
  }
  return *slot;
}

std::shared_ptr<const StateTable> StateMasks::Compute(int32_t s) const {
  const CompiledGrammar& g = *grammar_;
  const TokenVocab& v = vocab();
  const auto& trie = v.trie();
  const auto& ids = v.sorted_ids();
  // The unknown caller: popping it is an escape. Cost 0, so a local
  // stack's cost counts only what lies above it.
  static const StackNode kBoundary{CompiledGrammar::kNoState, 0, nullptr};
  StackArena arena;
  std::vector<std::vector<Stack>> level(1);
  std::vector<Closure> closure(1);
  level[0] = {Stack{s, &kBoundary}};
  closure[0] = CloseStacks(g, arena, &kBoundary, &level[0]);

  std::vector<std::pair<int32_t, int32_t>> accepted;  // (cost, id)
  std::vector<StateTable::Escape> escapes;
  absl::flat_hash_map<std::string, size_t> escape_of;
  auto add_escape = [&](int32_t id, int32_t at) {
    const absl::string_view rest = v.bytes(id).substr(at);
    auto [it, fresh] = escape_of.try_emplace(std::string(rest), escapes.size());
    if (fresh) escapes.push_back({std::string(rest), {}});
    std::vector<int32_t>& group = escapes[it->second].ids;
    if (group.empty() || group.back() != id) group.push_back(id);
  };
  // Depths (>= 1) on the current trie path after which s's frame may end.
  std::vector<int32_t> ends_at;
  const int32_t sentinel = static_cast<int32_t>(trie.size()) - 1;
  int32_t i = 1;
  while (i < sentinel) {
    const TokenVocab::TrieNode& node = trie[i];
    const int32_t d = node.depth;
    while (!ends_at.empty() && ends_at.back() >= d) ends_at.pop_back();
    if (static_cast<int32_t>(level.size()) <= d) {
      level.resize(d + 1);
      closure.resize(d + 1);
    }
    closure[d] = StepStacks(g, arena, &kBoundary, level[d - 1], node.byte, &level[d]);
    const bool alive = !level[d].empty();
    const bool frame_ends = closure[d].reached_boundary;
    for (int32_t t = node.tok_begin; t < trie[i + 1].tok_begin; ++t) {
      if (alive || frame_ends) {
        accepted.emplace_back(closure[d].min_cost, ids[t]);
      } else {
        for (int32_t at : ends_at) add_escape(ids[t], at);
      }
    }
    if (frame_ends) ends_at.push_back(d);
    if (alive) {
      ++i;
      continue;
    }
    // Nothing goes on inside the frame below here: the longer tokens of
    // this subtree can only continue in the caller.
    if (!ends_at.empty()) {
      for (int32_t t = trie[i + 1].tok_begin; t < trie[node.subtree_end].tok_begin; ++t) {
        for (int32_t at : ends_at) add_escape(ids[t], at);
      }
    }
    i = node.subtree_end;
  }

  auto table = std::make_shared<StateTable>();
  table->accepted_count = static_cast<int32_t>(accepted.size());
  if (table->accepted_count < v.mask_words()) {
    for (const auto& [cost, id] : accepted) table->accepted_list.push_back(id);
    std::sort(table->accepted_list.begin(), table->accepted_list.end());
  } else {
    table->accepted_bits.assign(v.mask_words(), 0);
    for (const auto& [cost, id] : accepted) table->accepted_bits[id >> 5] |= 1u << (id & 31);
  }
  std::map<int32_t, int32_t> histogram;
  for (const auto& [cost, id] : accepted) ++histogram[cost];
  int32_t best = -1;
  for (const auto& [cost, count] : histogram) {
    if (count > best) {
      best = count;
      table->common_cost = cost;
    }
    table->max_cost = cost;
  }
  for (const auto& [cost, id] : accepted) {
    if (cost < table->common_cost) table->cheaper.emplace_back(cost, id);
    if (cost > table->common_cost) table->dearer.emplace_back(cost, id);
  }
  std::sort(table->cheaper.begin(), table->cheaper.end());
  std::sort(table->dearer.begin(), table->dearer.end(), std::greater<>());
  table->escapes = std::move(escapes);
  return table;
}

}  // namespace spar::grammar
