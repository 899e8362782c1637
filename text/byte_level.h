// GPT-2's reversible map between bytes and printable code points, which
// byte-level BPE vocabularies are written in ("Ġthe" is " the").
#ifndef SPAR_TEXT_BYTE_LEVEL_H_
#define SPAR_TEXT_BYTE_LEVEL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace spar {

// The UTF-8 of the code point byte `b` maps to.
const std::string& ByteLevelSymbol(uint8_t b);
// Maps raw bytes to the byte-level alphabet ("Ġhello").
std::string ByteLevelEncode(absl::string_view bytes);
// The inverse, as Hugging Face's ByteLevel decoder does it: a token with any
// code point outside the alphabet reads back as its own UTF-8 bytes.
std::string ByteLevelDecodeToken(absl::string_view token);

}  // namespace spar

#endif  // SPAR_TEXT_BYTE_LEVEL_H_
