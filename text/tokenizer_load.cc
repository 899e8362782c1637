// Reading tokenizer.json into TokenizerImpl: the BPE model, normalizer,
// pre-tokenizer and decoder configuration, and the added tokens. Anything
// spar does not implement fails here, with an error naming it.
#include <algorithm>
#include <climits>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "text/byte_level.h"
#include "text/tokenizer_impl.h"

namespace spar {
namespace {

using json = nlohmann::json;

absl::Status LoadError(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

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

absl::Status TokenizerImpl::Load(const json& root) {
  if (!root.is_object()) return LoadError("root", "must be an object");
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) return LoadError("model", "is missing");
  SPAR_RETURN_IF_ERROR(LoadModel(*model));
  if (root.contains("normalizer")) SPAR_RETURN_IF_ERROR(LoadNormalizer(root["normalizer"]));
  if (root.contains("pre_tokenizer")) SPAR_RETURN_IF_ERROR(LoadPreTokenizer(root["pre_tokenizer"]));
  if (root.contains("decoder")) SPAR_RETURN_IF_ERROR(LoadDecoder(root["decoder"]));
  if (root.contains("added_tokens")) SPAR_RETURN_IF_ERROR(LoadAddedTokens(root["added_tokens"]));

  BuildDecodeTable();
  return absl::OkStatus();
}

// Per id: how it reads back (tokenizer_bpe.cc's Decode and Piece).
void TokenizerImpl::BuildDecodeTable() {
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

  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(ByteLevelSymbol(static_cast<uint8_t>(b)));
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
  pre_tokenizer_.AddStep(std::move(step));
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

}  // namespace spar
