// A model's vocabulary as constrained decoding sees it: each token id's
// bytes (what the detokenizer emits for it with special tokens kept), and
// a trie of those byte strings in preorder, so the tokens that share a
// prefix are walked once and a rejected prefix skips its whole subtree.
//
// Ids without a piece (beyond the tokenizer, or padding up to the model's
// vocab_size) and tokens with no bytes are never matched. Special added
// tokens are matched by their content only where a constraint names them
// (GLM's <tool_call>, </think>, ...; token_mask.h clears the others).
//
// Immutable and thread-safe once built.
#ifndef SPAR_GRAMMAR_TOKEN_VOCAB_H_
#define SPAR_GRAMMAR_TOKEN_VOCAB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/tokenizer.h"

namespace spar::grammar {

class TokenVocab {
 public:
  struct TrieNode {
    int32_t subtree_end;  // preorder index after this node's subtree
    int32_t tok_begin;    // this node's tokens: sorted_ids [tok_begin, next node's tok_begin)
    uint16_t depth;       // bytes from the root (clipped at 65535)
    uint8_t byte;         // the edge from the parent (root: 0)
  };

  // `vocab_size`: the model's logits width (config.json), >= the ids used.
  static absl::StatusOr<std::shared_ptr<const TokenVocab>> FromTokenizer(const Tokenizer& tokenizer,
                                                                       int32_t vocab_size);
  // Tests and benchmarks: token i's bytes (nullopt: never matched);
  // `special` lists the ids of special added tokens.
  static std::shared_ptr<const TokenVocab> FromPieces(std::vector<std::optional<std::string>> pieces,
                                                      std::vector<int32_t> special = {});

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t mask_words() const { return (size() + 31) / 32; }
  bool matchable(int32_t id) const { return id >= 0 && id < size() && pieces_[id].has_value(); }
  absl::string_view bytes(int32_t id) const { return matchable(id) ? absl::string_view(*pieces_[id]) : ""; }
  // Ids of special added tokens (see above), ascending.
  const std::vector<int32_t>& special_ids() const { return special_; }
  // The special token whose content is `text`, if any.
  std::optional<int32_t> SpecialId(absl::string_view text) const;
  // Some token is exactly this byte (a budget that runs out can always
  // spell the shortest completion one byte at a time).
  bool has_single_byte(unsigned char b) const { return single_byte_[b]; }
  // The fewest tokens whose bytes concatenate to `text`, special tokens
  // counted only when listed in `allowed_special` (-1: none spell it).
  int32_t MinTokens(absl::string_view text, const std::vector<int32_t>& allowed_special) const;

  // Preorder trie; node 0 is the root (no byte), node size() a sentinel
  // whose tok_begin is the number of sorted ids.
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& sorted_ids() const { return sorted_ids_; }
  size_t trie_nodes() const { return trie_.size() - 1; }

 private:
  TokenVocab() = default;
  void Build();

  std::vector<std::optional<std::string>> pieces_;
  std::vector<int32_t> special_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> sorted_ids_;
  bool single_byte_[256] = {};
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_TOKEN_VOCAB_H_
