// The OpenAI-compatible HTTP API of spar-scheduler, a thin cpp-httplib
// adapter over the pure request (openai_request.h) and response
// (openai_response.h) layers and Scheduler::Submit:
//
//   POST /v1/completions, /v1/chat/completions   (stream: SSE, data: [DONE])
//   GET  /v1/models, /v1/models/{id}
//   GET  /health                                  liveness: 200 while the process serves
// plus GET routes other parts of the daemon add (AddGet: e.g. /readyz).
//
// Served over HTTPS when HttpServerOptions::tls names a certificate.
//
// Errors are OpenAI-shaped (api_error.h) with their status codes: 400 bad
// field, 401 API key, 404 unknown model or route, 405 wrong method, 413
// body over --max-body-bytes, 429 queue full, 503 not ready or draining,
// 500 internal. /v1/* needs the API key when one is set; /health and added
// routes never do (probes).
//
// Each request runs on one of `threads` handler threads: a streamed
// response writes chunks as updates arrive; a non-streamed one waits for
// the end. Either way a client that disconnects aborts its requests in the
// scheduler, which frees their KV blocks.
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_OPENAI_SERVER_H_
#define SPAR_SERVICES_HTTP_OPENAI_SERVER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/http/chat_output.h"
#include "services/scheduler/scheduler.h"
#include "services/security/api_keys.h"
#include "services/security/tls_material.h"
#include "text/chat_template.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace spar::http {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0: pick a free port
  // Keys /v1/* requires (services/security/api_keys.h, shared with the
  // gRPC API); null or none configured: no authentication.
  const ApiKeys* api_keys = nullptr;
  // HTTPS when tls.cert is set (the public plane's --tls-cert/--tls-key,
  // checked by PublicPlane::Create); tls.ca also requires client
  // certificates signed by it. Debian's cpp-httplib is built with OpenSSL.
  TlsFiles tls;
  size_t max_body_bytes = 16 << 20;
  int threads = 256;      // concurrent requests being handled
  int max_prompts = 64;   // prompts in one /v1/completions request
  // Chat output parsers (--reasoning-parser, --tool-call-parser).
  ChatParsers chat_parsers;
  // How often a waiting handler checks its client is still there.
  absl::Duration poll_interval = absl::Milliseconds(50);
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
  OpenAiHttpServer(Scheduler* scheduler, const ChatTemplate* chat_template, HttpServerOptions options);
  ~OpenAiHttpServer();
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  // An extra unauthenticated GET route (readiness, ...). Before Start().
  void AddGet(const std::string& path, std::function<Reply()> handler);

  // While draining, new generation requests get 503; running ones finish.
  void set_draining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }
  // Generation requests being handled now.
  int active_requests() const { return active_; }

  // Binds and serves on a background thread; returns the port.
  absl::StatusOr<int> Start();
  // Stops accepting and waits for the handler threads. Requests still
  // waiting on the scheduler end when the scheduler stops: stop it first.
  void Stop();

 private:
  void HandleGenerate(bool chat, const httplib::Request& req, httplib::Response& res);
  void HandleModels(const httplib::Request& req, httplib::Response& res);

  Scheduler* const scheduler_;
  const ChatTemplate* const chat_template_;
  const HttpServerOptions options_;
  const int64_t created_;
  std::unique_ptr<httplib::Server> server_;
  std::vector<std::pair<std::string, std::function<Reply()>>> extra_gets_;
  std::thread thread_;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OPENAI_SERVER_H_
