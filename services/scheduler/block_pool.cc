#include "services/scheduler/block_pool.h"

#include "absl/strings/str_cat.h"

namespace spar {

BlockPool::BlockPool(int64_t num_blocks)
    : holders_(num_blocks, 0),
      key_(num_blocks),
      has_key_(num_blocks, false),
      prev_(num_blocks, -1),
      next_(num_blocks, -1),
      in_lru_(num_blocks, false) {
  // Hand out low ids first (pop from the back).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void BlockPool::LruPushMru(int32_t b) {
  prev_[b] = lru_tail_;
  next_[b] = -1;
  if (lru_tail_ >= 0) next_[lru_tail_] = b;
  lru_tail_ = b;
  if (lru_head_ < 0) lru_head_ = b;
  in_lru_[b] = true;
  ++lru_size_;
}

void BlockPool::LruRemove(int32_t b) {
  if (prev_[b] >= 0) next_[prev_[b]] = next_[b]; else lru_head_ = next_[b];
  if (next_[b] >= 0) prev_[next_[b]] = prev_[b]; else lru_tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  in_lru_[b] = false;
  --lru_size_;
}

std::optional<int32_t> BlockPool::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    LruRemove(b);
    by_key_.erase(key_[b]);
    has_key_[b] = false;
    ++evictions_;
  } else {
    return std::nullopt;
  }
  holders_[b] = 1;
  return b;
}

std::optional<int32_t> BlockPool::Lookup(const BlockHash& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Acquire(int32_t b) {
  if (holders_[b]++ == 0 && in_lru_[b]) LruRemove(b);
}

absl::Status BlockPool::Release(int32_t b) {
  if (b < 0 || b >= num_blocks() || holders_[b] <= 0) {
    return absl::InternalError(absl::StrCat("block ", b, " released but not held"));
  }
  if (--holders_[b] > 0) return absl::OkStatus();
  if (has_key_[b]) {
    LruPushMru(b);
  } else {
    free_.push_back(b);
  }
  return absl::OkStatus();
}

bool BlockPool::Publish(int32_t b, const BlockHash& key) {
  if (has_key_[b] || holders_[b] <= 0) return false;
  if (!by_key_.emplace(key, b).second) return false;
  key_[b] = key;
  has_key_[b] = true;
  return true;
}

void BlockPool::Unpublish(int32_t b) {
  if (!has_key_[b]) return;
  by_key_.erase(key_[b]);
  has_key_[b] = false;
  if (in_lru_[b]) {
    LruRemove(b);
    free_.push_back(b);
  }
}

void BlockPool::UnpublishAll() {
  for (int32_t b = 0; b < num_blocks(); ++b) Unpublish(b);
}

absl::Status BlockPool::CheckConsistency(const std::vector<int>& holders_seen) const {
  if (static_cast<int64_t>(holders_seen.size()) != num_blocks()) return absl::InternalError("holder counts: wrong size");
  std::vector<int> in_free(num_blocks(), 0);
  for (int32_t b : free_) {
    if (b < 0 || b >= num_blocks() || ++in_free[b] > 1) return absl::InternalError(absl::StrCat("block ", b, " is free twice"));
  }
  int64_t lru = 0;
  for (int32_t b = lru_head_, prev = -1; b >= 0; prev = b, b = next_[b]) {
    if (!in_lru_[b] || prev_[b] != prev || ++lru > lru_size_) return absl::InternalError("the evictable list is broken");
  }
  if (lru != lru_size_) return absl::InternalError("the evictable list is broken");
  int64_t keys = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    auto where = [&] { return absl::StrCat("block ", b, " (", holders_[b], " holders, ", holders_seen[b], " tables)"); };
    if (holders_[b] != holders_seen[b]) return absl::InternalError(absl::StrCat(where(), ": holder count is off"));
    const bool idle = holders_[b] == 0;
    if (idle != (in_free[b] + in_lru_[b] == 1)) return absl::InternalError(absl::StrCat(where(), ": lost or double-freed"));
    if (in_lru_[b] && !has_key_[b]) return absl::InternalError(absl::StrCat(where(), ": evictable without content"));
    if (in_free[b] && has_key_[b]) return absl::InternalError(absl::StrCat(where(), ": free but still cached"));
    if (has_key_[b]) {
      ++keys;
      auto it = by_key_.find(key_[b]);
      if (it == by_key_.end() || it->second != b) return absl::InternalError(absl::StrCat(where(), ": key not indexed"));
    }
  }
  if (keys != num_cached()) return absl::InternalError("content keys index blocks that do not have them");
  return absl::OkStatus();
}

}  // namespace spar
