// Which request field a status is about. Validation errors carry the field
// as a status payload (besides naming it in the message) so each transport
// can report it its own way: the gRPC adapter keeps the message, the OpenAI
// HTTP adapter fills the error body's "param" with it.
#ifndef SPAR_SERVICES_COMMON_STATUS_FIELD_H_
#define SPAR_SERVICES_COMMON_STATUS_FIELD_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace spar {

// `status` with `field` attached (no-op for OK).
absl::Status WithField(absl::Status status, absl::string_view field);

// INVALID_ARGUMENT "<field> <rule>, got <got>" with the field attached.
absl::Status InvalidField(absl::string_view field, absl::string_view rule, absl::string_view got);

// The attached field, if any.
std::optional<std::string> FieldOf(const absl::Status& status);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_STATUS_FIELD_H_
