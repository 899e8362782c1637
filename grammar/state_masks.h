// Token tables per grammar state, the precomputed half of a token mask
// (the idea of xgrammar's adaptive token mask cache). For a state s with an
// unknown stack below it, every vocabulary token is, walking the vocab trie
// once:
//   accepted  — its bytes can be consumed without leaving s's rule frame
//               (calls it makes are tracked exactly): allowed whatever the
//               stack below is;
//   escaping  — s's frame can end partway through it, and the rest of its
//               bytes then belongs to the caller: decided at mask time by
//               matching that rest against the real stack. Tokens are
//               grouped by the rest, so "\"," after a string is matched
//               once for all the tokens that end with it;
//   rejected  — neither.
// Accepted tokens also carry the bytes their end position still needs to
// finish s's frame (its "cost"), so a token budget can drop the ones that
// could not be finished in time without simulating them.
//
// Tables are computed on first use of a state. States of shared rules
// (Rule::shared_key: JSON strings, numbers, free text...) are the same in
// every grammar, so their tables live in a SharedTableCache per vocabulary
// and are computed once per process.
//
// Thread-safe.
#ifndef SPAR_GRAMMAR_STATE_MASKS_H_
#define SPAR_GRAMMAR_STATE_MASKS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "grammar/compiled_grammar.h"
#include "grammar/token_vocab.h"

namespace spar::grammar {

struct StateTable {
  // Accepted tokens: a bitset of mask_words words, or (when fewer) a
  // sorted list.
  std::vector<uint32_t> accepted_bits;
  std::vector<int32_t> accepted_list;
  int32_t accepted_count = 0;
  // Costs of accepted tokens: most share `common_cost`; `cheaper` holds
  // (cost, id) below it ascending, `dearer` those above it descending.
  int32_t common_cost = 0;
  int32_t max_cost = 0;
  std::vector<std::pair<int32_t, int32_t>> cheaper, dearer;
  // Escaping tokens, grouped by the bytes left once s's frame has ended.
  struct Escape {
    std::string rest;
    std::vector<int32_t> ids;
  };
  std::vector<Escape> escapes;
  size_t bytes() const;
};

// Per vocabulary: the tables of shared-rule states.
class SharedTableCache {
 public:
  explicit SharedTableCache(std::shared_ptr<const TokenVocab> vocab) : vocab_(std::move(vocab)) {}
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }
  std::shared_ptr<const StateTable> Find(const std::string& key) const;
  void Put(const std::string& key, std::shared_ptr<const StateTable> table);
  size_t size() const;

 private:
  const std::shared_ptr<const TokenVocab> vocab_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const StateTable>> tables_;
};

// The tables of one grammar's states against one vocabulary.
class StateMasks {
 public:
  StateMasks(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<SharedTableCache> shared);

  const StateTable& Get(int32_t state);
  const CompiledGrammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *shared_->vocab(); }
  // Tables computed by this object (not found in the shared cache).
  int64_t computed() const { return computed_; }

 private:
  std::shared_ptr<const StateTable> Compute(int32_t state) const;

  const std::shared_ptr<const CompiledGrammar> grammar_;
  const std::shared_ptr<SharedTableCache> shared_;
  std::mutex mu_;
  std::vector<std::shared_ptr<const StateTable>> tables_;  // [state], null until computed
  int64_t computed_ = 0;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_STATE_MASKS_H_
