#include "services/http/http_router.h"

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"

namespace spar::http {
namespace {

// Whether `pattern` matches `path`; sets `rest` for a trailing "/*".
bool PathMatches(absl::string_view pattern, absl::string_view path, std::string* rest) {
  if (absl::EndsWith(pattern, "/*")) {
    const absl::string_view prefix = pattern.substr(0, pattern.size() - 1);  // keeps the '/'
    if (path.size() <= prefix.size() || !absl::StartsWith(path, prefix)) return false;
    *rest = PercentDecode(path.substr(prefix.size()));
    return true;
  }
  return pattern == path;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::string_view HttpHeaders::Get(absl::string_view name) const {
  for (const auto& [n, v] : fields_) {
    if (absl::EqualsIgnoreCase(n, name)) return v;
  }
  return {};
}

bool HttpHeaders::Has(absl::string_view name) const {
  for (const auto& field : fields_) {
    if (absl::EqualsIgnoreCase(field.first, name)) return true;
  }
  return false;
}

void HttpRouter::Handle(std::string method, std::string path, HttpHandler handler, RunOn run_on) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler), run_on});
}

void HttpRouter::HandleSimple(std::string method, std::string path, SimpleHandler handler, RunOn run_on) {
  Handle(
      std::move(method), std::move(path),
      [handler = std::move(handler)](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
        responder->Send(handler(request));
      },
      run_on);
}

void HttpRouter::AddGuard(std::string path_prefix, Guard guard) {
  guards_.emplace_back(std::move(path_prefix), std::move(guard));
}

HttpRouter::Match HttpRouter::Find(absl::string_view method, absl::string_view path) const {
  Match m;
  std::vector<std::string> allowed;
  for (const Route& r : routes_) {
    std::string rest;
    if (!PathMatches(r.path, path, &rest)) continue;
    if (r.method == method) {
      m.route = &r;
      m.path_rest = std::move(rest);
      return m;
    }
    allowed.push_back(r.method);
  }
  m.allow = absl::StrJoin(allowed, ", ");
  return m;
}

std::optional<HttpResponse> HttpRouter::Refusal(const HttpRequest& request) const {
  for (const auto& [prefix, guard] : guards_) {
    if (!absl::StartsWith(request.path, prefix)) continue;
    if (std::optional<HttpResponse> refusal = guard(request)) return refusal;
  }
  return std::nullopt;
}

std::string PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = HexValue(text[i + 1]), lo = HexValue(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

}  // namespace spar::http
