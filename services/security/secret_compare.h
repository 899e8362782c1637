// Comparing secrets (API keys, the worker-plane token) without telling an
// attacker, through the time a comparison takes, how much of a guess was
// right or how long the secret is.
#ifndef SPAR_SERVICES_SECURITY_SECRET_COMPARE_H_
#define SPAR_SERVICES_SECURITY_SECRET_COMPARE_H_

#include "absl/strings/string_view.h"

namespace spar {

// True when `a` and `b` are equal. Both are hashed (SHA-256) and the
// digests compared with OpenSSL's CRYPTO_memcmp, so the time depends only
// on the two lengths, never on where they first differ; a plain == or
// memcmp stops at the first differing byte, which leaks a key byte by byte.
bool SecretsEqual(absl::string_view a, absl::string_view b);

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_SECRET_COMPARE_H_
