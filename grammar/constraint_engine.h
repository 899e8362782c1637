// Constrained decoding where sampling happens (the last pipeline stage):
// the model's vocabulary and its shared state tables, compiled constraints
// by spec (an LRU, since agents send the same tools and schemas turn after
// turn), and one SequenceConstraint per constrained sequence, advanced by
// the sequence's output tokens and asked for the mask of its next token.
//
// Thread-compatible (the worker's compute thread owns it).
#ifndef SPAR_GRAMMAR_CONSTRAINT_ENGINE_H_
#define SPAR_GRAMMAR_CONSTRAINT_ENGINE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar/state_masks.h"
#include "grammar/token_mask.h"
#include "grammar/token_vocab.h"

namespace spar::grammar {

// One compiled constraint against the engine's vocabulary.
struct ActiveConstraint {
  CompiledConstraint compiled;
  std::unique_ptr<StateMasks> tables;
  std::vector<int32_t> allowed_special;  // special ids spelling (a piece of) one of compiled.special_tags
};

class SequenceConstraint {
 public:
  // `end_ids`: the tokens that end the sequence (EOS unless ignored, stop
  // token ids); `max_tokens`: its output budget.
  SequenceConstraint(std::shared_ptr<ActiveConstraint> constraint, std::vector<int32_t> end_ids, int max_tokens);

  // An output token, in order. FAILED_PRECONDITION for one the grammar
  // does not allow (a plan out of step with the masks).
  absl::Status Observe(int32_t token, const TokenVocab& vocab);
  // The mask of the output token with index `step` (tokens observed so far
  // = step), `vocab.mask_words()` words.
  MaskStats FillMask(uint64_t step, uint32_t* words);
  // The output is finished once `token` (output index `step`) follows what
  // was observed: nothing more may come, or it is complete and the budget
  // is spent (the scheduler ends the sequence there, as stopped).
  bool FinishedBy(int32_t token, uint64_t step, const TokenVocab& vocab) const;
  const GrammarMatcher& matcher() const { return matcher_; }

 private:
  std::shared_ptr<ActiveConstraint> constraint_;
  GrammarMatcher matcher_;
  MaskOptions options_;
  int max_tokens_;
};

class ConstraintEngine {
 public:
  // `vocab_size`: the model's logits width.
  static absl::StatusOr<std::unique_ptr<ConstraintEngine>> Create(const Tokenizer& tokenizer, int32_t vocab_size,
                                                                  size_t cache_capacity = 64);
  explicit ConstraintEngine(std::shared_ptr<const TokenVocab> vocab, size_t cache_capacity = 64);

  // The compiled constraint of `spec_json` (cached).
  absl::StatusOr<std::shared_ptr<ActiveConstraint>> Get(const std::string& spec_json);
  const TokenVocab& vocab() const { return *vocab_; }
  size_t cached() const { return lru_.size(); }

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<SharedTableCache> shared_;
  size_t capacity_;
  std::list<std::pair<std::string, std::shared_ptr<ActiveConstraint>>> lru_;  // most recent first
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_CONSTRAINT_ENGINE_H_
