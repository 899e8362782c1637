// Non-cryptographic content hash (FNV-1a, 64 bit) for pinning generated files
// in tests and for cache keys.
#ifndef SPAR_BASE_HASH_H_
#define SPAR_BASE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

namespace spar {

class Fnv1a64 {
 public:
  void Update(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ ^= p[i];
      hash_ *= 0x100000001b3ull;
    }
  }
  void Update(absl::string_view s) { Update(s.data(), s.size()); }
  uint64_t Digest() const { return hash_; }
  std::string HexDigest() const;

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace spar

#endif  // SPAR_BASE_HASH_H_
