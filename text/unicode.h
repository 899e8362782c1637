// Unicode character properties and normalization for the tokenizer (ICU).
#ifndef SPAR_TEXT_UNICODE_H_
#define SPAR_TEXT_UNICODE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// Normalizes valid UTF-8 text. Text that is already in the form (the usual
// case) is returned unchanged after a quick check.
absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text, NormalizationForm form);

// The Unicode White_Space property (Rust's char::is_whitespace).
bool IsUnicodeWhitespace(char32_t c);

// General category N* (Rust's char::is_numeric).
bool IsUnicodeNumeric(char32_t c);

// Alphabetic or numeric (Rust's char::is_alphanumeric).
bool IsUnicodeAlphanumeric(char32_t c);

// Simple (one code point) case mappings.
char32_t UnicodeToUpper(char32_t c);
char32_t UnicodeToLower(char32_t c);

}  // namespace spar

#endif  // SPAR_TEXT_UNICODE_H_
