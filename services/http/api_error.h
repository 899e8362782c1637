// OpenAI-style errors: the HTTP status and the body
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// that the official clients turn into typed exceptions (BadRequestError,
// AuthenticationError, NotFoundError, RateLimitError, ...). One table maps
// spar's absl::Status codes onto them, as grpc_status.h does for gRPC.
#ifndef SPAR_SERVICES_HTTP_API_ERROR_H_
#define SPAR_SERVICES_HTTP_API_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "services/http/http_message.h"

namespace spar::http {

struct ApiError {
  int http_status = 500;
  std::string type;     // invalid_request_error, rate_limit_error, server_error
  std::string message;
  std::optional<std::string> param;  // the offending request field
  std::optional<std::string> code;   // machine-readable detail (model_not_found, ...)
};

// The mapping (status code -> HTTP status, type, code):
//   INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE -> 400 invalid_request_error
//   RESOURCE_EXHAUSTED with a field (the request itself can never fit) -> 400
//   RESOURCE_EXHAUSTED (queue full)                     -> 429 rate_limit_error, queue_full
//   UNAUTHENTICATED                                     -> 401 invalid_request_error, invalid_api_key
//   PERMISSION_DENIED                                   -> 403 invalid_request_error
//   NOT_FOUND                                           -> 404 invalid_request_error
//   ALREADY_EXISTS                                      -> 409 invalid_request_error, conflict
//   CANCELLED                                           -> 499 (client closed; nobody reads it)
//   UNAVAILABLE                                         -> 503 server_error, unavailable
//   DEADLINE_EXCEEDED                                   -> 504 server_error, timeout
//   anything else                                       -> 500 server_error, internal_error
// `param` is the field attached to the status (services/common/status_field.h).
ApiError ApiErrorFromStatus(const absl::Status& status);

// A 400 naming `param`.
ApiError InvalidRequest(std::string message, std::optional<std::string> param = std::nullopt);

// {"error": {...}} as JSON text.
std::string ApiErrorJson(const ApiError& error);

// The HTTP answer of an error: its status and JSON body.
HttpResponse ApiErrorResponse(const ApiError& error);
HttpResponse StatusResponse(const absl::Status& status);

// The errors the HTTP server answers itself (HttpServer::Options::
// error_response) in the same shape: type server_error from 500 on,
// invalid_request_error below.
HttpResponse ServerErrorResponse(int status, std::string message, std::string code);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_API_ERROR_H_
