#include "engine/step_plan.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace spar {

absl::Status StepPlan::Finalize(int64_t vocab_size, int64_t max_positions, int64_t num_blocks) {
  token_ids.clear();
  positions.clear();
  slots.clear();
  token_seq.clear();
  logit_rows.clear();
  if (seqs.empty()) return absl::InvalidArgumentError("step plan has no sequences");
  // Positions and slots (block * 64 + offset) are int32 all the way down to
  // the kernels: refuse what would not fit rather than wrap.
  constexpr int64_t kMaxBlock = std::numeric_limits<int32_t>::max() / kCacheBlockTokens;
  if (num_blocks > kMaxBlock + 1) {
    return absl::InvalidArgumentError(absl::StrCat("a cache of ", num_blocks, " blocks has more than 2^31 slots"));
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = seqs[s];
    auto bad = [&](auto... parts) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", q.seq_id, ": ", parts...));
    };
    if (q.tokens.empty()) return bad("no new tokens");
    if (q.start_pos < 0) return bad("negative start position");
    const int64_t end = static_cast<int64_t>(q.start_pos) + static_cast<int64_t>(q.tokens.size());
    if (max_positions > 0 && end > max_positions) {
      return bad("context of ", end, " tokens exceeds max_position_embeddings (", max_positions, ")");
    }
    if (end > std::numeric_limits<int32_t>::max()) return bad("context of ", end, " tokens exceeds int32 positions");
    const int64_t blocks_needed = (end + kCacheBlockTokens - 1) / kCacheBlockTokens;
    if (static_cast<int64_t>(q.block_table.size()) < blocks_needed) {
      return bad("block table has ", q.block_table.size(), " blocks for ", end, " tokens");
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t block = q.block_table[b];
      if (block < 0 || (num_blocks > 0 && block >= num_blocks) || block > kMaxBlock) {
        return bad("block id ", block, " out of range");
      }
    }
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      const int32_t id = q.tokens[i];
      if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
        return bad("token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
      }
      const int32_t pos = q.start_pos + static_cast<int32_t>(i);
      token_ids.push_back(id);
      positions.push_back(pos);
      slots.push_back(q.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens);
      token_seq.push_back(static_cast<int32_t>(s));
    }
    if (q.num_logits < 0 || q.num_logits > static_cast<int>(q.tokens.size())) {
      return bad("num_logits ", q.num_logits, " is outside [0, ", q.tokens.size(), "]");
    }
    for (int i = q.num_logits; i > 0; --i) logit_rows.push_back(static_cast<int32_t>(token_ids.size()) - i);
  }
  return absl::OkStatus();
}

}  // namespace spar
