#include "grammar/constraint_engine.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace spar::grammar {

SequenceConstraint::SequenceConstraint(std::shared_ptr<ActiveConstraint> constraint, std::vector<int32_t> end_ids,
                                       int max_tokens)
    : constraint_(std::move(constraint)), matcher_(constraint_->compiled.grammar), max_tokens_(max_tokens) {
  options_.end_ids = std::move(end_ids);
  options_.allowed_special = constraint_->allowed_special;
}

absl::Status SequenceConstraint::Observe(int32_t token, const TokenVocab& vocab) {
  if (std::find(options_.end_ids.begin(), options_.end_ids.end(), token) != options_.end_ids.end()) {
    return absl::OkStatus();  // ends the sequence; not text
  }
  if (!vocab.matchable(token) || !matcher_.Advance(vocab.bytes(token))) {
    return absl::FailedPreconditionError(
        absl::StrCat("token ", token, " does not follow the output's constraint (the plan and the masks disagree)"));
  }
  return absl::OkStatus();
}

MaskStats SequenceConstraint::FillMask(uint64_t step, uint32_t* words) {
  MaskOptions opt = options_;
  opt.remaining = std::max<int64_t>(0, static_cast<int64_t>(max_tokens_) - static_cast<int64_t>(step) - 1);
  return FillTokenMask(*constraint_->tables, matcher_, opt, words);
}

bool SequenceConstraint::FinishedBy(int32_t token, uint64_t step, const TokenVocab& vocab) const {
  if (!vocab.matchable(token)) return false;
  const GrammarMatcher::Outcome o = matcher_.Probe(vocab.bytes(token));
  return o.terminated || (o.accepting && step + 1 >= static_cast<uint64_t>(max_tokens_));
}

absl::StatusOr<std::unique_ptr<ConstraintEngine>> ConstraintEngine::Create(const Tokenizer& tokenizer,
                                                                           int32_t vocab_size, size_t capacity) {
  SPAR_ASSIGN_OR_RETURN(auto vocab, TokenVocab::FromTokenizer(tokenizer, vocab_size));
  return std::make_unique<ConstraintEngine>(std::move(vocab), capacity);
}

ConstraintEngine::ConstraintEngine(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), shared_(std::make_shared<SharedTableCache>(vocab_)), capacity_(capacity) {}

absl::StatusOr<std::shared_ptr<ActiveConstraint>> ConstraintEngine::Get(const std::string& spec_json) {
  if (auto it = index_.find(spec_json); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  SPAR_ASSIGN_OR_RETURN(ConstraintSpec spec, ConstraintSpec::Parse(spec_json));
  SPAR_ASSIGN_OR_RETURN(CompiledConstraint compiled, CompileConstraint(spec, vocab_.get()));
  auto active = std::make_shared<ActiveConstraint>();
  active->tables = std::make_unique<StateMasks>(compiled.grammar, shared_);
  // A special token may spell a whole tag or a piece of one.
  active->allowed_special = SpecialTokensOf(*vocab_, compiled.special_tags);
  active->compiled = std::move(compiled);
  lru_.emplace_front(spec_json, active);
  index_[spec_json] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return active;
}

}  // namespace spar::grammar
