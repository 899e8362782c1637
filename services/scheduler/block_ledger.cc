#include "services/scheduler/block_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"

namespace spar {

BlockLedger::BlockLedger(int64_t num_blocks, PrefixCacheOptions prefix)
    : prefix_(std::move(prefix)), root_(RootBlockHash(prefix_.salt)), pool_(num_blocks) {}

int64_t BlockLedger::BlocksFor(int64_t tokens) { return (tokens + kCacheBlockTokens - 1) / kCacheBlockTokens; }

int64_t BlockLedger::Shortfall(int64_t seq, int64_t tokens) const {
  const int64_t need = BlocksFor(tokens) - BlocksOf(seq);
  return need > 0 ? need : 0;
}

absl::Status BlockLedger::Grow(int64_t seq, int64_t tokens) {
  const int64_t need = Shortfall(seq, tokens);
  if (need == 0) return absl::OkStatus();
  if (need > num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", need, " more blocks, ", num_free(),
                                                     " of ", num_blocks(), " free"));
  }
  SeqBlocks& s = seqs_[seq];
  if (s.table.empty()) ++holding_;
  for (int64_t i = 0; i < need; ++i) s.table.push_back(*pool_.Allocate());
  return absl::OkStatus();
}

void BlockLedger::EnsureKeys(SeqBlocks& s, absl::Span<const int32_t> tokens, int64_t blocks) const {
  blocks = std::min<int64_t>(blocks, static_cast<int64_t>(tokens.size()) / kCacheBlockTokens);
  for (int64_t i = static_cast<int64_t>(s.keys.size()); i < blocks; ++i) {
    s.keys.push_back(ChainBlockHash(i == 0 ? root_ : s.keys[i - 1], tokens.subspan(i * kCacheBlockTokens, kCacheBlockTokens)));
  }
}

absl::StatusOr<int32_t> BlockLedger::Admit(int64_t seq, absl::Span<const int32_t> tokens, int64_t max_new) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!Table(seq).empty()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " is admitted while it holds blocks"));
  }
  SeqBlocks& s = seqs_[seq];
  std::vector<int32_t> hit;
  int64_t evictable_hits = 0;  // hits nobody holds: taking them leaves fewer free blocks
  if (prefix_.enabled && n > 1) {
    const int64_t most = (n - 1) / kCacheBlockTokens;
    EnsureKeys(s, tokens, most);
    for (int64_t i = 0; i < most; ++i) {
      const std::optional<int32_t> b = pool_.Lookup(s.keys[i]);
      if (!b) break;
      hit.push_back(*b);
      evictable_hits += pool_.holders(*b) == 0;
    }
  }
  const int64_t cached = static_cast<int64_t>(hit.size()) * kCacheBlockTokens;
  const int64_t end = cached + std::clamp<int64_t>(max_new, 0, n - cached);
  const int64_t need = BlocksFor(end) - static_cast<int64_t>(hit.size());
  if (need > num_free() - evictable_hits) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", need, " more blocks, ",
                                                     num_free() - evictable_hits, " of ", num_blocks(), " free"));
  }
  // The hits first, so allocating cannot evict them.
  for (int32_t b : hit) pool_.Acquire(b);
  s.table = std::move(hit);
  for (int64_t i = 0; i < need; ++i) s.table.push_back(*pool_.Allocate());
  if (!s.table.empty()) ++holding_;
  s.committed = cached / kCacheBlockTokens;
  if (prefix_.enabled) {
    queries_ += static_cast<uint64_t>(n);
    hits_ += static_cast<uint64_t>(cached);
  }
  return static_cast<int32_t>(cached);
}

