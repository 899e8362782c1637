#include "services/security/api_keys.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/security/secret_compare.h"

namespace spar {
absl::Status ApiKeys::ValidateKey(absl::string_view key, absl::string_view where) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(where, " is empty"));
  if (key.size() > ApiKeys::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is longer than ", ApiKeys::kMaxKeyBytes, " bytes"));
  }
  for (char c : key) {
    // Printable ASCII without space: what survives an HTTP header and gRPC
    // metadata unchanged.
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " holds a space, a control or a non-ASCII character (keys are printable ASCII)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ApiKeys> ApiKeys::FromList(std::vector<std::string> keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::Status s = ValidateKey(keys[i], absl::StrCat("API key ", i + 1));
    if (!s.ok()) return s;
  }
  return ApiKeys(std::move(keys));
}

absl::StatusOr<ApiKeys> ApiKeys::Load(absl::string_view keys, const std::string& file) {
  std::vector<std::string> list;
  if (!keys.empty()) {
    int i = 0;
    for (absl::string_view k : absl::StrSplit(keys, ',')) {
      ++i;
      absl::Status s = ValidateKey(k, absl::StrCat("--api-key: key ", i));
      if (!s.ok()) return s;
      list.emplace_back(k);
    }
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("--api-key-file: cannot read ", file));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      absl::string_view k = absl::StripAsciiWhitespace(line);
      if (k.empty() || k[0] == '#') continue;
      absl::Status s = ValidateKey(k, absl::StrCat("--api-key-file ", file, ": the key on line ", line_no));
      if (!s.ok()) return s;
      list.emplace_back(k);
    }
    if (list.empty()) return absl::InvalidArgumentError(absl::StrCat("--api-key-file: ", file, " holds no key"));
  }
  return ApiKeys(std::move(list));
}

bool ApiKeys::Matches(absl::string_view key) const {
  bool found = false;
  for (const std::string& k : keys_) found |= SecretsEqual(k, key);  // no early exit: same work whichever matches
  return found;
}

absl::Status ApiKeys::CheckAuthorization(absl::string_view authorization) const {
  if (!enabled()) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError("an API key is required: send the header \"Authorization: Bearer <key>\"");
  }
  absl::string_view value = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(value, kScheme)) {
    return absl::UnauthenticatedError("the Authorization header must be \"Bearer <key>\"");
  }
  value.remove_prefix(kScheme.size());
  value = absl::StripLeadingAsciiWhitespace(value);
  if (!Matches(value)) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

}  // namespace spar
