#include "text/added_tokens.h"

#include <algorithm>

#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {

void AddedTokenTrie::Insert(absl::string_view content, int32_t index) {
  int32_t node = 0;
  for (char ch : content) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      const int32_t next = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(-1);
      edges_.emplace(key, next);
      node = next;
    } else {
      node = it->second;
    }
  }
  terminal_[node] = index;
  if (!content.empty()) first_[static_cast<uint8_t>(content[0])] = true;
}

bool AddedTokenTrie::NextMatch(absl::string_view text, size_t from, Match* match) const {
  const size_t n = text.size();
  for (size_t i = from; i < n; ++i) {
    if (!first_[static_cast<uint8_t>(text[i])]) continue;
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < n; ++j) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[j]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best = terminal_[node];
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      *match = {i, best_end, best};
      return true;
    }
  }
  return false;
}

bool AddedTokenSplitter::NextToken(TextSegment* token) {
  const size_t n = text_.size();
  // The code point that ends at `pos`; its length, 0 if none.
  auto char_before = [&](size_t pos, char32_t* cp) -> size_t {
    size_t p = pos;
    while (p > 0) {
      --p;
      if ((static_cast<uint8_t>(text_[p]) & 0xC0) != 0x80) break;
    }
    const size_t len = DecodeUtf8At(text_, p, cp);
    return len == 0 ? 0 : pos - p;
  };
  AddedTokenTrie::Match m;
  // Matches do not overlap whether or not their flags let them count.
  while (!trie_.empty() && trie_.NextMatch(text_, scan_, &m)) {
    scan_ = m.end;
    const AddedToken& tok = added_[m.index];
    if (!allow_special_ && tok.special) continue;
    if (m.begin < start_offset_) continue;  // swallowed by a previous rstrip
    size_t start = m.begin;
    size_t stop = m.end;
    if (tok.single_word) {
      char32_t cp = 0;
      const bool word_before = start > 0 && char_before(start, &cp) > 0 && IsUnicodeAlphanumeric(cp);
      bool word_after = false;
      if (stop < n && DecodeUtf8At(text_, stop, &cp) > 0) word_after = IsUnicodeAlphanumeric(cp);
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t p = start;
      char32_t cp = 0;
      while (p > 0) {
        const size_t len = char_before(p, &cp);
        if (len == 0 || !IsUnicodeWhitespace(cp)) break;
        p -= len;
      }
      start = std::max(p, start_offset_);
    }
    if (tok.rstrip) {
      char32_t cp = 0;
      while (stop < n) {
        const size_t len = DecodeUtf8At(text_, stop, &cp);
        if (len == 0 || !IsUnicodeWhitespace(cp)) break;
        stop += len;
      }
    }
    *token = {start, stop, tok.id};
    return true;
  }
  return false;
}

bool AddedTokenSplitter::Next(TextSegment* segment) {
  if (have_token_) {
    have_token_ = false;
    *segment = token_;
    start_offset_ = token_.end;
    return true;
  }
  if (NextToken(&token_)) {
    if (start_offset_ < token_.begin) {
      *segment = {start_offset_, token_.begin, -1};
      have_token_ = true;
      return true;
    }
    *segment = token_;
    start_offset_ = token_.end;
    return true;
  }
  if (start_offset_ < text_.size()) {
    *segment = {start_offset_, text_.size(), -1};
    start_offset_ = text_.size();
    return true;
  }
  return false;
}

}  // namespace spar
