#include "services/common/status_field.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace spar {
namespace {

// A type URL in the form absl::Status payloads use; never sent anywhere.
constexpr absl::string_view kFieldPayload = "type.spar.dev/spar.RequestField";

}  // namespace

absl::Status WithField(absl::Status status, absl::string_view field) {
  if (!status.ok()) status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

absl::Status InvalidField(absl::string_view field, absl::string_view rule, absl::string_view got) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", rule, ", got ", got)), field);
}

std::optional<std::string> FieldOf(const absl::Status& status) {
  auto payload = status.GetPayload(kFieldPayload);
  if (!payload) return std::nullopt;
  return std::string(*payload);
}

}  // namespace spar
