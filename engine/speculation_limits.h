// How many tokens speculative decoding may verify and propose for one
// sequence, and how far its block table must reach: pure arithmetic shared
// by the in-process engine and the scheduler, so both budget alike.
#ifndef SPAR_ENGINE_SPECULATION_LIMITS_H_
#define SPAR_ENGINE_SPECULATION_LIMITS_H_

#include <algorithm>
#include <cstdint>

namespace spar {

// --num-speculative-tokens is 0 (off) to this.
inline constexpr int kMaxSpeculativeTokens = 4;

// Drafts to verify in a decode step of a sequence with `num_output` tokens
// out of `max_tokens` that holds `available` drafts: a step verifying d
// drafts yields up to d + 1 tokens, never more than max_tokens allows.
inline int DraftsToVerify(int available, int num_output, int max_tokens) {
  return std::clamp(std::min(available, max_tokens - num_output - 1), 0, available);
}

// Drafts a step whose rows end at position `step_end` (exclusive) should
// propose, out of k, for a sequence of at most `max_total` tokens (prompt
// + max_tokens): after the step at least step_end + 1 tokens are known, so
// the next step can use at most max_total - step_end - 2 drafts.
inline int DraftsWanted(int k, int64_t step_end, int64_t max_total) {
  return static_cast<int>(std::clamp<int64_t>(max_total - step_end - 2, 0, k));
}

// Positions a sequence's block table must cover for a step of rows
// [start, step_end) that proposes `drafts_wanted` drafts: the MTP layer's
// recurrent steps write the drafts' positions after the last row. Stays
// within max_total with DraftsWanted's count.
inline int64_t SpeculativeStepEnd(int64_t step_end, int drafts_wanted) {
  return step_end + std::max(drafts_wanted - 1, 0);
}

}  // namespace spar

#endif  // SPAR_ENGINE_SPECULATION_LIMITS_H_
