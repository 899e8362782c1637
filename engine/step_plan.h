// One forward step: which sequences advance, by which tokens, where their
// cache rows live. The scheduler (or the in-process engine) builds it; every
// pipeline stage executes it unchanged.
#ifndef SPAR_ENGINE_STEP_PLAN_H_
#define SPAR_ENGINE_STEP_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "base/cache_layout.h"

namespace spar {

struct SequenceStep {
  int64_t seq_id = 0;
  int32_t start_pos = 0;             // tokens of this sequence already cached
  std::vector<int32_t> tokens;       // new tokens: a prefill chunk or one decode token
  std::vector<int32_t> block_table;  // blocks covering positions [0, start_pos + tokens.size())
  int num_logits = 1;                // logits for this many trailing new tokens (0: none)
};

struct StepPlan {
  std::vector<SequenceStep> seqs;

  // Derived per-token arrays (Finalize fills them).
  std::vector<int32_t> token_ids;  // [T]
  std::vector<int32_t> positions;  // [T] absolute position in its sequence
  std::vector<int32_t> slots;      // [T] cache slot = block * 64 + position % 64
  std::vector<int32_t> token_seq;  // [T] index into seqs
  std::vector<int32_t> logit_rows; // rows of T whose logits are wanted, in seqs order

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }

  // Validates block tables against positions and fills the derived arrays.
  // vocab_size / max_positions / num_blocks bound the inputs (0: unchecked).
  absl::Status Finalize(int64_t vocab_size, int64_t max_positions, int64_t num_blocks);
};

}  // namespace spar

#endif  // SPAR_ENGINE_STEP_PLAN_H_
