// The scheduler's KV cache blocks under prefix caching: how many sequence
// tables hold each block (a cached prefix is shared), the content keys of
// full blocks whose rows are computed (block_hash.h), and the blocks no
// table holds: never-filled (or forgotten) ones first, then cached ones in
// least-recently-used order, so a freed prefix stays reusable until its
// memory is needed for something else.
//
// Pure and thread-compatible: no clock, no I/O.
#ifndef SPAR_SERVICES_SCHEDULER_BLOCK_POOL_H_
#define SPAR_SERVICES_SCHEDULER_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "services/scheduler/block_hash.h"

namespace spar {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(holders_.size()); }
  // No holder: never filled, forgotten, or cached and evictable.
  int64_t num_free() const { return static_cast<int64_t>(free_.size()) + lru_size_; }
  int64_t num_used() const { return num_blocks() - num_free(); }
  int64_t num_cached() const { return static_cast<int64_t>(by_key_.size()); }
  int64_t num_evictable() const { return lru_size_; }
  uint64_t evictions() const { return evictions_; }

  // A block for new content, with one holder and no key: a block that holds
  // nothing reusable if there is one, else the least recently used cached
  // block (evicted: its key is forgotten). None when every block is held.
  std::optional<int32_t> Allocate();
  // The block whose content has `key`.
  std::optional<int32_t> Lookup(const BlockHash& key) const;
  // One more holder of a cached block (a prefix hit).
  void Acquire(int32_t block);
  // One holder less; with none left a cached block becomes the most
  // recently used evictable block, any other block free. Releasing a block
  // nobody holds is an error (a double free).
  absl::Status Release(int32_t block);
  // Gives a held `block` the content key `key`: later lookups find it.
  // False (nothing changes) when a block already has that key (the same
  // content was computed twice: this copy stays private) or this one has.
  bool Publish(int32_t block, const BlockHash& key);
  // Forgets the key of `block` (its content is about to change).
  void Unpublish(int32_t block);
  // Forgets every key (the stages lost their caches).
  void UnpublishAll();

  int holders(int32_t block) const { return holders_[block]; }
  bool cached(int32_t block) const { return has_key_[block]; }

  // `holders_seen[b]` is how many tables hold block b: it must equal the
  // pool's count, and the free, evictable and key structures must agree.
  absl::Status CheckConsistency(const std::vector<int>& holders_seen) const;

 private:
  void LruPushMru(int32_t block);
  void LruRemove(int32_t block);

  std::vector<int> holders_;
  std::vector<BlockHash> key_;
  std::vector<bool> has_key_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> by_key_;
  std::vector<int32_t> free_;  // no holder, no key; the back is handed out first
  // Cached blocks without a holder, a doubly linked list by block id: head
  // the least recently used, tail the most.
  std::vector<int32_t> prev_, next_;
  std::vector<bool> in_lru_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t lru_size_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BLOCK_POOL_H_
