#include "base/hash.h"

#include <cstdio>

namespace spar {

std::string Fnv1a64::HexDigest() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash_));
  return buf;
}

}  // namespace spar
