// A daemon's metrics port (--metrics-host/--metrics-port), for Prometheus
// and Kubernetes probes:
//   GET /metrics  Prometheus text exposition (0.0.4) of the daemon's registry,
//                 refreshed just before each scrape;
//   GET /health   liveness: 200 "ok" while the process answers;
//   GET /readyz   readiness: 200 "ready", or 503 with the reason (loading,
//                 pipeline not connected, draining).
// HTTP is spar's own server (services/http/http_server.h, the OpenAI API
// port's too), not prometheus-cpp's civetweb Exposer, because the Exposer
// serves metrics only and the probes belong on the same port.
//
// Thread-safe; one I/O thread answers (scrapes and probes are few and
// small, and a slow client holds no thread).
#ifndef SPAR_SERVICES_METRICS_METRICS_HTTP_SERVER_H_
#define SPAR_SERVICES_METRICS_METRICS_HTTP_SERVER_H_

#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spar {
namespace http {
class HttpServer;
}

// Renders `registry` in the Prometheus text format.
std::string RenderPrometheusText(const prometheus::Registry& registry);

class MetricsHttpServer {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0 picks a free port
    // Called before each /metrics render (sets gauges); may be empty.
    std::function<void()> refresh;
    // OK when ready for traffic, else the reason /readyz reports. Empty:
    // always ready.
    std::function<absl::Status()> readiness;
  };

  // Binds and starts serving; the registry must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const prometheus::Registry* registry,
                                                                  Options options);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // Stops listening and joins the server's thread. Idempotent.
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<http::HttpServer> server_;
  int port_ = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_METRICS_HTTP_SERVER_H_
