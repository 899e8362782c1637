#include "services/scheduler/block_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"

namespace spar {

namespace {

// The root of the key chains: keys made with lookahead tokens never equal
// keys made without.
BlockHash RootOf(const PrefixCacheOptions& o) {
  if (o.lookahead_tokens == 0) return RootBlockHash(o.salt);
  return RootBlockHash(absl::StrCat(o.salt, "\nlookahead_tokens=", o.lookahead_tokens));
}

}  // namespace

BlockLedger::BlockLedger(int64_t num_blocks, PrefixCacheOptions prefix)
    : prefix_(std::move(prefix)), root_(RootOf(prefix_)), pool_(num_blocks) {}

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

int64_t BlockLedger::KeyableBlocks(int64_t tokens) const {
  return std::max<int64_t>(tokens - prefix_.lookahead_tokens, 0) / kCacheBlockTokens;
}

void BlockLedger::EnsureKeys(SeqBlocks& s, absl::Span<const int32_t> tokens, int64_t blocks) const {
  blocks = std::min<int64_t>(blocks, KeyableBlocks(static_cast<int64_t>(tokens.size())));
  const size_t span = kCacheBlockTokens + prefix_.lookahead_tokens;
  for (int64_t i = static_cast<int64_t>(s.keys.size()); i < blocks; ++i) {
    s.keys.push_back(ChainBlockHash(i == 0 ? root_ : s.keys[i - 1], tokens.subspan(i * kCacheBlockTokens, span)));
  }
}

absl::StatusOr<int32_t> BlockLedger::Admit(int64_t seq, absl::Span<const int32_t> tokens, int64_t max_new,
                                           int64_t drafting) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!Table(seq).empty()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " is admitted while it holds blocks"));
  }
  SeqBlocks& s = seqs_[seq];
  std::vector<int32_t> hit;
  int64_t evictable_hits = 0;  // hits nobody holds: taking them leaves fewer free blocks
  if (prefix_.enabled && n > 1) {
    // The last token is computed; with lookahead tokens every shared block
    // is keyed with the tokens after it, which are earlier than that.
    const int64_t most = std::min((n - 1) / kCacheBlockTokens, KeyableBlocks(n));
    EnsureKeys(s, tokens, most);
    for (int64_t i = 0; i < most; ++i) {
      const std::optional<int32_t> b = pool_.Lookup(s.keys[i]);
      if (!b) break;
      hit.push_back(*b);
      evictable_hits += pool_.holders(*b) == 0;
    }
  }
  const int64_t cached = static_cast<int64_t>(hit.size()) * kCacheBlockTokens;
  int64_t end = cached + std::clamp<int64_t>(max_new, 0, n - cached);
  if (end == n) end += std::max<int64_t>(drafting, 0);
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
  const int64_t full = std::min({std::min<int64_t>(computed, static_cast<int64_t>(tokens.size())) / kCacheBlockTokens,
                                 KeyableBlocks(static_cast<int64_t>(tokens.size())),
                                 static_cast<int64_t>(s.table.size())});
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
  // `committed` stays: those blocks are final (and maybe shared) still; a
  // later Commit keys only blocks after them.
  pool_.UnpublishAll();
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
  if (absl::Status s = pool_.CheckConsistency(holders); !s.ok()) return s;
  // Past its committed blocks a table is the sequence's own to write.
  for (const auto& [seq, s] : seqs_) {
    const int64_t n = static_cast<int64_t>(s.table.size());
    if (absl::Status w = CheckWritable(seq, s.committed * kCacheBlockTokens, n * kCacheBlockTokens); !w.ok()) return w;
  }
  return absl::OkStatus();
}

absl::Status BlockLedger::CheckWritable(int64_t seq, int64_t from, int64_t to) const {
  if (to <= from) return absl::OkStatus();
  const std::vector<int32_t>& table = Table(seq);
  if (BlocksFor(to) > static_cast<int64_t>(table.size())) {
    return absl::InternalError(absl::StrCat("sequence ", seq, " writes position ", to - 1, " past its ", table.size(),
                                            " blocks"));
  }
  for (int64_t i = std::max<int64_t>(from, 0) / kCacheBlockTokens; i < BlocksFor(to); ++i) {
    const int32_t b = table[i];
    if (pool_.holders(b) != 1) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " writes block ", b, " (its block ", i,
                                              ") that other sequences hold too"));
    }
    if (pool_.cached(b)) {
      return absl::InternalError(absl::StrCat("sequence ", seq, " writes block ", b, " (its block ", i,
                                              ") that the prefix cache has keyed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace spar
