// The API keys a server accepts: clients send "Authorization: Bearer <key>"
// (an HTTP header, or the gRPC metadata key "authorization"), as OpenAI
// clients and vLLM's --api-key do. No keys configured = no authentication.
//
// Pure policy, no transport: the gRPC adapter (grpc_auth.h) and the HTTP
// server read the header and ask CheckAuthorization. Thread-safe after
// construction (immutable).
#ifndef SPAR_SERVICES_SECURITY_API_KEYS_H_
#define SPAR_SERVICES_SECURITY_API_KEYS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {

class ApiKeys {
 public:
  // Longest key accepted (a header line must stay small).
  static constexpr size_t kMaxKeyBytes = 1024;

  ApiKeys() = default;  // authentication off

  // `keys`: comma-separated (the --api-key flag or SPAR_API_KEY); `file`:
  // one key per line, blank lines and lines starting with '#' ignored (the
  // --api-key-file flag, e.g. a mounted Kubernetes Secret, which keeps the
  // key out of the process list). Either may be empty. A key must be
  // 1..kMaxKeyBytes printable ASCII characters without spaces; errors name
  // the flag and the key's position, never the key.
  static absl::StatusOr<ApiKeys> Load(absl::string_view keys, const std::string& file);
  static absl::StatusOr<ApiKeys> FromList(std::vector<std::string> keys);
  // The syntax check Load applies; `where` names the key in the error.
  static absl::Status ValidateKey(absl::string_view key, absl::string_view where);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // OK when `authorization` is "Bearer <key>" (scheme case-insensitive) for
  // a configured key, or when authentication is off. Otherwise
  // UNAUTHENTICATED; the message never repeats what the client sent.
  absl::Status CheckAuthorization(absl::string_view authorization) const;

  // Whether `key` is one of the keys. Every configured key is compared, in
  // constant time each (secret_compare.h), whichever matches.
  bool Matches(absl::string_view key) const;

 private:
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  std::vector<std::string> keys_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_API_KEYS_H_
