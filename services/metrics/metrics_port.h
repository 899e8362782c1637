// The metrics-port flags every daemon shares, and starting the port from
// them: --metrics-host, --metrics-port (-1 turns the port off, 0 picks a
// free one), --metrics-port-file (the chosen port, for supervisors and
// tests); each with its SPAR_* environment twin.
#ifndef SPAR_SERVICES_METRICS_METRICS_PORT_H_
#define SPAR_SERVICES_METRICS_METRICS_PORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "services/common/args.h"
#include "services/metrics/metrics_http_server.h"

namespace spar {

struct MetricsPortFlags {
  std::string host = "0.0.0.0";
  int64_t port = -1;
  std::string port_file;

  // Adds the three flags; `default_port` is the daemon's own default.
  void Register(ArgParser* args, int64_t default_port);
  // INVALID_ARGUMENT naming the flag when out of range.
  absl::Status Validate() const;
};

// Starts the metrics port described by `flags` and writes its port file.
// Returns null (and OK) when the port is off (--metrics-port -1).
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsPort(const MetricsPortFlags& flags,
                                                                    const prometheus::Registry* registry,
                                                                    std::function<void()> refresh,
                                                                    std::function<absl::Status()> readiness);

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_METRICS_PORT_H_