void BlockLedger::Commit(int64_t seq, absl::Span<const int32_t> tokens, int64_t computed) {
  if (!prefix_.enabled) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqBlocks& s = it->second;
  const int64_t full = std::min<int64_t>(std::min<int64_t>(computed, static_cast<int64_t>(tokens.size())) /
                                             kCacheBlockTokens,
                                         static_cast<int64_t>(s.table.size()));
  if (full <= s.committed) return;
  EnsureKeys(s, tokens, full);
  for (int64_t i = s.committed; i < full; ++i) pool_.Publish(s.table[i], s.keys[i]);
  s.committed = full;
}

int64_t BlockLedger::TrimTail(int64_t seq, int64_t tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  SeqBlocks& s = it->second;
  const bool was_holding = !s.table.empty();
  tokens = std::max<int64_t>(tokens, 0);
  const int64_t keep = std::min<int64_t>(BlocksFor(tokens), static_cast<int64_t>(s.table.size()));
  while (static_cast<int64_t>(s.table.size()) > keep) {
    pool_.Release(s.table.back()).IgnoreError();  // held by this table: cannot fail
    s.table.pop_back();
  }
  int64_t valid = std::min<int64_t>(tokens, keep * kCacheBlockTokens);
  if (valid % kCacheBlockTokens != 0) {
    const int32_t last = s.table.back();
    if (pool_.holders(last) > 1) {
      // Another sequence reads it: never rewrite it; recompute into a new one.
      pool_.Release(last).IgnoreError();
      s.table.pop_back();
      valid = static_cast<int64_t>(s.table.size()) * kCacheBlockTokens;
    } else {
      pool_.Unpublish(last);
    }
  }
  if (was_holding && s.table.empty()) --holding_;
  const int64_t intact = valid / kCacheBlockTokens;
  if (static_cast<int64_t>(s.keys.size()) > intact) s.keys.resize(intact);
  s.committed = std::min(s.committed, intact);
  return valid;
}

const std::vector<int32_t>& BlockLedger::Table(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.table;
}

int64_t BlockLedger::BlocksFreedBy(int64_t seq) const {
  int64_t n = 0;
  for (int32_t b : Table(seq)) n += pool_.holders(b) == 1;
  return n;
}

absl::Status BlockLedger::ReleaseTable(SeqBlocks& s) {
  absl::Status status;
  if (!s.table.empty()) --holding_;
  for (auto b = s.table.rbegin(); b != s.table.rend(); ++b) status.Update(pool_.Release(*b));
  s.table.clear();
  s.committed = 0;
  return status;
}

absl::Status BlockLedger::Free(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::OkStatus();
  return ReleaseTable(it->second);
}

absl::Status BlockLedger::Forget(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::OkStatus();
  absl::Status s = ReleaseTable(it->second);
  seqs_.erase(it);
  return s;
}

void BlockLedger::DropCachedContent() {
  pool_.UnpublishAll();
  for (auto& [id, s] : seqs_) s.committed = 0;
}

PrefixCacheStats BlockLedger::prefix_stats() const {
  PrefixCacheStats st;
  st.queries = queries_;
  st.hits = hits_;
  st.evictions = pool_.evictions();
  st.cached_blocks = pool_.num_cached();
  return st;
}

absl::Status BlockLedger::CheckConsistency() const {
  std::vector<int> holders(num_blocks(), 0);
  size_t holding = 0;
  for (const auto& [seq, s] : seqs_) {
    holding += !s.table.empty();
    std::vector<int32_t> sorted = s.table;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      const int32_t b = sorted[i];
      if (b < 0 || b >= num_blocks()) return absl::InternalError(absl::StrCat("sequence ", seq, " holds block ", b));
      if (i > 0 && sorted[i - 1] == b) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " holds block ", b, " twice"));
      }
      ++holders[b];
    }
    if (s.committed > static_cast<int64_t>(s.table.size())) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " has more committed blocks than blocks"));
    }
  }
  if (holding != holding_) return absl::InternalError("the count of sequences holding blocks is off");
  if (!prefix_.enabled && pool_.num_cached() != 0) return absl::InternalError("blocks cached with prefix caching off");
  return pool_.CheckConsistency(holders);
}

}  // namespace spar
