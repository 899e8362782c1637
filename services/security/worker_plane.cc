#include "services/security/worker_plane.h"

#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/security/grpc_auth.h"

namespace spar {

absl::StatusOr<WorkerPlane> WorkerPlane::Create(const WorkerPlaneOptions& options) {
  WorkerPlane p;
  const bool any = !options.tls.cert.empty() || !options.tls.key.empty() || !options.tls.ca.empty();
  const bool all = !options.tls.cert.empty() && !options.tls.key.empty() && !options.tls.ca.empty();
  if (any && !all) {
    return absl::InvalidArgumentError(
        "--worker-tls-cert, --worker-tls-key and --worker-tls-ca go together (mutual TLS: a certificate, its key "
        "and the worker plane's CA)");
  }
  auto tls = LoadTlsMaterial(options.tls, "--worker-tls");
  if (!tls.ok()) return tls.status();
  p.tls_ = std::move(*tls);
  if (!options.server_name.empty() && !all) {
    return absl::InvalidArgumentError("--worker-tls-server-name needs the worker TLS flags");
  }
  p.server_name_ = options.server_name;
  if (!options.token_file.empty()) {
    std::ifstream in(options.token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::NotFoundError(absl::StrCat("--worker-token-file: cannot read ", options.token_file));
    }
    p.token_ = std::string(absl::StripAsciiWhitespace(line));
    auto check = ApiKeys::FromList({p.token_});
    if (!check.ok()) {
      return ApiKeys::ValidateKey(p.token_, absl::StrCat("--worker-token-file ", options.token_file, ": the token"));
    }
    p.token_check_ = std::move(*check);
  }
  return p;
}

std::shared_ptr<grpc::ServerCredentials> WorkerPlane::ServerCredentials() const {
  if (!mutual_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls_.root_certs;
  o.pem_key_cert_pairs.push_back({tls_.private_key, tls_.cert_chain});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> WorkerPlane::ChannelCredentials() const {
  if (!mutual_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls_.root_certs;
  o.pem_private_key = tls_.private_key;
  o.pem_cert_chain = tls_.cert_chain;
  return grpc::SslCredentials(o);
}

void WorkerPlane::AddChannelArguments(grpc::ChannelArguments* args) const {
  if (!server_name_.empty()) args->SetSslTargetNameOverride(server_name_);
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> WorkerPlane::Interceptors() const {
  return BearerTokenInterceptors(token_);
}

absl::Status WorkerPlane::CheckCaller(const grpc::ServerContextBase& ctx) const {
  absl::Status s = CheckGrpcAuthorization(token_check_, ctx);
  if (!s.ok()) return absl::UnauthenticatedError("this worker takes calls from its own plane only (worker token)");
  return s;
}

std::string WorkerPlane::Describe() const {
  std::string s = mutual_tls() ? "mutual TLS" : "plaintext";
  if (token()) absl::StrAppend(&s, ", worker token");
  return s;
}

namespace {

// Every plane ever set, the current one last. Older ones stay alive:
// channels made from them may still read them (in practice the plane is
// set once, at start).
struct PlaneRegistry {
  std::mutex mu;
  std::vector<std::unique_ptr<WorkerPlane>> planes;
};

PlaneRegistry& Registry() {
  static PlaneRegistry* registry = [] {
    auto* r = new PlaneRegistry();
    r->planes.push_back(std::make_unique<WorkerPlane>());  // plaintext until set
    return r;
  }();
  return *registry;
}

}  // namespace

void SetProcessWorkerPlane(WorkerPlane plane) {
  PlaneRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.planes.push_back(std::make_unique<WorkerPlane>(std::move(plane)));
}

const WorkerPlane& ProcessWorkerPlane() {
  PlaneRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return *r.planes.back();
}

}  // namespace spar
