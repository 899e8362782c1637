#include "services/common/health_client.h"

#include <chrono>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "services/common/daemon.h"
#include "services/common/grpc_status.h"

namespace spar {

absl::Status CheckHealth(const std::string& address, const std::string& service, absl::Duration deadline) {
  auto stub = grpc::health::v1::Health::NewStub(CreatePublicChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = stub->Check(&ctx, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(address, " is not serving \"", service, "\""));
  }
  return absl::OkStatus();
}

absl::Status WaitForServing(const std::string& address, const std::string& service, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  absl::Status last;
  while (absl::Now() < until) {
    last = CheckHealth(address, service, absl::Seconds(1));
    if (last.ok()) return last;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(address, " not serving after ", absl::FormatDuration(timeout), ": ", last.message()));
}

}  // namespace spar
