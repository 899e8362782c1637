#include "services/scheduler/block_ledger.h"

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"

namespace spar {

int64_t BlockLedger::BlocksFor(int64_t tokens) { return (tokens + kCacheBlockTokens - 1) / kCacheBlockTokens; }

int64_t BlockLedger::Shortfall(int64_t seq, int64_t tokens) const {
  const int64_t need = BlocksFor(tokens) - BlocksOf(seq);
  return need > 0 ? need : 0;
}

absl::Status BlockLedger::Grow(int64_t seq, int64_t tokens) {
  if (Shortfall(seq, tokens) == 0) return absl::OkStatus();
  std::vector<int32_t>& table = tables_[seq];
  absl::Status s = allocator_.Grow(&table, tokens);
  if (table.empty()) tables_.erase(seq);
  return s;
}

const std::vector<int32_t>& BlockLedger::Table(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second;
}

absl::Status BlockLedger::Free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return absl::OkStatus();
  absl::Status s = allocator_.Release(&it->second);
  tables_.erase(it);
  return s;
}

absl::Status BlockLedger::TruncateTo(int64_t seq, int64_t tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return absl::OkStatus();
  const size_t keep = static_cast<size_t>(BlocksFor(tokens));
  if (it->second.size() <= keep) return absl::OkStatus();
  std::vector<int32_t> tail(it->second.begin() + static_cast<std::ptrdiff_t>(keep), it->second.end());
  it->second.resize(keep);
  absl::Status s = allocator_.Release(&tail);
  if (it->second.empty()) tables_.erase(it);
  return s;
}

absl::Status BlockLedger::CheckConsistency() const {
  std::vector<int> owners(num_blocks(), 0);
  int64_t held = 0;
  for (const auto& [seq, table] : tables_) {
    for (int32_t b : table) {
      if (b < 0 || b >= num_blocks()) return absl::InternalError(absl::StrCat("sequence ", seq, " holds block ", b));
      if (++owners[b] > 1) return absl::InternalError(absl::StrCat("block ", b, " is held twice"));
      ++held;
    }
  }
  if (held != num_used()) {
    return absl::InternalError(absl::StrCat(held, " blocks held by sequences, ", num_used(), " allocated"));
  }
  return absl::OkStatus();
}

}  // namespace spar
