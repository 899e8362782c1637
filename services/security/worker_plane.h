// Security of the worker plane: the scheduler's calls to the stage workers
// and each stage's stream to the next. Plaintext by default (one host, a
// trusted network); with --worker-tls-cert/-key/-ca every daemon of the
// plane serves and dials mutual TLS with certificates of one plane CA, so
// only holders of a plane certificate (the scheduler and the other stages)
// can connect to a worker, let alone send it micro-batches. A shared token
// (--worker-token-file) adds, or without certificates replaces, that check:
// each call carries it and workers refuse calls without it.
//
// A daemon configures its plane once at start (SetProcessWorkerPlane)
// before it makes any worker channel or server; CreateWorkerChannel
// (services/common/daemon.h) and the worker's listener read it. Immutable
// after that; thread-safe.
#ifndef SPAR_SERVICES_SECURITY_WORKER_PLANE_H_
#define SPAR_SERVICES_SECURITY_WORKER_PLANE_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include "absl/status/statusor.h"
#include "services/security/api_keys.h"
#include "services/security/tls_material.h"

namespace spar {

struct WorkerPlaneOptions {
  TlsFiles tls;             // all three or none: mutual TLS needs a cert, its key and the plane CA
  std::string server_name;  // name the workers' certificates carry (default: the host of the address)
  std::string token_file;   // first line: the shared token
};

class WorkerPlane {
 public:
  WorkerPlane() = default;  // plaintext, no token
  static absl::StatusOr<WorkerPlane> Create(const WorkerPlaneOptions& options);

  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // The TLS server-name override (when set).
  void AddChannelArguments(grpc::ChannelArguments* args) const;
  // Adds the token to every call of a channel (none without a token).
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> Interceptors() const;
  // Server side: OK, or UNAUTHENTICATED when a token is configured and the
  // call does not carry it. (Certificates are checked by TLS itself.)
  absl::Status CheckCaller(const grpc::ServerContextBase& ctx) const;

  bool mutual_tls() const { return !tls_.cert_chain.empty(); }
  bool token() const { return !token_.empty(); }
  std::string Describe() const;

 private:
  TlsMaterial tls_;
  std::string server_name_;
  std::string token_;
  ApiKeys token_check_;
};

// The process's worker plane (plaintext until set).
void SetProcessWorkerPlane(WorkerPlane plane);
const WorkerPlane& ProcessWorkerPlane();

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_WORKER_PLANE_H_
