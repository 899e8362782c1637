// Hugging Face `tokenizer.json` byte-level BPE: loading, encoding, decoding.
//
// What is supported is what the GLM-5, DeepSeek-V3.x and Qwen3 tokenizers
// use, checked against the Hugging Face implementation in tests/npm:
//   normalizer    null, NFC/NFD/NFKC/NFKD, Sequence, Replace (literal), Prepend
//   pre_tokenizer Sequence, Split (regex or literal; all behaviors, invert),
//                 ByteLevel (add_prefix_space, use_regex), Digits
//   model         BPE: merges as "a b" or ["a","b"], ignore_merges,
//                 byte_fallback, unk_token/fuse_unk
//   decoder       ByteLevel; or the SentencePiece-style chain of Replace,
//                 ByteFallback, Fuse, Strip
//   added_tokens  matched before pre-tokenization, leftmost-longest, with
//                 lstrip/rstrip/single_word/normalized/special
// Anything else fails loading with an error naming the unsupported part.
//
// Input that is not valid UTF-8 is read the way Hugging Face sees text that
// arrived as bytes: every maximal ill-formed subpart becomes U+FFFD (Rust's
// from_utf8_lossy, and what a JS string with lone surrogates turns into in
// the Node binding). Encode never fails on input bytes.
//
// Encode adds no BOS/EOS (a post-processor's job); chat templates write them.
#ifndef SPAR_TEXT_TOKENIZER_H_
#define SPAR_TEXT_TOKENIZER_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace spar {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// How one id reads back, for the streaming detokenizer.
struct TokenPiece {
  enum class Kind {
    kText,          // bytes of ordinary model text (byte-level decoded)
    kFallbackByte,  // a <0xNN> token under a ByteFallback decoder
    kAdded,         // an added token: its content, verbatim
  };
  Kind kind = Kind::kText;
  absl::string_view bytes;  // owned by the tokenizer
  bool special = false;     // kAdded only
};

struct EncodeOptions {
  static constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();
  // false treats special added tokens as plain text (see Tokenizer::Encode).
  bool allow_special = true;
  // Early stop: once the text is known to encode to more than max_tokens
  // ids, encoding stops and returns its first max_tokens + 1 ids (exactly
  // those of the full encoding), so `ids.size() > max_tokens` tells the
  // caller the text is over its limit without the rest being tokenized.
  // Added tokens, pre-tokenization and BPE all stop: the work and memory are
  // those of the consumed prefix (about max_tokens tokens of text), not of
  // the text, with these exceptions:
  //  - finding the next added token scans ahead for its first byte (a table
  //    lookup per byte, no memory);
  //  - a tokenizer with a normalizer (Qwen3's NFC; not GLM's or DeepSeek's)
  //    normalizes each stretch between added tokens whole first;
  //  - input that is not valid UTF-8 is first copied with U+FFFD in place;
  //  - one pre-token word is encoded whole (BPE merges across all of it),
  //    e.g. a text that is a single megabyte run of letters.
  size_t max_tokens = kNoLimit;
};

class TokenizerImpl;

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(absl::string_view json_text);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `allow_special` = false treats special added tokens as plain text (HF's
  // encode_special_tokens), which is how user-supplied text must be encoded
  // so that it cannot forge role markers. Thread-safe.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, bool allow_special = true) const;
  // With options, e.g. a limit: Encode(prompt, EncodeOptions{.max_tokens =
  // context_tokens}) returns more than context_tokens ids only when the
  // prompt does not fit, and then stops after the first context_tokens + 1
  // (a 15 MiB prompt costs what its first 32K tokens cost). Thread-safe.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, const EncodeOptions& options) const;

  // Errors name the first id that is out of range. Thread-safe.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special = false) const;

  // Size of the id space: one more than the largest id of the vocabulary
  // or of the added tokens.
  int32_t vocab_size() const;
  // Added tokens first, then the model vocabulary (its raw, byte-level
  // mapped strings such as "Ġthe").
  std::optional<int32_t> TokenToId(absl::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // Decoding view of one id; error when out of range.
  absl::StatusOr<TokenPiece> Piece(int32_t id) const;
  // Strip decoder: number of leading spaces removed at the start of each
  // stretch of model text (0 for byte-level tokenizers).
  int strip_leading_spaces() const;

  // Number of pre-token words whose BPE result is in the cache (for tests).
  size_t cache_size() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace spar

#endif  // SPAR_TEXT_TOKENIZER_H_
