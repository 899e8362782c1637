// Which handler answers a request: method + path -> handler, the small
// router every API on an HTTP port registers with (OpenAI's routes, the
// probes, the metrics port; an Anthropic /v1/messages adapter is one more
// Handle call).
//
//   path "/v1/models"    that path exactly
//   path "/v1/models/*"  any non-empty rest, handed over percent-decoded
//                        in HttpRequest::path_rest
// A path that has routes, but none for the request's method, is a 405
// (with the methods it has); a path without routes a 404. Guards run
// before routing on every request under their prefix (API keys: an
// unknown /v1/ route without a key is a 401, not a 404).
//
// Handlers run on an I/O thread (RunOn::kIoThread: they must not block:
// probes, metrics) or on the server's worker pool (kWorkers: parsing big
// bodies, chat templates, tokenizing), so slow work never holds up the
// connections.
//
// Thread-compatible: built before the server starts, read-only after.
#ifndef SPAR_SERVICES_HTTP_HTTP_ROUTER_H_
#define SPAR_SERVICES_HTTP_HTTP_ROUTER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/http/http_message.h"

namespace spar::http {

enum class RunOn { kIoThread, kWorkers };

class HttpRouter {
 public:
  struct Route {
    std::string method;
    std::string path;
    HttpHandler handler;
    RunOn run_on = RunOn::kIoThread;
  };
  struct Match {
    const Route* route = nullptr;  // null: no route for this method and path
    std::string path_rest;
    std::string allow;  // no route: the path's methods ("GET, POST"); empty for an unknown path
  };
  using Guard = std::function<std::optional<HttpResponse>(const HttpRequest&)>;
  using SimpleHandler = std::function<HttpResponse(const HttpRequest&)>;

  void Handle(std::string method, std::string path, HttpHandler handler, RunOn run_on = RunOn::kIoThread);
  // A handler whose whole answer is computed at once.
  void HandleSimple(std::string method, std::string path, SimpleHandler handler, RunOn run_on = RunOn::kIoThread);
  // `guard` answers instead of the route when it returns a response.
  void AddGuard(std::string path_prefix, Guard guard);

  Match Find(absl::string_view method, absl::string_view path) const;
  // The first guard's refusal of `request`, if any.
  std::optional<HttpResponse> Refusal(const HttpRequest& request) const;

 private:
  std::vector<Route> routes_;
  std::vector<std::pair<std::string, Guard>> guards_;
};

// "%2F" -> "/", "+" stays; a malformed escape stays as it is.
std::string PercentDecode(absl::string_view text);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_HTTP_ROUTER_H_
