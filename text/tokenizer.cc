#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <mutex>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "text/regex.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {
namespace {

using json = nlohmann::json;

absl::Status LoadError(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

// GPT-2's reversible map from bytes to printable code points: printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100 onwards.
struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_cp;
  std::array<std::string, 256> byte_to_utf8;
  absl::flat_hash_map<char32_t, uint8_t> cp_to_byte;

  ByteLevelTables() {
    std::array<int, 256> cp;
    cp.fill(-1);
    for (int c = '!'; c <= '~'; ++c) cp[c] = c;
    for (int c = 0xA1; c <= 0xAC; ++c) cp[c] = c;
    for (int c = 0xAE; c <= 0xFF; ++c) cp[c] = c;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      if (cp[b] < 0) cp[b] = 256 + n++;
      byte_to_cp[b] = static_cast<char32_t>(cp[b]);
      AppendUtf8(byte_to_cp[b], &byte_to_utf8[b]);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTables& ByteLevel() {
  static const ByteLevelTables* tables = new ByteLevelTables();
  return *tables;
}

// Maps raw bytes to the byte-level alphabet ("Ġhello").
std::string ByteLevelEncode(absl::string_view bytes) {
  const ByteLevelTables& t = ByteLevel();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

// The inverse, as Hugging Face's ByteLevel decoder does it: a token with any
// code point outside the alphabet reads back as its own UTF-8 bytes.
std::string ByteLevelDecodeToken(absl::string_view token) {
  const ByteLevelTables& t = ByteLevel();
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    char32_t cp = 0;
    const size_t n = DecodeUtf8At(token, i, &cp);
    auto it = n == 0 ? t.cp_to_byte.end() : t.cp_to_byte.find(cp);
    if (it == t.cp_to_byte.end()) return std::string(token);
    out.push_back(static_cast<char>(it->second));
    i += n;
  }
  return out;
}

// --- JSON field helpers ------------------------------------------------------

bool BoolField(const json& obj, const char* name, bool fallback) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

std::string TypeOf(const json& obj) {
  auto it = obj.find("type");
  if (it == obj.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// A Split/Replace "pattern": {"Regex": "..."} or {"String": "..."}.
struct Pattern {
  bool is_regex = false;
  std::string text;
};

absl::StatusOr<Pattern> ParsePattern(const json& obj, absl::string_view where) {
  auto it = obj.find("pattern");
  if (it == obj.end() || !it->is_object()) return LoadError(where, "\"pattern\" is missing");
  if (it->contains("Regex") && (*it)["Regex"].is_string()) return Pattern{true, (*it)["Regex"].get<std::string>()};
  if (it->contains("String") && (*it)["String"].is_string()) {
    return Pattern{false, (*it)["String"].get<std::string>()};
  }
  return LoadError(where, "\"pattern\" must hold \"Regex\" or \"String\"");
}

// Escapes a literal for use inside a PCRE2 pattern.
std::string QuoteRegex(absl::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

// --- Implementation ----------------------------------------------------------

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormalizerStep {
  enum class Kind { kUnicode, kReplace, kPrepend };
  Kind kind = Kind::kUnicode;
  NormalizationForm form = NormalizationForm::kNfc;
  std::string pattern;  // kReplace
  std::string content;  // kReplace, kPrepend
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kDigits, kByteLevel };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;  // kDigits
  bool add_prefix_space = false;   // kByteLevel
};

class TokenizerImpl {
 public:
  absl::Status Load(const json& root);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, bool allow_special) const;
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

  // A byte trie over added-token contents for leftmost-longest matching.
  struct Trie {
    absl::flat_hash_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> node
    std::vector<int32_t> terminal{-1};             // node -> index into added_
    std::array<bool, 256> first{};
    bool empty() const { return terminal.size() == 1; }
    void Insert(absl::string_view s, int32_t index);
  };
  struct Match {
    size_t begin;
    size_t end;
    int32_t index;  // into added_
  };
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;  // -1: text to tokenize
  };

  absl::Status LoadNormalizer(const json& node);
  absl::Status LoadPreTokenizer(const json& node);
  absl::Status LoadModel(const json& node);
  absl::Status LoadDecoder(const json& node);
  absl::Status LoadAddedTokens(const json& node);

  // Splits `text` around the added tokens of `trie` (HF find_matches).
  void SplitOnAddedTokens(absl::string_view text, const Trie& trie, bool allow_special,
                          std::vector<Segment>* out) const;
  absl::StatusOr<std::string> Normalize(absl::string_view text) const;
  absl::Status PreTokenize(absl::string_view text, std::deque<std::string>* arena,
                           std::vector<absl::string_view>* words) const;
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;
  void ModelEncode(absl::string_view word, std::vector<int32_t>* out) const;
  void Merge(std::vector<int32_t>* symbols) const;
  void AppendSymbolIds(absl::string_view unit, std::vector<int32_t>* out) const;

  // Normalizer.
  std::vector<NormalizerStep> normalizer_;
  // Pre-tokenizer.
  std::vector<PreTokenizerStep> pre_tokenizer_;
  bool byte_level_ = false;
  // Model.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, merged id)
  std::array<int32_t, 256> byte_ids_{};  // byte-level: id of each byte's symbol
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
  Trie raw_trie_;         // normalized == false: matched on the input
  Trie normalized_trie_;  // normalized == true: matched after normalization
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


void TokenizerImpl::Trie::Insert(absl::string_view s, int32_t index) {
  int32_t node = 0;
  for (char ch : s) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
    auto it = edges.find(key);
    if (it == edges.end()) {
      const int32_t next = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(key, next);
      node = next;
    } else {
      node = it->second;
    }
  }
  terminal[node] = index;
  if (!s.empty()) first[static_cast<uint8_t>(s[0])] = true;
}

absl::Status TokenizerImpl::Load(const json& root) {
  if (!root.is_object()) return LoadError("root", "must be an object");
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) return LoadError("model", "is missing");
  SPAR_RETURN_IF_ERROR(LoadModel(*model));
  if (root.contains("normalizer")) SPAR_RETURN_IF_ERROR(LoadNormalizer(root["normalizer"]));
  if (root.contains("pre_tokenizer")) SPAR_RETURN_IF_ERROR(LoadPreTokenizer(root["pre_tokenizer"]));
  if (root.contains("decoder")) SPAR_RETURN_IF_ERROR(LoadDecoder(root["decoder"]));
  if (root.contains("added_tokens")) SPAR_RETURN_IF_ERROR(LoadAddedTokens(root["added_tokens"]));

  // Per-id decoding table.
  decoded_.assign(kind_.size(), std::string());
  for (size_t id = 0; id < kind_.size(); ++id) {
    if (kind_[id] != kKindText) continue;
    const std::string& tok = model_token_[id];
    if (decoder_byte_fallback_ && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
      int value = 0;
      bool hex = true;
      for (int k = 3; k < 5; ++k) {
        const char c = tok[k];
        value <<= 4;
        if (c >= '0' && c <= '9') value |= c - '0';
        else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
        else hex = false;
      }
      if (hex) {
        kind_[id] = kKindFallbackByte;
        decoded_[id] = std::string(1, static_cast<char>(value));
        continue;
      }
    }
    if (decoder_byte_level_) {
      decoded_[id] = ByteLevelDecodeToken(tok);
    } else if (!decoder_replace_from_.empty()) {
      decoded_[id] = absl::StrReplaceAll(tok, {{decoder_replace_from_, decoder_replace_to_}});
    } else {
      decoded_[id] = tok;
    }
  }
  for (const AddedToken& t : added_) decoded_[t.id] = t.content;
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadModel(const json& m) {
  const std::string type = TypeOf(m);
  if (!type.empty() && type != "BPE") return LoadError("model.type", absl::StrCat("\"", type, "\" is not supported (only BPE)"));
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
    return LoadError("model.dropout", "BPE dropout is not supported (it makes encoding random)");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(field) && m[field].is_string() && !m[field].get<std::string>().empty()) {
      return LoadError(absl::StrCat("model.", field), "is not supported");
    }
  }
  ignore_merges_ = BoolField(m, "ignore_merges", false);
  byte_fallback_ = BoolField(m, "byte_fallback", false);
  fuse_unk_ = BoolField(m, "fuse_unk", false);

  auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object()) return LoadError("model.vocab", "must be an object");
  int64_t max_id = -1;
  vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) return LoadError("model.vocab", absl::StrCat("id of \"", it.key(), "\" is not an integer"));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX - 1) return LoadError("model.vocab", absl::StrCat("id ", id, " is out of range"));
    vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  kind_.assign(static_cast<size_t>(max_id + 1), kKindHole);
  model_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  special_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : vocab_) {
    kind_[id] = kKindText;
    model_token_[id] = tok;
  }

  const ByteLevelTables& bl = ByteLevel();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(bl.byte_to_utf8[b]);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    auto f = vocab_.find(name);
    fallback_ids_[b] = f == vocab_.end() ? -1 : f->second;
  }

  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab_.find(m["unk_token"].get<std::string>());
    if (it == vocab_.end()) return LoadError("model.unk_token", "is not in the vocabulary");
    unk_id_ = it->second;
  }

  auto merges = m.find("merges");
  if (merges != m.end() && !merges->is_null()) {
    if (!merges->is_array()) return LoadError("model.merges", "must be an array");
    merges_.reserve(merges->size());
    int32_t rank = 0;
    for (const json& entry : *merges) {
      std::string a, b;
      if (entry.is_string()) {
        // "a b": tokens of byte-level vocabularies never contain a space.
        const std::string s = entry.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return LoadError("model.merges", absl::StrCat("entry ", rank, " \"", s, "\" is not two tokens"));
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
        a = entry[0].get<std::string>();
        b = entry[1].get<std::string>();
      } else {
        return LoadError("model.merges", absl::StrCat("entry ", rank, " is neither \"a b\" nor [\"a\", \"b\"]"));
      }
      auto ia = vocab_.find(a);
      auto ib = vocab_.find(b);
      auto im = vocab_.find(a + b);
      if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end()) {
        return LoadError("model.merges", absl::StrCat("entry ", rank, " (\"", a, "\", \"", b, "\") uses a token missing from the vocabulary"));
      }
      const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
      // The first (best-ranked) occurrence of a pair wins, as in HF.
      merges_.emplace(key, std::make_pair(rank, im->second));
      ++rank;
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadNormalizer(const json& node) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    auto list = node.find("normalizers");
    if (list == node.end() || !list->is_array()) return LoadError("normalizer", "Sequence without \"normalizers\"");
    for (const json& n : *list) SPAR_RETURN_IF_ERROR(LoadNormalizer(n));
    return absl::OkStatus();
  }
  NormalizerStep step;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = NormalizerStep::Kind::kUnicode;
    step.form = type == "NFC"    ? NormalizationForm::kNfc
                : type == "NFD"  ? NormalizationForm::kNfd
                : type == "NFKC" ? NormalizationForm::kNfkc
                                 : NormalizationForm::kNfkd;
  } else if (type == "Replace") {
    SPAR_ASSIGN_OR_RETURN(Pattern p, ParsePattern(node, "normalizer Replace"));
    if (p.is_regex) return LoadError("normalizer", "Replace with a regex pattern is not supported");
    if (p.text.empty()) return LoadError("normalizer", "Replace with an empty pattern");
    step.kind = NormalizerStep::Kind::kReplace;
    step.pattern = p.text;
    step.content = node.value("content", "");
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.content = node.value("prepend", "");
  } else {
    return LoadError("normalizer", absl::StrCat("type \"", type, "\" is not supported"));
  }
  normalizer_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadPreTokenizer(const json& node) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(node);
  if (byte_level_) return LoadError("pre_tokenizer", "ByteLevel must be the last pre-tokenizer");
  if (type == "Sequence") {
    auto list = node.find("pretokenizers");
    if (list == node.end() || !list->is_array()) return LoadError("pre_tokenizer", "Sequence without \"pretokenizers\"");
    for (const json& n : *list) SPAR_RETURN_IF_ERROR(LoadPreTokenizer(n));
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "Split") {
    SPAR_ASSIGN_OR_RETURN(Pattern p, ParsePattern(node, "pre_tokenizer Split"));
    const std::string regex = p.is_regex ? p.text : QuoteRegex(p.text);
    SPAR_ASSIGN_OR_RETURN(step.regex, Regex::Compile(regex));
    const std::string behavior = node.value("behavior", "Isolated");
    if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::kContiguous;
    else return LoadError("pre_tokenizer Split", absl::StrCat("behavior \"", behavior, "\" is unknown"));
    step.invert = BoolField(node, "invert", false);
    step.kind = PreTokenizerStep::Kind::kSplit;
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::kDigits;
    step.individual_digits = BoolField(node, "individual_digits", false);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = BoolField(node, "add_prefix_space", true);
    if (BoolField(node, "use_regex", true)) {
      // GPT-2's split, which HF applies when use_regex is true.
      SPAR_ASSIGN_OR_RETURN(step.regex, Regex::Compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"));
    }
    byte_level_ = true;
  } else {
    return LoadError("pre_tokenizer", absl::StrCat("type \"", type, "\" is not supported"));
  }
  pre_tokenizer_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadDecoder(const json& node) {
  if (node.is_null()) return LoadError("decoder", "is null; spar needs a ByteLevel or SentencePiece-style decoder");
  const std::string type = TypeOf(node);
  if (type == "Sequence") {
    auto list = node.find("decoders");
    if (list == node.end() || !list->is_array()) return LoadError("decoder", "Sequence without \"decoders\"");
    for (const json& n : *list) SPAR_RETURN_IF_ERROR(LoadDecoder(n));
  } else if (type == "ByteLevel") {
    decoder_byte_level_ = true;
  } else if (type == "ByteFallback") {
    decoder_byte_fallback_ = true;
  } else if (type == "Fuse") {
    // Concatenation is what spar does anyway.
  } else if (type == "Replace") {
    SPAR_ASSIGN_OR_RETURN(Pattern p, ParsePattern(node, "decoder Replace"));
    if (p.is_regex || p.text.empty()) return LoadError("decoder", "Replace needs a non-empty String pattern");
    decoder_replace_from_ = p.text;
    decoder_replace_to_ = node.value("content", "");
  } else if (type == "Strip") {
    const std::string content = node.value("content", " ");
    if (content != " " || node.value("stop", 0) != 0) {
      return LoadError("decoder", "Strip is supported only for leading spaces");
    }
    strip_leading_ = node.value("start", 0);
  } else {
    return LoadError("decoder", absl::StrCat("type \"", type, "\" is not supported"));
  }
  if (decoder_byte_level_ && (decoder_byte_fallback_ || !decoder_replace_from_.empty() || strip_leading_ > 0)) {
    return LoadError("decoder", "ByteLevel combined with SentencePiece-style decoders is not supported");
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadAddedTokens(const json& node) {
  if (node.is_null()) return absl::OkStatus();
  if (!node.is_array()) return LoadError("added_tokens", "must be an array");
  for (const json& t : node) {
    AddedToken tok;
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return LoadError("added_tokens", absl::StrCat("malformed entry ", t.dump()));
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > INT32_MAX - 1) return LoadError("added_tokens", absl::StrCat("id ", id, " is out of range"));
    tok.id = static_cast<int32_t>(id);
    tok.content = t["content"].get<std::string>();
    if (tok.content.empty()) return LoadError("added_tokens", absl::StrCat("token ", id, " has empty content"));
    tok.special = BoolField(t, "special", false);
    tok.lstrip = BoolField(t, "lstrip", false);
    tok.rstrip = BoolField(t, "rstrip", false);
    tok.single_word = BoolField(t, "single_word", false);
    // HF's default: special tokens are not normalized.
    tok.normalized = BoolField(t, "normalized", !tok.special);
    if (static_cast<size_t>(tok.id) >= kind_.size()) {
      kind_.resize(tok.id + 1, kKindHole);
      model_token_.resize(tok.id + 1);
      special_.resize(tok.id + 1, false);
    }
    kind_[tok.id] = kKindAdded;
    special_[tok.id] = tok.special;
    const int32_t index = static_cast<int32_t>(added_.size());
    added_by_content_[tok.content] = tok.id;
    if (tok.normalized && !normalizer_.empty()) {
      // HF matches these on normalized text, so their own content is
      // normalized the same way first.
      SPAR_ASSIGN_OR_RETURN(std::string norm, Normalize(tok.content));
      normalized_trie_.Insert(norm, index);
    } else if (tok.normalized) {
      normalized_trie_.Insert(tok.content, index);
    } else {
      raw_trie_.Insert(tok.content, index);
    }
    added_.push_back(std::move(tok));
  }
  return absl::OkStatus();
}

// --- Encoding ----------------------------------------------------------------

absl::StatusOr<std::string> TokenizerImpl::Normalize(absl::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : normalizer_) {
    switch (step.kind) {
      case NormalizerStep::Kind::kUnicode: {
        SPAR_ASSIGN_OR_RETURN(s, NormalizeUnicode(s, step.form));
        break;
      }
      case NormalizerStep::Kind::kReplace:
        s = absl::StrReplaceAll(s, {{step.pattern, step.content}});
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s = step.content + s;
        break;
    }
  }
  return s;
}

void TokenizerImpl::SplitOnAddedTokens(absl::string_view text, const Trie& trie, bool allow_special,
                                       std::vector<Segment>* out) const {
  if (trie.empty()) {
    if (!text.empty()) out->push_back({0, text.size(), -1});
    return;
  }
  // Leftmost-longest, non-overlapping matches over the whole text first
  // (what HF's Aho-Corasick pass yields); flags are applied afterwards.
  std::vector<Match> matches;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!trie.first[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < n; ++j) {
      auto it = trie.edges.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[j]));
      if (it == trie.edges.end()) break;
      node = it->second;
      if (trie.terminal[node] >= 0) {
        best = trie.terminal[node];
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      matches.push_back({i, best_end, best});
      i = best_end;
    } else {
      ++i;
    }
  }

  auto char_before = [&](size_t pos, char32_t* cp) -> size_t {
    size_t p = pos;
    while (p > 0) {
      --p;
      if ((static_cast<uint8_t>(text[p]) & 0xC0) != 0x80) break;
    }
    const size_t len = DecodeUtf8At(text, p, cp);
    return len == 0 ? 0 : pos - p;
  };

  size_t start_offset = 0;
  for (const Match& m : matches) {
    const AddedToken& tok = added_[m.index];
    if (!allow_special && tok.special) continue;
    if (m.begin < start_offset) continue;  // swallowed by a previous rstrip
    size_t start = m.begin;
    size_t stop = m.end;
    if (tok.single_word) {
      char32_t cp = 0;
      const bool word_before = start > 0 && char_before(start, &cp) > 0 && IsUnicodeAlphanumeric(cp);
      bool word_after = false;
      if (stop < n && DecodeUtf8At(text, stop, &cp) > 0) word_after = IsUnicodeAlphanumeric(cp);
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
      start = std::max(p, start_offset);
    }
    if (tok.rstrip) {
      char32_t cp = 0;
      while (stop < n) {
        const size_t len = DecodeUtf8At(text, stop, &cp);
        if (len == 0 || !IsUnicodeWhitespace(cp)) break;
        stop += len;
      }
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < n) out->push_back({start_offset, n, -1});
}

