#include "text/detokenizer.h"

#include "base/status_macros.h"
#include "text/utf8.h"

namespace spar {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special), strip_budget_(tokenizer->strip_leading_spaces()) {}

void IncrementalDetokenizer::AppendChunkText(absl::string_view text, std::string* out) {
  // Model text of the current chunk (the stretch since the last added
  // token). Byte-level text may end mid-character: hold that tail back.
  pending_.append(text.data(), text.size());
  absl::string_view ready(pending_);
  ready.remove_suffix(IncompleteUtf8Tail(ready));
  while (strip_budget_ > 0 && !ready.empty() && ready[0] == ' ') {
    ready.remove_prefix(1);
    --strip_budget_;
  }
  if (!ready.empty()) strip_budget_ = 0;
  AppendSanitizedUtf8(ready, out);
  pending_.erase(0, pending_.size() - IncompleteUtf8Tail(pending_));
}

void IncrementalDetokenizer::FlushFallback(std::string* out) {
  if (fallback_.empty()) return;
  std::string text;
  if (IsValidUtf8(fallback_)) {
    text.swap(fallback_);
  } else {
    for (size_t k = 0; k < fallback_.size(); ++k) AppendUtf8(kReplacementChar, &text);
  }
  fallback_.clear();
  AppendChunkText(text, out);
}

absl::StatusOr<std::string> IncrementalDetokenizer::Add(int32_t id) {
  SPAR_ASSIGN_OR_RETURN(TokenPiece piece, tokenizer_->Piece(id));
  std::string out;
  switch (piece.kind) {
    case TokenPiece::Kind::kAdded:
      // A skipped special token does not end the chunk (as in Decode).
      if (skip_special_ && piece.special) break;
      FlushFallback(&out);
      // End of chunk: an incomplete tail is final now.
      AppendSanitizedUtf8(pending_, &out);
      pending_.clear();
      strip_budget_ = tokenizer_->strip_leading_spaces();
      out.append(piece.bytes.data(), piece.bytes.size());
      break;
    case TokenPiece::Kind::kFallbackByte:
      fallback_.append(piece.bytes.data(), piece.bytes.size());
      break;
    case TokenPiece::Kind::kText:
      FlushFallback(&out);
      AppendChunkText(piece.bytes, &out);
      break;
  }
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out;
  FlushFallback(&out);
  AppendSanitizedUtf8(pending_, &out);
  pending_.clear();
  strip_budget_ = tokenizer_->strip_leading_spaces();
  return out;
}

}  // namespace spar
