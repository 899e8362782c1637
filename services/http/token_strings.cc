#include "services/http/token_strings.h"

#include "absl/strings/str_cat.h"

namespace spar::http {

std::string TokenStrings::Text(int32_t id) const {
  if (tokenizer_ != nullptr) {
    auto text = tokenizer_->Decode({id}, /*skip_special=*/false);
    if (text.ok()) return *text;
  }
  return absl::StrCat("token_id:", id);
}

std::string TokenStrings::Bytes(int32_t id) const {
  if (tokenizer_ == nullptr) return "";
  auto piece = tokenizer_->Piece(id);
  if (!piece.ok()) return "";
  return std::string(piece->bytes);
}

}  // namespace spar::http
