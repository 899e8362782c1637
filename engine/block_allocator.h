// Free-list allocator of cache blocks (64 tokens each). The in-process engine
// uses it directly; the scheduler wraps the same class in its policies.
#ifndef SPAR_ENGINE_BLOCK_ALLOCATOR_H_
#define SPAR_ENGINE_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace spar {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }

  // Appends blocks to `table` until it covers `tokens` positions; fails
  // without changing anything when too few blocks are free.
  absl::Status Grow(std::vector<int32_t>* table, int64_t tokens);
  // Returns every block of `table` and clears it. Double frees are errors.
  absl::Status Release(std::vector<int32_t>* table);

 private:
  int64_t num_blocks_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_BLOCK_ALLOCATOR_H_
