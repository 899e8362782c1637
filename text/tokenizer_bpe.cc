// BPE of one pre-token word (merges by rank, byte fallback, unk), with a
// cache of recent words; and decoding ids back to text.
#include <climits>
#include <functional>
#include <queue>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/byte_level.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace spar {

// --- BPE ---------------------------------------------------------------------

void TokenizerImpl::AppendSymbolIds(absl::string_view unit, std::vector<int32_t>* out) const {
  // One initial symbol: a byte (byte-level) or a character. Missing symbols
  // go through byte fallback, then unk, else are dropped, as in HF.
  if (byte_level_) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(unit[0])];
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  } else {
    auto it = vocab_.find(unit);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (byte_fallback_) {
    bool all = true;
    for (char c : unit) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (char c : unit) out->push_back(fallback_ids_[static_cast<uint8_t>(c)]);
      return;
    }
  }
  if (unk_id_ >= 0) {
    if (fuse_unk_ && !out->empty() && out->back() == unk_id_) return;
    out->push_back(unk_id_);
  }
}

void TokenizerImpl::Merge(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  constexpr size_t kSmall = 48;
  if (s.size() <= kSmall) {
    // Short words dominate text: keep each adjacent pair's rank in a small
    // array, scan it for the best pair, and after a merge look up only the
    // two pairs that changed.
    int32_t rank[kSmall];
    int32_t merged[kSmall];
    size_t n = s.size();
    auto fill = [&](size_t i) {
      const auto* m = lookup(s[i], s[i + 1]);
      rank[i] = m == nullptr ? INT32_MAX : m->first;
      merged[i] = m == nullptr ? -1 : m->second;
    };
    for (size_t i = 0; i + 1 < n; ++i) fill(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == INT32_MAX) break;
      s[best] = merged[best];
      for (size_t i = best + 1; i + 1 < n; ++i) {
        s[i] = s[i + 1];
        rank[i] = rank[i + 1];
        merged[i] = merged[i + 1];
      }
      --n;
      if (best + 1 < n) fill(best);
      if (best > 0) fill(best - 1);
    }
    s.resize(n);
    return;
  }
  // Long words (runs of spaces, long identifiers): a heap of candidate pairs
  // ordered by (rank, position) over a linked list, O(n log n).
  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<Sym> syms(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = {s[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0) return;
    const auto* m = lookup(syms[left].id, syms[right].id);
    if (m != nullptr) heap.push({m->first, left, right, syms[left].id, syms[right].id, m->second});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& left = syms[c.pos];
    if (left.id != c.left_id || left.next != c.right || syms[c.right].id != c.right_id) continue;
    Sym& right = syms[c.right];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    right.id = -1;  // dead
    push(left.prev);
    push(c.pos);
  }
  s.clear();
  for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) s.push_back(syms[i].id);
}

void TokenizerImpl::ModelEncode(absl::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = byte_level_ ? vocab_.find(ByteLevelEncode(word)) : vocab_.find(word);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  size_t i = 0;
  while (i < word.size()) {
    size_t len = 1;
    if (!byte_level_) {
      char32_t cp = 0;
      len = DecodeUtf8At(word, i, &cp);
      if (len == 0) len = 1;
    }
    AppendSymbolIds(word.substr(i, len), &symbols);
    i += len;
  }
  Merge(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

void TokenizerImpl::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() > kCacheMaxWordBytes) {
    ModelEncode(word, out);
    return;
  }
  CacheShard& shard = cache_[absl::HashOf(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ModelEncode(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardEntries) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

// --- Decoding ----------------------------------------------------------------

absl::StatusOr<TokenPiece> TokenizerImpl::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::OutOfRangeError(absl::StrCat("token id ", id, " is out of range [0, ", vocab_size(), ")"));
  }
  TokenPiece p;
  switch (kind_[id]) {
    case kKindHole:
      return absl::OutOfRangeError(absl::StrCat("token id ", id, " is not assigned to any token"));
    case kKindText:
      p.kind = TokenPiece::Kind::kText;
      break;
    case kKindFallbackByte:
      p.kind = TokenPiece::Kind::kFallbackByte;
      break;
    default:
      p.kind = TokenPiece::Kind::kAdded;
      p.special = special_[id];
      break;
  }
  p.bytes = decoded_[id];
  return p;
}

absl::StatusOr<std::string> TokenizerImpl::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string out;
  std::string chunk;     // model text since the last added token
  std::string fallback;  // current run of <0xNN> bytes
  auto flush_fallback = [&]() {
    if (fallback.empty()) return;
    // HF ByteFallback: a run that is not valid UTF-8 becomes one U+FFFD per byte.
    if (IsValidUtf8(fallback)) {
      chunk += fallback;
    } else {
      for (size_t k = 0; k < fallback.size(); ++k) AppendUtf8(kReplacementChar, &chunk);
    }
    fallback.clear();
  };
  auto flush_chunk = [&]() {
    flush_fallback();
    if (decoder_byte_level_) {
      AppendSanitizedUtf8(chunk, &out);
    } else {
      size_t skip = 0;
      while (skip < static_cast<size_t>(strip_leading_) && skip < chunk.size() && chunk[skip] == ' ') ++skip;
      AppendSanitizedUtf8(absl::string_view(chunk).substr(skip), &out);
    }
    chunk.clear();
  };
  for (int32_t id : ids) {
    SPAR_ASSIGN_OR_RETURN(TokenPiece p, Piece(id));
    switch (p.kind) {
      case TokenPiece::Kind::kAdded:
        if (skip_special && p.special) break;
        flush_chunk();
        out.append(p.bytes.data(), p.bytes.size());
        break;
      case TokenPiece::Kind::kFallbackByte:
        fallback.append(p.bytes.data(), p.bytes.size());
        break;
      case TokenPiece::Kind::kText:
        flush_fallback();
        chunk.append(p.bytes.data(), p.bytes.size());
        break;
    }
  }
  flush_chunk();
  return out;
}

std::optional<int32_t> TokenizerImpl::TokenToId(absl::string_view token) const {
  auto a = added_by_content_.find(token);
  if (a != added_by_content_.end()) return a->second;
  auto v = vocab_.find(token);
  if (v != vocab_.end()) return v->second;
  return std::nullopt;
}

std::optional<std::string> TokenizerImpl::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || kind_[id] == kKindHole) return std::nullopt;
  if (kind_[id] == kKindAdded) return decoded_[id];
  return model_token_[id];
}

size_t TokenizerImpl::cache_size() const {
  size_t n = 0;
  for (const CacheShard& shard : cache_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.map.size();
  }
  return n;
}

}  // namespace spar
