#include "services/common/grpc_status.h"

#include <string>

namespace spar {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return StatusFromCode(static_cast<int>(status.error_code()), status.error_message());
}

absl::Status StatusFromCode(int code, const std::string& message) {
  // google.rpc.Code: OK = 0 ... UNAUTHENTICATED = 16.
  if (code < 0 || code > 16) return absl::UnknownError(message);
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace spar
