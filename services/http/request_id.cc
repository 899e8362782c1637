#include "services/http/request_id.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/common/status_field.h"

namespace spar::http {

absl::StatusOr<std::string> ClientRequestId(absl::string_view header_value) {
  const absl::string_view id = absl::StripAsciiWhitespace(header_value);
  if (id.empty()) return std::string();
  auto bad = [](std::string why) {
    return WithField(absl::InvalidArgumentError(absl::StrCat("the X-Request-Id header ", why)), "X-Request-Id");
  };
  if (id.size() > kMaxRequestIdLength) {
    return bad(absl::StrCat("is ", id.size(), " characters long; at most ", kMaxRequestIdLength, " are allowed"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x21 || c > 0x7e) {
      return bad(absl::StrCat("may hold only printable ASCII characters (0x21-0x7E); byte ", i, " is 0x",
                              absl::Hex(c, absl::kZeroPad2)));
    }
  }
  return std::string(id);
}

std::string RandomRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32));
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

}  // namespace spar::http
