#include "services/http/api_error.h"

#include "nlohmann/json.hpp"
#include "services/common/status_field.h"

namespace spar::http {

ApiError ApiErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = FieldOf(status);
  e.type = "invalid_request_error";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kResourceExhausted:
      if (e.param) {
        e.http_status = 400;
      } else {
        e.http_status = 429;
        e.type = "rate_limit_error";
        e.code = "queue_full";
      }
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case absl::StatusCode::kAlreadyExists:
      e.http_status = 409;
      e.code = "conflict";
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      e.code = "cancelled";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      e.code = "timeout";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

ApiError InvalidRequest(std::string message, std::optional<std::string> param) {
  ApiError e;
  e.http_status = 400;
  e.type = "invalid_request_error";
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

std::string ApiErrorJson(const ApiError& error) {
  nlohmann::ordered_json body;
  nlohmann::ordered_json& e = body["error"];
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param ? nlohmann::ordered_json(*error.param) : nlohmann::ordered_json(nullptr);
  e["code"] = error.code ? nlohmann::ordered_json(*error.code) : nlohmann::ordered_json(nullptr);
  // Messages may quote client bytes; never let invalid UTF-8 throw.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

HttpResponse ApiErrorResponse(const ApiError& error) {
  HttpResponse r;
  r.status = error.http_status;
  r.body = ApiErrorJson(error);
  return r;
}

HttpResponse StatusResponse(const absl::Status& status) { return ApiErrorResponse(ApiErrorFromStatus(status)); }

HttpResponse ServerErrorResponse(int status, std::string message, std::string code) {
  ApiError e;
  e.http_status = status;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.message = std::move(message);
  if (!code.empty()) e.code = std::move(code);
  return ApiErrorResponse(e);
}

}  // namespace spar::http
