#include "services/metrics/metrics_http_server.h"

#include <prometheus/text_serializer.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "services/http/http_server.h"

namespace spar {

std::string RenderPrometheusText(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const prometheus::Registry* registry,
                                                                            Options options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", options.port, " is outside [0, 65535]"));
  }
  using http::HttpRequest;
  using http::MakeResponse;
  http::HttpRouter router;
  router.HandleSimple("GET", "/metrics", [registry, refresh = options.refresh](const HttpRequest&) {
    if (refresh) refresh();
    return MakeResponse(200, RenderPrometheusText(*registry), "text/plain; version=0.0.4; charset=utf-8");
  });
  router.HandleSimple("GET", "/health", [](const HttpRequest&) { return MakeResponse(200, "ok\n", "text/plain"); });
  router.HandleSimple("GET", "/readyz", [readiness = options.readiness](const HttpRequest&) {
    const absl::Status s = readiness ? readiness() : absl::OkStatus();
    if (s.ok()) return MakeResponse(200, "ready\n", "text/plain");
    return MakeResponse(503, absl::StrCat("not ready: ", s.message(), "\n"), "text/plain");
  });
  http::HttpServer::Options o;
  o.host = options.host;
  o.port = options.port;
  o.name = "metrics";
  // Scrapes and probes are few and small, and answered on the I/O thread.
  o.io_threads = 1;
  o.worker_threads = 0;
  o.max_connections = 256;
  o.max_body_bytes = 64 << 10;
  o.header_timeout = o.body_timeout = o.write_timeout = absl::Seconds(5);
  auto self = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  self->server_ = std::make_unique<http::HttpServer>(std::move(o), std::move(router));
  auto port = self->server_->Start();
  if (!port.ok()) return port.status();
  self->port_ = *port;
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (server_) server_->Stop();
}

}  // namespace spar
