#include "services/metrics/metrics_port.h"

#include "absl/strings/str_cat.h"
#include "services/common/daemon.h"

namespace spar {

void MetricsPortFlags::Register(ArgParser* args, int64_t default_port) {
  port = default_port;
  args->AddString("metrics-host", &host, "address of the HTTP metrics port: /metrics, /health, /readyz (default 0.0.0.0)");
  args->AddInt("metrics-port", &port,
               absl::StrCat("HTTP metrics port (default ", default_port, "; 0 picks a free port, -1 turns it off)"));
  args->AddString("metrics-port-file", &port_file, "write the metrics port here once listening");
}

absl::Status MetricsPortFlags::Validate() const {
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-port must be -1 (off) or in [0, 65535], got ", port));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsPort(const MetricsPortFlags& flags,
                                                                    const prometheus::Registry* registry,
                                                                    std::function<void()> refresh,
                                                                    std::function<absl::Status()> readiness) {
  if (absl::Status s = flags.Validate(); !s.ok()) return s;
  if (flags.port < 0) return std::unique_ptr<MetricsHttpServer>();
  MetricsHttpServer::Options o;
  o.host = flags.host;
  o.port = static_cast<int>(flags.port);
  o.refresh = std::move(refresh);
  o.readiness = std::move(readiness);
  auto server = MetricsHttpServer::Start(registry, std::move(o));
  if (!server.ok()) return server.status();
  if (!flags.port_file.empty()) {
    if (absl::Status s = WritePortFile(flags.port_file, (*server)->port()); !s.ok()) return s;
  }
  return server;
}

}  // namespace spar
