// API keys over gRPC: the server side reads the "authorization" metadata of
// a call ("Bearer <key>"), the client side adds it to every call of a
// channel through an interceptor, so call sites stay unchanged.
#ifndef SPAR_SERVICES_SECURITY_GRPC_AUTH_H_
#define SPAR_SERVICES_SECURITY_GRPC_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/server_context.h>
#include <grpcpp/support/client_interceptor.h>

#include "absl/status/status.h"
#include "services/security/api_keys.h"

namespace spar {

// OK, or UNAUTHENTICATED when `keys` are enabled and the call does not
// carry one of them.
absl::Status CheckGrpcAuthorization(const ApiKeys& keys, const grpc::ServerContextBase& ctx);

// Interceptor factories that add "authorization: Bearer <token>" to every
// call (empty vector for an empty token), for
// grpc::experimental::CreateCustomChannelWithInterceptors.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> BearerTokenInterceptors(
    const std::string& token);

}  // namespace spar

#endif  // SPAR_SERVICES_SECURITY_GRPC_AUTH_H_
