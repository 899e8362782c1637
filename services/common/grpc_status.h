// The one mapping between absl::Status (library code) and grpc::Status (the
// wire). Both use the google.rpc.Code numbering, so codes map one to one;
// the message is carried unchanged.
#ifndef SPAR_SERVICES_COMMON_GRPC_STATUS_H_
#define SPAR_SERVICES_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace spar {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// absl::Status from a numeric code (as carried in worker.proto ErrorStatus);
// unknown numbers become UNKNOWN.
absl::Status StatusFromCode(int code, const std::string& message);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_GRPC_STATUS_H_
