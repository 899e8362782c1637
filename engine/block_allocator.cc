#include "engine/block_allocator.h"

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"

namespace spar {

BlockAllocator::BlockAllocator(int64_t num_blocks) : num_blocks_(num_blocks), in_use_(num_blocks, false) {
  // Hand out low ids first (pop from the back).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

absl::Status BlockAllocator::Grow(std::vector<int32_t>* table, int64_t tokens) {
  const int64_t needed = (tokens + kCacheBlockTokens - 1) / kCacheBlockTokens - static_cast<int64_t>(table->size());
  if (needed <= 0) return absl::OkStatus();
  if (needed > num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", needed, " more blocks, ", num_free(),
                                                     " of ", num_blocks_, " free"));
  }
  for (int64_t i = 0; i < needed; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = true;
    table->push_back(b);
  }
  return absl::OkStatus();
}

absl::Status BlockAllocator::Release(std::vector<int32_t>* table) {
  for (int32_t b : *table) {
    if (b < 0 || b >= num_blocks_ || !in_use_[b]) {
      return absl::InternalError(absl::StrCat("block ", b, " released but not allocated"));
    }
  }
  for (int32_t b : *table) {
    in_use_[b] = false;
    free_.push_back(b);
  }
  table->clear();
  return absl::OkStatus();
}

}  // namespace spar
