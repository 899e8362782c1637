#include "text/jinja_strings.h"

#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {

std::u32string ToCodePoints(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    size_t n = DecodeUtf8At(s, i, &cp);
    if (n == 0) {
      cp = kReplacementChar;
      n = 1;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string FromCodePoints(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

size_t CodePointLength(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> Characters(const std::string& s) {
  std::vector<std::string> out;
  for (char32_t c : ToCodePoints(s)) {
    std::string ch;
    AppendUtf8(c, &ch);
    out.push_back(std::move(ch));
  }
  return out;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::u32string cs = ToCodePoints(s);
  std::u32string set;
  const bool use_set = chars != nullptr;
  if (use_set) set = ToCodePoints(*chars);
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : IsPySpace(c); };
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strip_it(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cs[e - 1])) --e;
  }
  return FromCodePoints(cs.substr(b, e - b));
}

std::vector<std::string> PySplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    // Runs of whitespace; no empty strings.
    const std::u32string cs = ToCodePoints(s);
    size_t i = 0;
    while (i < cs.size()) {
      while (i < cs.size() && IsPySpace(cs[i])) ++i;
      if (i >= cs.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cs.size();
        while (e > i && IsPySpace(cs[e - 1])) --e;
        out.push_back(FromCodePoints(cs.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < cs.size() && !IsPySpace(cs[j])) ++j;
      out.push_back(FromCodePoints(cs.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = *sep;
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::vector<std::string> PyRSplit(const std::string& s, const std::string& sep, int64_t maxsplit) {
  // Split from the right: at most maxsplit cuts, counted from the end.
  std::string rest = s;
  std::vector<std::string> rev;
  while (static_cast<int64_t>(rev.size()) < maxsplit) {
    const size_t hit = rest.rfind(sep);
    if (hit == std::string::npos) break;
    rev.push_back(rest.substr(hit + sep.size()));
    rest.resize(hit);
  }
  std::vector<std::string> parts;
  parts.push_back(rest);
  parts.insert(parts.end(), rev.rbegin(), rev.rend());
  return parts;
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::u32string cs = ToCodePoints(s);
    std::string out;
    int64_t done = 0;
    for (size_t k = 0; k <= cs.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cs.size()) AppendUtf8(cs[k], &out);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string CaseMap(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : ToCodePoints(s)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c)));
    } else {
      AppendUtf8(upper ? UnicodeToUpper(c) : UnicodeToLower(c), &out);
    }
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace jinja
}  // namespace spar
