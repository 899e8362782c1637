#include "text/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace spar {

using json = nlohmann::json;

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

absl::StatusOr<std::vector<int32_t>> TokenizerImpl::Encode(absl::string_view input, const EncodeOptions& options) const {
  std::string sanitized;
  absl::string_view text = input;
  if (!IsValidUtf8(input)) {
    sanitized = SanitizeUtf8(input);
    text = sanitized;
  }
  // Limited: stop once more than max_tokens ids are known, pre-tokenizing
  // a window at a time (pre_tokenizer.h) so that the rest is never split.
  const bool limited = options.max_tokens != EncodeOptions::kNoLimit;
  const size_t window = limited ? kEncodeWindowBytes : 0;
  auto over = [&](const std::vector<int32_t>& ids) { return limited && ids.size() > options.max_tokens; };
  std::vector<int32_t> ids;
  ids.reserve(limited ? std::min(text.size() / 3 + 4, options.max_tokens + 1) : text.size() / 3 + 4);
  AddedTokenSplitter segments(text, raw_trie_, added_, options.allow_special);
  TextSegment seg;
  while (!over(ids) && segments.Next(&seg)) {
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
    AddedTokenSplitter inner(piece, normalized_trie_, added_, options.allow_special);
    TextSegment sub;
    while (!over(ids) && inner.Next(&sub)) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      SPAR_RETURN_IF_ERROR(pre_tokenizer_.ForEachWord(piece.substr(sub.begin, sub.end - sub.begin), window,
                                                      [&](absl::string_view word) {
                                                        EncodeWord(word, &ids);
                                                        return !over(ids);
                                                      }));
    }
  }
  // The last word may have added several ids past the limit.
  if (over(ids)) ids.resize(options.max_tokens + 1);
  return ids;
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
  EncodeOptions options;
  options.allow_special = allow_special;
  return impl_->Encode(text, options);
}
absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text, const EncodeOptions& options) const {
  return impl_->Encode(text, options);
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
