#include "services/security/secret_compare.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace spar {

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  // Equal digests of different inputs would need a SHA-256 collision.
  return CRYPTO_memcmp(da, db, SHA256_DIGEST_LENGTH) == 0;
}

}  // namespace spar
