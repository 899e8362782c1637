#include "services/http/json_fields.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "services/common/status_field.h"
#include "text/chat_template.h"
#include "text/json_depth.h"

namespace spar::http {

const char* JsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

absl::Status WrongType(absl::string_view field, absl::string_view what, const Json& got) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " must be ", what, ", got ", JsonTypeName(got))),
                   field);
}

const Json* Find(const Json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> GetNumber(const Json& object, absl::string_view key) {
  const Json* v = Find(object, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  return std::optional<double>(v->get<double>());
}

absl::StatusOr<std::optional<int64_t>> GetInt(const Json& object, absl::string_view key) {
  const Json* v = Find(object, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidField(key, "must fit a signed 64-bit integer", absl::StrCat(u));
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (!v->is_number_integer()) return WrongType(key, "an integer", *v);
  return std::optional<int64_t>(v->get<int64_t>());
}

absl::StatusOr<std::optional<bool>> GetBool(const Json& object, absl::string_view key) {
  const Json* v = Find(object, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::string>> GetString(const Json& object, absl::string_view key) {
  const Json* v = Find(object, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(key, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<Json> ParseJsonObjectBody(absl::string_view body) {
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the request body is not valid JSON");
  // Copying or dumping nlohmann JSON recurses: refuse what could overflow
  // the stack of whatever walks the body later (text/json_depth.h).
  if (JsonDepth(j, ChatTemplate::kMaxJsonDepth) > ChatTemplate::kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests more than ", ChatTemplate::kMaxJsonDepth, " levels deep"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("the request body must be a JSON object, got ", JsonTypeName(j)));
  }
  return j;
}

}  // namespace spar::http
