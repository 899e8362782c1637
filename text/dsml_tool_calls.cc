#include "text/dsml_tool_calls.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace spar {
namespace {

#define SPAR_FULLWIDTH_DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"  // ｜DSML｜

size_t SkipSpace(absl::string_view s, size_t pos) {
  while (pos < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  return pos;
}

// The attributes of a tag from after its name to its '>': name="v" pairs
// separated by whitespace. Returns the position after '>', or npos.
size_t ParseAttributes(absl::string_view s, size_t pos, std::vector<std::pair<std::string, std::string>>* attrs) {
  for (;;) {
    pos = SkipSpace(s, pos);
    if (pos >= s.size()) return absl::string_view::npos;
    if (s[pos] == '>') return pos + 1;
    const size_t eq = s.find('=', pos);
    if (eq == absl::string_view::npos) return absl::string_view::npos;
    const std::string key(absl::StripAsciiWhitespace(s.substr(pos, eq - pos)));
    size_t q = SkipSpace(s, eq + 1);
    if (key.empty() || key.find_first_of("<>\"") != std::string::npos || q >= s.size() || s[q] != '"') {
      return absl::string_view::npos;
    }
    const size_t end = s.find('"', q + 1);
    if (end == absl::string_view::npos) return absl::string_view::npos;
    attrs->emplace_back(key, std::string(s.substr(q + 1, end - q - 1)));
    pos = end + 1;
  }
}

const std::string* Attr(const std::vector<std::pair<std::string, std::string>>& attrs, absl::string_view key) {
  for (const auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

}  // namespace

const std::vector<std::string>& DsmlPrefixes() {
  static const auto* p = new std::vector<std::string>{SPAR_FULLWIDTH_DSML, "|DSML|", ""};
  return *p;
}

const std::vector<std::string>& DsmlBlockOpeners() {
  static const auto* o = [] {
    auto* v = new std::vector<std::string>;
    for (const std::string& p : DsmlPrefixes()) v->push_back(absl::StrCat("<", p, "function_calls>"));
    return v;
  }();
  return *o;
}

const std::vector<std::string>& DsmlBlockClosers() {
  static const auto* c = [] {
    auto* v = new std::vector<std::string>;
    for (const std::string& p : DsmlPrefixes()) v->push_back(absl::StrCat("</", p, "function_calls>"));
    return v;
  }();
  return *c;
}

bool ParseDsmlCalls(absl::string_view inner, absl::string_view prefix, std::vector<ToolCallText>* calls) {
  const std::string invoke_open = absl::StrCat("<", prefix, "invoke");
  const std::string invoke_close = absl::StrCat("</", prefix, "invoke>");
  const std::string param_open = absl::StrCat("<", prefix, "parameter");
  const std::string param_close = absl::StrCat("</", prefix, "parameter>");
  std::vector<ToolCallText> out;
  size_t pos = SkipSpace(inner, 0);
  while (pos < inner.size()) {
    if (!absl::StartsWith(inner.substr(pos), invoke_open)) return false;
    std::vector<std::pair<std::string, std::string>> attrs;
    pos = ParseAttributes(inner, pos + invoke_open.size(), &attrs);
    const std::string* name = Attr(attrs, "name");
    if (pos == absl::string_view::npos || name == nullptr) return false;
    ToolCallText call;
    call.name = std::string(absl::StripAsciiWhitespace(*name));
    if (call.name.empty()) return false;
    for (;;) {
      pos = SkipSpace(inner, pos);
      if (absl::StartsWith(inner.substr(pos), invoke_close)) {
        pos += invoke_close.size();
        break;
      }
      if (!absl::StartsWith(inner.substr(pos), param_open)) return false;
      std::vector<std::pair<std::string, std::string>> pattrs;
      pos = ParseAttributes(inner, pos + param_open.size(), &pattrs);
      const std::string* key = Attr(pattrs, "name");
      if (pos == absl::string_view::npos || key == nullptr || absl::StripAsciiWhitespace(*key).empty()) return false;
      const size_t end = inner.find(param_close, pos);
      if (end == absl::string_view::npos) return false;
      std::optional<bool> is_string;
      if (const std::string* s = Attr(pattrs, "string")) {
        if (*s != "true" && *s != "false") return false;
        is_string = *s == "true";
      }
      call.args.emplace_back(std::string(absl::StripAsciiWhitespace(*key)), std::string(inner.substr(pos, end - pos)));
      call.arg_string.push_back(is_string);
      pos = end + param_close.size();
    }
    out.push_back(std::move(call));
    pos = SkipSpace(inner, pos);
  }
  if (out.empty()) return false;  // a block without a call is not a call
  for (ToolCallText& c : out) calls->push_back(std::move(c));
  return true;
}

}  // namespace spar
