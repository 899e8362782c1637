// Added tokens (tokenizer.json "added_tokens") are found in the text before
// it is pre-tokenized, as Hugging Face does: leftmost-longest matches over
// the whole text first, then each token's flags (lstrip / rstrip swallow
// the whitespace beside it, single_word skips a match inside a word).
// The splitter yields the text's segments one at a time, so an encoder that
// stops early never scans the rest of the text.
#ifndef SPAR_TEXT_ADDED_TOKENS_H_
#define SPAR_TEXT_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "text/tokenizer.h"

namespace spar {

// A byte trie over added-token contents.
class AddedTokenTrie {
 public:
  // `index`: the token's position in the added-token list.
  void Insert(absl::string_view content, int32_t index);
  bool empty() const { return terminal_.size() == 1; }

  struct Match {
    size_t begin;
    size_t end;
    int32_t index;
  };
  // The leftmost-longest match starting at or after `from`; false if none.
  bool NextMatch(absl::string_view text, size_t from, Match* match) const;

 private:
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> node
  std::vector<int32_t> terminal_{-1};             // node -> token index, -1 if none
  std::array<bool, 256> first_{};                 // bytes that start a token
};

// A stretch of the text: an added token (id >= 0) or text to tokenize.
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;  // -1: text
};

class AddedTokenSplitter {
 public:
  // `allow_special` false: special tokens are matched but read as text.
  // All arguments must outlive the splitter.
  AddedTokenSplitter(absl::string_view text, const AddedTokenTrie& trie, const std::vector<AddedToken>& added,
                     bool allow_special)
      : text_(text), trie_(trie), added_(added), allow_special_(allow_special) {}

  // The next segment in text order; false after the last.
  bool Next(TextSegment* segment);

 private:
  // The whitespace-and-flags adjusted span of the next usable match (false
  // when no match is left).
  bool NextToken(TextSegment* token);

  const absl::string_view text_;
  const AddedTokenTrie& trie_;
  const std::vector<AddedToken>& added_;
  const bool allow_special_;
  size_t scan_ = 0;          // matching resumes here (after the last match)
  size_t start_offset_ = 0;  // text before this is out (a token's rstrip may swallow more)
  bool have_token_ = false;  // token_ follows the text segment just returned
  TextSegment token_{};
};

}  // namespace spar

#endif  // SPAR_TEXT_ADDED_TOKENS_H_
