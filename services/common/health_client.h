// grpc.health.v1 client helpers: readiness waits for `spar cluster`, the
// CLI and tests.
#ifndef SPAR_SERVICES_COMMON_HEALTH_CLIENT_H_
#define SPAR_SERVICES_COMMON_HEALTH_CLIENT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace spar {

// One Check of `service` ("" = the whole server): OK when SERVING,
// UNAVAILABLE when NOT_SERVING or unreachable.
absl::Status CheckHealth(const std::string& address, const std::string& service,
                         absl::Duration deadline = absl::Seconds(2));

// Polls CheckHealth until SERVING or `timeout`.
absl::Status WaitForServing(const std::string& address, const std::string& service, absl::Duration timeout);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_HEALTH_CLIENT_H_
