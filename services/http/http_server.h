// spar's one HTTP/1.1 server (the OpenAI API port and every metrics
// port): event-driven, over Boost.Beast and Boost.Asio (Debian
// libboost-dev; header-only), HTTPS through asio::ssl over OpenSSL.
//
// `io_threads` threads run one io_context and serve any number of
// connections: nothing waits on a thread of its own, so a streamed answer
// (SSE) costs a socket and a little memory, not a thread, and slow or idle
// clients cost nothing but their socket. Handlers that may block (parsing
// a large body, rendering a chat template, tokenizing) run on a separate
// pool of `worker_threads` (RunOn::kWorkers), so the I/O threads never
// stall; the pool also bounds how many such requests are prepared at once
// (and so the memory they take).
//
// Per connection: the TLS handshake and the request header must arrive
// within `header_timeout`, the body within `body_timeout`, the next
// request on a kept-alive connection within `idle_timeout`; a write the
// client does not take within `write_timeout` (or more than
// `max_queued_write_bytes` waiting) ends it. Beyond `max_connections`
// open connections a new one is answered 503 and closed.
//
// Request bodies: at most `max_body_bytes` on the wire and after decoding
// (body_decoder.h: gzip / deflate, with a ratio cap), counted as they
// arrive (chunked bodies too), and refused with 413 as soon as they pass
// (a Content-Length that says so is refused before the body is read). A
// malformed request line, header or Content-Length (e.g. -1, two that
// differ, both Content-Length and Transfer-Encoding) is a 400 at once;
// a header block over `max_header_bytes` a 431. After such an error the
// connection is closed, lingering briefly so the client reads the answer.
//
// HTTP/1.0 requests are answered as HTTP/1.0: no chunked encoding (a
// stream is close-delimited), keep-alive only when asked for.
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_HTTP_SERVER_H_
#define SPAR_SERVICES_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/http/http_message.h"
#include "services/http/http_router.h"
#include "services/security/tls_material.h"

namespace spar::http {

struct ServerCore;

class HttpServer {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0 picks a free port
    // HTTPS when tls.cert is set; tls.ca also requires client certificates
    // signed by it (mutual TLS). Errors name the flags `tls_flag_prefix`-cert ...
    TlsFiles tls;
    std::string tls_flag_prefix = "--tls";
    int io_threads = 4;
    int worker_threads = 4;
    int max_connections = 8192;
    size_t max_header_bytes = 64 << 10;
    size_t max_body_bytes = 16 << 20;
    double max_decompression_ratio = 200;
    absl::Duration header_timeout = absl::Seconds(10);
    absl::Duration body_timeout = absl::Seconds(60);
    absl::Duration idle_timeout = absl::Seconds(30);
    absl::Duration write_timeout = absl::Seconds(30);
    size_t max_queued_write_bytes = 4 << 20;
    // The body of the errors the server itself answers (400, 404, 405, 408,
    // 413, 415, 431, 500, 503): `code` is a short machine name
    // ("request_too_large"). Default: the message as text/plain.
    std::function<HttpResponse(int status, std::string message, std::string code)> error_response;
    // Names the server in errors ("cannot listen on ... (HTTP API)").
    std::string name = "HTTP";
  };

  HttpServer(Options options, HttpRouter router);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, raises the process's open-file limit to its hard limit (the
  // connections need descriptors) and serves; returns the port.
  // UNAVAILABLE when the port cannot be bound, INVALID_ARGUMENT naming the
  // flag when the TLS files are unusable.
  absl::StatusOr<int> Start();
  // Stops accepting, disconnects every client (their handlers' on_gone
  // run), waits for the worker pool and the I/O threads. Idempotent.
  void Stop();

  int port() const { return port_; }
  // Connections open now (including ones being refused with 503).
  int open_connections() const;
  // The connection limit in effect: max_connections, lowered when the
  // open-file limit cannot hold that many.
  int max_connections() const;

 private:
  std::shared_ptr<ServerCore> core_;
  int port_ = 0;
  bool started_ = false;
};

// A response of the server's own errors, from Options::error_response.
HttpResponse PlainTextError(int status, std::string message, std::string code);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_HTTP_SERVER_H_
