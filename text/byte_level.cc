#include "text/byte_level.h"

#include <array>

#include "absl/container/flat_hash_map.h"
#include "text/utf8.h"

namespace spar {
namespace {

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

}  // namespace

const std::string& ByteLevelSymbol(uint8_t b) { return ByteLevel().byte_to_utf8[b]; }

std::string ByteLevelEncode(absl::string_view bytes) {
  const ByteLevelTables& t = ByteLevel();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

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

}  // namespace spar
