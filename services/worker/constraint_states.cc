#include "services/worker/constraint_states.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/tokenizer.h"

namespace spar {

absl::Status ConstraintStates::EnsureEngine() {
  if (engine_ != nullptr) return absl::OkStatus();
  const std::string path = model_dir_ + "/tokenizer.json";
  auto tokenizer = Tokenizer::FromFile(path);
  if (!tokenizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("constrained decoding needs the model's tokenizer (", path, "): ", tokenizer.status().message()));
  }
  SPAR_ASSIGN_OR_RETURN(engine_, grammar::ConstraintEngine::Create(**tokenizer, vocab_size_));
  return absl::OkStatus();
}

absl::Status ConstraintStates::Reset(int64_t seq, const SequenceSampling& sampling) {
  states_.erase(seq);
  if (!sampling.constraint) return absl::OkStatus();
  SPAR_RETURN_IF_ERROR(EnsureEngine());
  auto active = engine_->Get(sampling.constraint->spec);
  if (!active.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq, ": its constraint does not compile: ", active.status().message()));
  }
  State& s = states_[seq];
  s.constraint = std::make_unique<grammar::SequenceConstraint>(*active, sampling.constraint->end_token_ids,
                                                               sampling.constraint->max_tokens);
  s.prompt_len = sampling.prompt_len;
  s.mask.assign(engine_->vocab().mask_words(), 0);
  return absl::OkStatus();
}

absl::Status ConstraintStates::Observe(int64_t seq, int32_t start_pos, const std::vector<int32_t>& tokens) {
  auto it = states_.find(seq);
  if (it == states_.end()) return absl::OkStatus();
  State& s = it->second;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (start_pos + static_cast<int32_t>(i) < s.prompt_len) continue;
    if (absl::Status st = s.constraint->Observe(tokens[i], engine_->vocab()); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

const uint32_t* ConstraintStates::Mask(int64_t seq, uint64_t step) {
  auto it = states_.find(seq);
  if (it == states_.end()) return nullptr;
  it->second.constraint->FillMask(step, it->second.mask.data());
  return it->second.mask.data();
}

bool ConstraintStates::Finishes(int64_t seq, int32_t token, uint64_t step) const {
  auto it = states_.find(seq);
  return it != states_.end() && it->second.constraint->FinishedBy(token, step, engine_->vocab());
}

}  // namespace spar
