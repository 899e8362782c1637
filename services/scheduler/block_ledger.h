// Paged KV-cache block accounting for the scheduler: one block table per
// sequence, the same table valid on every pipeline stage (each stage keeps
// its own layers' caches in the same block ids). Wraps the engine's
// BlockAllocator and adds per-sequence ownership and a leak check.
//
// Pure and thread-compatible: no clock, no I/O.
#ifndef SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_
#define SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "engine/block_allocator.h"

namespace spar {

class BlockLedger {
 public:
  explicit BlockLedger(int64_t num_blocks) : allocator_(num_blocks) {}

  int64_t num_blocks() const { return allocator_.num_blocks(); }
  int64_t num_free() const { return allocator_.num_free(); }
  int64_t num_used() const { return allocator_.num_used(); }
  size_t num_sequences() const { return tables_.size(); }

  // Blocks a table must hold to cover `tokens` positions.
  static int64_t BlocksFor(int64_t tokens);
  // Additional blocks `seq` needs to cover `tokens` positions.
  int64_t Shortfall(int64_t seq, int64_t tokens) const;
  bool CanGrow(int64_t seq, int64_t tokens) const { return Shortfall(seq, tokens) <= num_free(); }

  // Grows the table of `seq` to cover `tokens` positions.
  // RESOURCE_EXHAUSTED (nothing changed) when too few blocks are free.
  absl::Status Grow(int64_t seq, int64_t tokens);
  // The table of `seq` (empty if it holds none).
  const std::vector<int32_t>& Table(int64_t seq) const;
  int64_t BlocksOf(int64_t seq) const { return static_cast<int64_t>(Table(seq).size()); }
  // Returns all blocks of `seq`; a sequence without blocks is fine.
  absl::Status Free(int64_t seq);
  // Returns the blocks of `seq` beyond those covering its first `tokens`
  // positions (speculative decoding's rejected drafts and lookahead).
  absl::Status TruncateTo(int64_t seq, int64_t tokens);

  // Every block is free or in exactly one table, and the counts agree.
  absl::Status CheckConsistency() const;

 private:
  BlockAllocator allocator_;
  std::unordered_map<int64_t, std::vector<int32_t>> tables_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_BLOCK_LEDGER_H_
