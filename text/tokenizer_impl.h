// Tokenizer's implementation, internal to text/: what tokenizer.json
// describes, and the three stages of encoding.
//   tokenizer_load.cc  reading tokenizer.json (model, normalizer,
//                      pre-tokenizer and decoder config, added tokens)
//   tokenizer.cc       encoding: added tokens, normalization, then
//                      pre-tokenization (pre_tokenizer.h) word by word
//   tokenizer_bpe.cc   BPE of one word (merges, byte fallback, the cache)
//                      and decoding
#ifndef SPAR_TEXT_TOKENIZER_IMPL_H_
#define SPAR_TEXT_TOKENIZER_IMPL_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "text/added_tokens.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace spar {

struct NormalizerStep {
  enum class Kind { kUnicode, kReplace, kPrepend };
  Kind kind = Kind::kUnicode;
  NormalizationForm form = NormalizationForm::kNfc;
  std::string pattern;  // kReplace
  std::string content;  // kReplace, kPrepend
};

class TokenizerImpl {
 public:
  // A limited Encode pre-tokenizes this much text first, doubling while
  // more is needed (pre_tokenizer.h): what one search may look ahead.
  static constexpr size_t kEncodeWindowBytes = 64 << 10;

  absl::Status Load(const nlohmann::json& root);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, const EncodeOptions& options) const;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special) const;
  absl::StatusOr<TokenPiece> Piece(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(kind_.size()); }
  std::optional<int32_t> TokenToId(absl::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const {
    return id >= 0 && id < vocab_size() && kind_[id] == kKindAdded && special_[id];
  }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  int strip_leading_spaces() const { return strip_leading_; }
  size_t cache_size() const;

 private:
  static constexpr uint8_t kKindHole = 0;
  static constexpr uint8_t kKindText = 1;
  static constexpr uint8_t kKindFallbackByte = 2;
  static constexpr uint8_t kKindAdded = 3;

  // Loading (tokenizer_load.cc).
  absl::Status LoadNormalizer(const nlohmann::json& node);
  absl::Status LoadPreTokenizer(const nlohmann::json& node);
  absl::Status LoadModel(const nlohmann::json& node);
  absl::Status LoadDecoder(const nlohmann::json& node);
  absl::Status LoadAddedTokens(const nlohmann::json& node);
  void BuildDecodeTable();

  // Encoding (tokenizer.cc).
  absl::StatusOr<std::string> Normalize(absl::string_view text) const;

  // BPE (tokenizer_bpe.cc): appends the ids of one pre-token word.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;
  void ModelEncode(absl::string_view word, std::vector<int32_t>* out) const;
  void Merge(std::vector<int32_t>* symbols) const;
  void AppendSymbolIds(absl::string_view unit, std::vector<int32_t>* out) const;

  // Normalizer.
  std::vector<NormalizerStep> normalizer_;
  // Pre-tokenizer.
  PreTokenizer pre_tokenizer_;
  bool byte_level_ = false;
  // Model.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, merged id)
  std::array<int32_t, 256> byte_ids_{};      // byte-level: id of each byte's symbol
  std::array<int32_t, 256> fallback_ids_{};  // <0xNN> tokens, -1 when absent
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  // Decoder.
  bool decoder_byte_level_ = false;
  bool decoder_byte_fallback_ = false;
  std::string decoder_replace_from_;
  std::string decoder_replace_to_;
  int strip_leading_ = 0;
  // Added tokens.
  std::vector<AddedToken> added_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  AddedTokenTrie raw_trie_;         // normalized == false: matched on the input
  AddedTokenTrie normalized_trie_;  // normalized == true: matched after normalization
  // Per id: kind, decoded bytes, special flag.
  std::vector<uint8_t> kind_;
  std::vector<std::string> decoded_;
  std::vector<bool> special_;
  std::vector<std::string> model_token_;  // raw vocabulary string per id

  // BPE results per pre-token word. Sharded so concurrent encoders rarely
  // wait on each other; a full shard is simply cleared.
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheShardEntries = 8192;
  static constexpr size_t kCacheMaxWordBytes = 96;
  struct CacheShard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace spar

#endif  // SPAR_TEXT_TOKENIZER_IMPL_H_
