#include "grammar/token_vocab.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace spar::grammar {

absl::StatusOr<std::shared_ptr<const TokenVocab>> TokenVocab::FromTokenizer(const Tokenizer& tokenizer,
                                                                         int32_t vocab_size) {
  if (vocab_size < tokenizer.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("the model's vocab_size (", vocab_size,
                                                   ") is smaller than the tokenizer's (", tokenizer.vocab_size(), ")"));
  }
  auto v = std::shared_ptr<TokenVocab>(new TokenVocab());
  v->pieces_.resize(vocab_size);
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    auto piece = tokenizer.Piece(id);
    if (!piece.ok() || piece->bytes.empty()) continue;
    v->pieces_[id] = std::string(piece->bytes);
    if (piece->kind == TokenPiece::Kind::kAdded && piece->special) v->special_.push_back(id);
  }
  if (tokenizer.strip_leading_spaces() > 0) {
    // A Strip decoder (Metaspace tokenizers) removes a leading space from
    // the first piece of the text: the grammar would see a space the
    // output does not have. spar's models are byte-level; refuse rather
    // than constrain the wrong bytes.
    return absl::FailedPreconditionError("constrained decoding needs a byte-level tokenizer (this one strips spaces)");
  }
  v->Build();
  return std::shared_ptr<const TokenVocab>(std::move(v));
}

std::shared_ptr<const TokenVocab> TokenVocab::FromPieces(std::vector<std::optional<std::string>> pieces,
                                                         std::vector<int32_t> special) {
  auto v = std::shared_ptr<TokenVocab>(new TokenVocab());
  for (auto& p : pieces) {
    if (p && p->empty()) p.reset();
  }
  v->pieces_ = std::move(pieces);
  std::sort(special.begin(), special.end());
  v->special_ = std::move(special);
  v->Build();
  return v;
}

std::optional<int32_t> TokenVocab::SpecialId(absl::string_view text) const {
  for (int32_t id : special_) {
    if (bytes(id) == text) return id;
  }
  return std::nullopt;
}

int32_t TokenVocab::MinTokens(absl::string_view text, const std::vector<int32_t>& allowed_special) const {
  const size_t n = text.size();
  constexpr int32_t kNone = INT32_MAX;
  std::vector<int32_t> best(n + 1, kNone);  // best[i]: tokens for text[i:]
  best[n] = 0;
  auto usable = [&](int32_t id) {
    return !std::binary_search(special_.begin(), special_.end(), id) ||
           std::find(allowed_special.begin(), allowed_special.end(), id) != allowed_special.end();
  };
  for (size_t i = n; i-- > 0;) {
    // Walk the trie along text[i:]: every node on the way that ends a
    // usable token is a candidate.
    int32_t node = 0;
    for (size_t j = i; j < n; ++j) {
      int32_t child = node + 1, found = -1;
      while (child < trie_[node].subtree_end) {
        if (trie_[child].byte == static_cast<uint8_t>(text[j])) {
          found = child;
          break;
        }
        child = trie_[child].subtree_end;
      }
      if (found < 0) break;
      node = found;
      if (best[j + 1] == kNone) continue;
      for (int32_t t = trie_[node].tok_begin; t < trie_[node + 1].tok_begin; ++t) {
        if (usable(sorted_ids_[t])) {
          best[i] = std::min(best[i], best[j + 1] + 1);
          break;
        }
      }
    }
  }
  return best[0] == kNone ? -1 : best[0];
}

void TokenVocab::Build() {
  for (int32_t id = 0; id < size(); ++id) {
    if (matchable(id) && pieces_[id]->size() == 1) single_byte_[static_cast<unsigned char>((*pieces_[id])[0])] = true;
  }
  for (int32_t id = 0; id < size(); ++id) {
    if (matchable(id)) sorted_ids_.push_back(id);
  }
  std::stable_sort(sorted_ids_.begin(), sorted_ids_.end(),
                   [&](int32_t a, int32_t b) { return *pieces_[a] < *pieces_[b]; });
  // Preorder construction over the sorted strings: the path from the root
  // to the previous string is `path`; each new string shares its common
  // prefix with it and adds nodes for the rest.
  trie_.push_back(TrieNode{0, 0, 0, 0});
  std::vector<int32_t> path = {0};
  absl::string_view prev;
  for (size_t i = 0; i < sorted_ids_.size(); ++i) {
    const absl::string_view s = *pieces_[sorted_ids_[i]];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common + 1) {
      trie_[path.back()].subtree_end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode n;
      n.byte = static_cast<uint8_t>(s[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, 65535));
      n.tok_begin = static_cast<int32_t>(i);
      n.subtree_end = 0;
      trie_.push_back(n);
      path.push_back(static_cast<int32_t>(trie_.size() - 1));
    }
    prev = s;
  }
  while (!path.empty()) {
    trie_[path.back()].subtree_end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
  // tok_begin of a node whose first token is deeper (a prefix that is not
  // itself a token) must point past nothing: tokens at node n are those
  // that end there, [tok_begin(n), tok_begin(n + 1)); a node created for a
  // longer string gets the index of that string, which is also the next
  // node's, so the range is empty. The sentinel closes the last range.
  trie_.push_back(TrieNode{static_cast<int32_t>(trie_.size() + 1), static_cast<int32_t>(sorted_ids_.size()), 0, 0});
}

}  // namespace spar::grammar
