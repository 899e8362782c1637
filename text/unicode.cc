#include "text/unicode.h"

#include "absl/strings/str_cat.h"
#include "unicode/bytestream.h"
#include "unicode/normalizer2.h"
#include "unicode/uchar.h"
#include "unicode/utypes.h"

namespace spar {
namespace {

const icu::Normalizer2* Instance(NormalizationForm form, UErrorCode* status) {
  switch (form) {
    case NormalizationForm::kNfc:
      return icu::Normalizer2::getNFCInstance(*status);
    case NormalizationForm::kNfd:
      return icu::Normalizer2::getNFDInstance(*status);
    case NormalizationForm::kNfkc:
      return icu::Normalizer2::getNFKCInstance(*status);
    case NormalizationForm::kNfkd:
      return icu::Normalizer2::getNFKDInstance(*status);
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text, NormalizationForm form) {
  // ASCII is invariant under all four forms; skip ICU entirely for it.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = Instance(form, &status);
  if (U_FAILURE(status) || norm == nullptr) {
    return absl::InternalError(absl::StrCat("ICU normalizer unavailable: ", u_errorName(status)));
  }
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (norm->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  norm->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("ICU normalization failed: ", u_errorName(status)));
  }
  return out;
}

bool IsUnicodeWhitespace(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

bool IsUnicodeNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool IsUnicodeAlphanumeric(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(u);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

char32_t UnicodeToUpper(char32_t c) { return static_cast<char32_t>(u_toupper(static_cast<UChar32>(c))); }
char32_t UnicodeToLower(char32_t c) { return static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))); }

}  // namespace spar
