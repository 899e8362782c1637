// TLS certificates and keys read from PEM files, checked before a server
// starts: gRPC itself only says "could not start" when a file is wrong, so
// every problem (a missing file, no certificate in it, a key that does not
// belong to the certificate) is reported here naming the flag and the file.
#ifndef SPAR_SERVICES_SECURITY_TLS_MATERIAL_H_
#define SPAR_SERVICES_SECURITY_TLS_MATERIAL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {

// Paths as given on the command line; `flag_prefix` names the flags in
// errors ("--tls" -> "--tls-cert", "--tls-key", "--tls-ca").
struct TlsFiles {
  std::string cert;  // PEM certificate chain, leaf first
  std::string key;   // PEM private key of the leaf
  std::string ca;    // PEM CA certificates: verifies the peer
};

struct TlsMaterial {
  std::string cert_chain;
  std::string private_key;
  std::string root_certs;
};

// Reads the files that are set. cert and key go together; the key must
// match the certificate; ca, when set, must hold at least one certificate.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files, absl::string_view flag_prefix);

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_TLS_MATERIAL_H_
