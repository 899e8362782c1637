// UTF-8 helpers shared by the tokenizer, the detokenizer and the template
// engine. Replacement of invalid input follows the Unicode "maximal subpart"
// practice (also WHATWG's decoder and Rust's String::from_utf8_lossy), so a
// byte string that reaches spar is read exactly as Hugging Face tokenizers
// would read it after the same lossy conversion.
#ifndef SPAR_TEXT_UTF8_H_
#define SPAR_TEXT_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace spar {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (which must be a scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// Decodes one well-formed sequence at `pos`. Returns its length, or 0 when the
// bytes there are not a complete well-formed sequence.
size_t DecodeUtf8At(absl::string_view s, size_t pos, char32_t* cp);

// Length of the unit starting at `pos` as the lossy decoder sees it: a whole
// well-formed sequence, or the maximal subpart of an ill-formed one (>= 1).
// `*valid` says which.
size_t Utf8UnitLength(absl::string_view s, size_t pos, bool* valid);

bool IsValidUtf8(absl::string_view s);

// Replaces every maximal ill-formed subpart by U+FFFD.
std::string SanitizeUtf8(absl::string_view s);

// Appends SanitizeUtf8(s) to `out`.
void AppendSanitizedUtf8(absl::string_view s, std::string* out);

// Number of trailing bytes of `s` that are a proper prefix of a well-formed
// sequence (0..3): bytes that a streaming decoder must hold back because the
// next bytes decide whether they become a character or U+FFFD.
size_t IncompleteUtf8Tail(absl::string_view s);

}  // namespace spar

#endif  // SPAR_TEXT_UTF8_H_
