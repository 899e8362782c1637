#include "services/security/public_plane.h"

#include "absl/strings/str_cat.h"

namespace spar {

absl::StatusOr<PublicPlane> PublicPlane::Create(const PublicPlaneOptions& options) {
  PublicPlane p;
  auto tls = LoadTlsMaterial(options.tls, "--tls");
  if (!tls.ok()) return tls.status();
  if (!tls->root_certs.empty() && tls->cert_chain.empty()) {
    return absl::InvalidArgumentError("--tls-ca (client certificates) needs --tls-cert and --tls-key");
  }
  p.tls_ = std::move(*tls);
  auto keys = ApiKeys::Load(options.api_keys, options.api_key_file);
  if (!keys.ok()) return keys.status();
  p.api_keys_ = std::move(*keys);
  return p;
}

std::shared_ptr<grpc::ServerCredentials> PublicPlane::ServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(client_certificates()
                                          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  o.pem_root_certs = tls_.root_certs;
  o.pem_key_cert_pairs.push_back({tls_.private_key, tls_.cert_chain});
  return grpc::SslServerCredentials(o);
}

std::string PublicPlane::Describe() const {
  std::string s = tls() ? (client_certificates() ? "TLS with client certificates" : "TLS") : "plaintext";
  absl::StrAppend(&s, api_keys_.enabled() ? absl::StrCat(", ", api_keys_.size(), " API key(s)") : ", no API key");
  return s;
}

}  // namespace spar
