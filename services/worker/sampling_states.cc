#include "services/worker/sampling_states.h"

#include "absl/strings/str_cat.h"

namespace spar {

void SamplingStates::Create(int64_t seq_id, const SequenceSampling& sampling) {
  State& s = states_[seq_id];
  s = State();
  s.sampling = sampling;
}

absl::Status SamplingStates::Observe(int64_t seq_id, int32_t start_pos, const std::vector<int32_t>& tokens) {
  auto it = states_.find(seq_id);
  if (it == states_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, " has no sampling state on the last stage"));
  }
  State& s = it->second;
  if (start_pos != s.next_pos) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, ": plan starts at position ", start_pos,
                                                      " but the last stage has seen ", s.next_pos, " tokens"));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t pos = start_pos + static_cast<int32_t>(i);
    if (pos < s.sampling.prompt_len) {
      s.history.prompt_counts[tokens[i]]++;
    } else {
      s.history.output_counts[tokens[i]]++;
    }
  }
  s.next_pos += static_cast<int32_t>(tokens.size());
  return absl::OkStatus();
}

absl::StatusOr<SampleRequest> SamplingStates::Request(int64_t seq_id) const {
  auto it = states_.find(seq_id);
  if (it == states_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, " has no sampling state on the last stage"));
  }
  const State& s = it->second;
  if (s.next_pos < s.sampling.prompt_len) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq_id, ": a token was requested at position ",
                                                      s.next_pos, ", inside the prompt of ", s.sampling.prompt_len));
  }
  SampleRequest r;
  r.params = s.sampling.params;
  r.history = &s.history;
  // The output index of the token being sampled: outputs observed so far.
  r.step = static_cast<uint64_t>(s.next_pos - s.sampling.prompt_len);
  r.top_logprobs = s.sampling.top_logprobs;
  return r;
}

void SamplingStates::Release(int64_t seq_id) { states_.erase(seq_id); }

}  // namespace spar
