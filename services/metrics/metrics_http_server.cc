#include "services/metrics/metrics_http_server.h"

#include <httplib.h>

#include <sstream>

#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"

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
  auto self = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  // Scrapes and probes are few and small: two threads are plenty, and a
  // slow client cannot hold them long.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(100);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which
  // would let a second daemon bind the same port and silently share it.
  server.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  auto refresh = options.refresh;
  server.Get("/metrics", [registry, refresh](const httplib::Request&, httplib::Response& res) {
    if (refresh) refresh();
    res.set_content(RenderPrometheusText(*registry), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  auto readiness = options.readiness;
  server.Get("/readyz", [readiness](const httplib::Request&, httplib::Response& res) {
    const absl::Status s = readiness ? readiness() : absl::OkStatus();
    if (s.ok()) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(absl::StrCat("not ready: ", s.message(), "\n"), "text/plain");
    }
  });
  // Anything thrown inside a handler becomes a 500, never a crash.
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content("internal error\n", "text/plain");
  });
  int port = -1;
  if (options.port == 0) {
    port = server.bind_to_any_port(options.host);
  } else if (server.bind_to_port(options.host, options.port)) {
    port = options.port;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", options.host, ":", options.port, " (in use, or a bad address)"));
  }
  self->port_ = port;
  self->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace spar
