// spar-scheduler's HTTP API port: the OpenAI-compatible API on spar's
// HTTP server (http_server.h), over the pure request (openai_request.h)
// and response (openai_response.h) layers and Scheduler::Submit:
//
//   POST /v1/completions, /v1/chat/completions   (stream: SSE, data: [DONE])
//   GET  /v1/models, /v1/models/{id}
//   GET  /health                                  liveness: 200 while the process serves
// plus GET routes other parts of the daemon add (AddGet: e.g. /readyz).
// Another API joins the port as one more route in Start (a handler of
// HttpRequest + HttpResponder, e.g. over GenerationRelay).
//
// Errors are OpenAI-shaped (api_error.h) with their status codes: 400 bad
// field or malformed request, 401 API key, 404 unknown model or route,
// 405 wrong method, 408 request too slow, 413 body over --max-body-bytes
// (after decompression), 415 unknown Content-Encoding, 429 queue full,
// 431 header too large, 503 not ready, draining or too many connections,
// 500 internal. /v1/* needs the API key when one is set; /health and added
// routes never do (probes).
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_OPENAI_SERVER_H_
#define SPAR_SERVICES_HTTP_OPENAI_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/http/chat_output.h"
#include "services/http/http_server.h"
#include "services/scheduler/scheduler.h"
#include "services/security/api_keys.h"
#include "text/chat_template.h"

namespace spar::http {

struct OpenAiServerOptions {
  // Address, TLS (the public plane's --tls-cert/--tls-key/--tls-ca), I/O
  // and worker threads, connection and body limits, timeouts.
  HttpServer::Options http;
  // Keys /v1/* requires (services/security/api_keys.h, shared with the
  // gRPC API); null or none configured: no authentication.
  const ApiKeys* api_keys = nullptr;
  int max_prompts = 64;  // prompts in one /v1/completions request
  // Chat output parsers (--reasoning-parser, --tool-call-parser).
  ChatParsers chat_parsers;
};

class OpenAiHttpServer {
 public:
  struct Reply {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
  };

  // `scheduler`, `chat_template` (may be null: chat requests are then
  // refused) and options.api_keys must outlive the server.
  OpenAiHttpServer(Scheduler* scheduler, const ChatTemplate* chat_template, OpenAiServerOptions options);
  ~OpenAiHttpServer();
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  // An extra unauthenticated GET route (readiness, ...), answered on an
  // I/O thread (it must not block). Before Start().
  void AddGet(const std::string& path, std::function<Reply()> handler);

  // While draining, new generation requests get 503; running ones finish.
  void set_draining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }
  // Generation requests being answered now.
  int active_requests() const { return active_; }
  // Open connections (streams, idle keep-alive ones, ...).
  int open_connections() const { return server_ ? server_->open_connections() : 0; }

  // Binds and serves; returns the port.
  absl::StatusOr<int> Start();
  // Stops accepting and disconnects every client (their requests are
  // cancelled). The scheduler must still be there.
  void Stop();

 private:
  HttpResponse Models(const HttpRequest& request) const;

  Scheduler* const scheduler_;
  const ChatTemplate* const chat_template_;
  const OpenAiServerOptions options_;
  const int64_t created_;
  std::vector<std::pair<std::string, std::function<Reply()>>> extra_gets_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OPENAI_SERVER_H_
