// The client's X-Request-Id header, which becomes the scheduler's request
// id, the completion id ("chatcmpl-<id>") and the X-Request-Id echoed in
// the response. Only 1..128 printable ASCII characters (0x21-0x7E) are
// taken: anything else (a tab, a byte >= 0x80, a control byte that got
// past the header parser, an id too long) is a 400 naming the header, so
// nothing a client sends is echoed into a header or an id unchecked.
#ifndef SPAR_SERVICES_HTTP_REQUEST_ID_H_
#define SPAR_SERVICES_HTTP_REQUEST_ID_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar::http {

inline constexpr size_t kMaxRequestIdLength = 128;

// The id to use: "" when the header is absent or empty (the server picks
// one); INVALID_ARGUMENT with the field "X-Request-Id" when malformed.
absl::StatusOr<std::string> ClientRequestId(absl::string_view header_value);

// 32 random hex digits: response ids ("chatcmpl-...", "msg_...") and,
// unless the client sends X-Request-Id, the scheduler's request ids.
std::string RandomRequestId();

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_REQUEST_ID_H_
