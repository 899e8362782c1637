// What an HTTP handler sees of a request, and how it answers: the
// vocabulary between the server (http_server.h) and the APIs on it
// (OpenAI's, the metrics port's), free of any HTTP library's types.
#ifndef SPAR_SERVICES_HTTP_HTTP_MESSAGE_H_
#define SPAR_SERVICES_HTTP_HTTP_MESSAGE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace spar::http {

// Header fields in arrival order; names compare case-insensitively.
class HttpHeaders {
 public:
  void Add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  // The first field named `name`; "" when there is none.
  absl::string_view Get(absl::string_view name) const;
  bool Has(absl::string_view name) const;
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target before any '?'
  std::string query;   // after the '?', undecoded
  int version = 11;    // 10: HTTP/1.0, 11: HTTP/1.1
  HttpHeaders headers;
  std::string body;  // decoded (Content-Encoding undone), at most the server's limit
  // What a route's trailing '*' matched (percent-decoded), e.g. the model
  // id of /v1/models/*.
  std::string path_rest;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // besides Content-Type, Content-Length, Connection
};

// A response of `status` with `body` of `content_type`.
inline HttpResponse MakeResponse(int status, std::string body, std::string content_type = "application/json") {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

// The answer to one request, from any thread. Either Send once, or
// StartStream, Write any number of times, EndStream. A stream is chunked
// for an HTTP/1.1 client and close-delimited for an HTTP/1.0 one.
//
// Calls made from one thread take effect in the order made; tasks given
// to Post run on the connection's strand, one at a time and in order with
// those calls, so a handler's state touched only from its tasks needs no
// lock. Once the connection is gone, calls do nothing and tasks are
// dropped.
//
// Thread-safe.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;

  virtual void Send(HttpResponse response) = 0;
  // `head`'s status, content type and headers (its body, if any, is the
  // stream's first bytes).
  virtual void StartStream(HttpResponse head) = 0;
  // A client that falls too far behind (the server's write queue limit) or
  // stops reading (write timeout) is disconnected.
  virtual void Write(std::string data) = 0;
  virtual void EndStream() = 0;

  virtual void Post(std::function<void()> task) = 0;

  // Keeps `state` alive until the response is complete or the client is
  // gone, and calls `on_gone` (on the connection's strand) in the second
  // case: a client that disconnects (or a server that stops) before the
  // response is complete. False, calling nothing, when the client is
  // already gone.
  virtual bool Attach(std::shared_ptr<void> state, std::function<void()> on_gone) = 0;
  virtual bool gone() const = 0;
};

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpResponder> responder)>;

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_HTTP_MESSAGE_H_
