// Security of the public API (the scheduler's gRPC port, and its HTTP port
// where the HTTP server reads api_keys()): optional TLS, optional client
// certificates (mutual TLS), optional API keys. All off by default; a
// deployment turns them on by flags with certificates and keys from files.
//
// Immutable after Create; thread-safe.
#ifndef SPAR_SERVICES_SECURITY_PUBLIC_PLANE_H_
#define SPAR_SERVICES_SECURITY_PUBLIC_PLANE_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "services/security/api_keys.h"
#include "services/security/tls_material.h"

namespace spar {

struct PublicPlaneOptions {
  // --tls-cert/--tls-key: serve TLS; --tls-ca: also require client
  // certificates signed by this CA.
  TlsFiles tls;
  std::string api_keys;      // --api-key (comma-separated)
  std::string api_key_file;  // --api-key-file
};

class PublicPlane {
 public:
  PublicPlane() = default;  // plaintext, no keys
  static absl::StatusOr<PublicPlane> Create(const PublicPlaneOptions& options);

  // For ServerBuilder::AddListeningPort.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  const ApiKeys& api_keys() const { return api_keys_; }
  bool tls() const { return !tls_.cert_chain.empty(); }
  bool client_certificates() const { return !tls_.root_certs.empty(); }
  // For the start-up log: what is on, never a secret.
  std::string Describe() const;

 private:
  TlsMaterial tls_;
  ApiKeys api_keys_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_PUBLIC_PLANE_H_