absl::Status TokenizerImpl::PreTokenize(absl::string_view text, std::deque<std::string>* arena,
                                        std::vector<absl::string_view>* words) const {
  std::vector<absl::string_view> pieces{text};
  std::vector<absl::string_view> next;
  std::vector<std::pair<size_t, size_t>> found;
  struct Part {
    size_t begin, end;
    bool delim;
  };
  std::vector<Part> parts;
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.add_prefix_space) {
      for (absl::string_view& p : pieces) {
        if (!p.empty() && p[0] != ' ') {
          arena->push_back(absl::StrCat(" ", p));
          p = arena->back();
        }
      }
    }
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.regex == nullptr) continue;
    next.clear();
    for (absl::string_view p : pieces) {
      // Cover the piece with delimiter / non-delimiter parts.
      parts.clear();
      if (step.kind == PreTokenizerStep::Kind::kDigits) {
        size_t i = 0;
        while (i < p.size()) {
          char32_t cp = 0;
          size_t len = DecodeUtf8At(p, i, &cp);
          if (len == 0) len = 1;
          const bool digit = IsUnicodeNumeric(cp);
          parts.push_back({i, i + len, digit});
          i += len;
        }
      } else {
        found.clear();
        SPAR_RETURN_IF_ERROR(step.regex->FindAll(p, 0, &found));
        size_t pos = 0;
        for (const auto& [b, e] : found) {
          if (b > pos) parts.push_back({pos, b, false});
          parts.push_back({b, e, true});
          pos = e;
        }
        if (pos < p.size()) parts.push_back({pos, p.size(), false});
      }
      bool invert = step.kind == PreTokenizerStep::Kind::kSplit && step.invert;
      if (invert) {
        for (Part& part : parts) part.delim = !part.delim;
      }
      SplitBehavior behavior = SplitBehavior::kIsolated;
      if (step.kind == PreTokenizerStep::Kind::kSplit) behavior = step.behavior;
      if (step.kind == PreTokenizerStep::Kind::kDigits && !step.individual_digits) behavior = SplitBehavior::kContiguous;
      auto emit = [&](size_t b, size_t e) {
        if (e > b) next.push_back(p.substr(b, e - b));
      };
      switch (behavior) {
        case SplitBehavior::kIsolated:
          for (const Part& part : parts) emit(part.begin, part.end);
          break;
        case SplitBehavior::kRemoved:
          for (const Part& part : parts) {
            if (!part.delim) emit(part.begin, part.end);
          }
          break;
        case SplitBehavior::kMergedWithPrevious: {
          size_t start = 0;
          for (const Part& part : parts) {
            if (part.delim) {
              emit(start, part.end);
              start = part.end;
            }
          }
          emit(start, p.size());
          break;
        }
        case SplitBehavior::kMergedWithNext: {
          size_t start = 0;
          for (const Part& part : parts) {
            if (part.delim) {
              emit(start, part.begin);
              start = part.begin;
            }
          }
          emit(start, p.size());
          break;
        }
        case SplitBehavior::kContiguous: {
          size_t k = 0;
          while (k < parts.size()) {
            size_t e = k;
            if (parts[k].delim) {
              while (e + 1 < parts.size() && parts[e + 1].delim) ++e;
            } else {
              while (e + 1 < parts.size() && !parts[e + 1].delim) ++e;
            }
            emit(parts[k].begin, parts[e].end);
            k = e + 1;
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (absl::string_view p : pieces) {
    if (!p.empty()) words->push_back(p);
  }
  return absl::OkStatus();
}

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

absl::StatusOr<std::vector<int32_t>> TokenizerImpl::Encode(absl::string_view input, bool allow_special) const {
  std::string sanitized;
  absl::string_view text = input;
  if (!IsValidUtf8(input)) {
    sanitized = SanitizeUtf8(input);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  SplitOnAddedTokens(text, raw_trie_, allow_special, &segments);
  std::deque<std::string> arena;
  std::vector<absl::string_view> words;
  std::vector<Segment> inner;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    absl::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    if (!normalizer_.empty()) {
      SPAR_ASSIGN_OR_RETURN(normalized, Normalize(piece));
      piece = normalized;
    }
    inner.clear();
    SplitOnAddedTokens(piece, normalized_trie_, allow_special, &inner);
    for (const Segment& sub : inner) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      words.clear();
      arena.clear();
      SPAR_RETURN_IF_ERROR(PreTokenize(piece.substr(sub.begin, sub.end - sub.begin), &arena, &words));
      for (absl::string_view w : words) EncodeWord(w, &ids);
    }
  }
  return ids;
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

// --- Tokenizer ---------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  SPAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto tok = FromJson(text);
  if (!tok.ok()) return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json_text) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (root.is_discarded()) return absl::InvalidArgumentError("tokenizer.json: not valid JSON");
  auto impl = std::make_unique<TokenizerImpl>();
  SPAR_RETURN_IF_ERROR(impl->Load(root));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text, bool allow_special) const {
  return impl_->Encode(text, allow_special);
}
absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  return impl_->Decode(ids, skip_special);
}
int32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }
std::optional<int32_t> Tokenizer::TokenToId(absl::string_view token) const { return impl_->TokenToId(token); }
std::optional<std::string> Tokenizer::IdToToken(int32_t id) const { return impl_->IdToToken(id); }
bool Tokenizer::IsSpecial(int32_t id) const { return impl_->IsSpecial(id); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added_tokens(); }
absl::StatusOr<TokenPiece> Tokenizer::Piece(int32_t id) const { return impl_->Piece(id); }
int Tokenizer::strip_leading_spaces() const { return impl_->strip_leading_spaces(); }
size_t Tokenizer::cache_size() const { return impl_->cache_size(); }

}  // namespace spar
