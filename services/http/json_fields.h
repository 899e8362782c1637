// Typed reads of a JSON request object's fields for the OpenAI API: JSON
// null means "absent" (the OpenAI clients send null for unset options), a
// value of the wrong type is an INVALID_ARGUMENT naming the field, and
// nothing throws.
#ifndef SPAR_SERVICES_HTTP_JSON_FIELDS_H_
#define SPAR_SERVICES_HTTP_JSON_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace spar::http {

using Json = nlohmann::ordered_json;

// "string", "number", "array", ... as a client would call the JSON type.
const char* JsonTypeName(const Json& value);

// INVALID_ARGUMENT "<field> must be <what>, got <type>" naming `field`.
absl::Status WrongType(absl::string_view field, absl::string_view what, const Json& got);

// The field's value, or nullptr when missing or null.
const Json* Find(const Json& object, absl::string_view key);

absl::StatusOr<std::optional<double>> GetNumber(const Json& object, absl::string_view key);
// Integers only (5, not 5.5 or "5"); values outside int64 are errors.
absl::StatusOr<std::optional<int64_t>> GetInt(const Json& object, absl::string_view key);
absl::StatusOr<std::optional<bool>> GetBool(const Json& object, absl::string_view key);
absl::StatusOr<std::optional<std::string>> GetString(const Json& object, absl::string_view key);

// A request body that must be a JSON object, nested at most
// ChatTemplate::kMaxJsonDepth levels (what walks it later recurses).
absl::StatusOr<Json> ParseJsonObjectBody(absl::string_view body);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_JSON_FIELDS_H_
