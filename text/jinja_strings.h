// Python str semantics over UTF-8 for the Jinja interpreter and its
// builtins: strings are sequences of code points (an ill-formed byte counts
// as one U+FFFD), whitespace is Python's str.isspace set.
#ifndef SPAR_TEXT_JINJA_STRINGS_H_
#define SPAR_TEXT_JINJA_STRINGS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace spar {
namespace jinja {

std::u32string ToCodePoints(const std::string& s);
std::string FromCodePoints(const std::u32string& s);
size_t CodePointLength(const std::string& s);
// One string per code point (iterating a str in Python).
std::vector<std::string> Characters(const std::string& s);

// Python's str.isspace set.
bool IsPySpace(char32_t c);

// str.strip / lstrip / rstrip: `chars` null strips whitespace.
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right);
// str.split: `sep` null splits on runs of whitespace (no empty strings);
// `sep` must not be empty. maxsplit < 0: no limit.
std::vector<std::string> PySplit(const std::string& s, const std::string* sep, int64_t maxsplit);
// str.rsplit with a separator and maxsplit >= 0 (other cases equal split).
std::vector<std::string> PyRSplit(const std::string& s, const std::string& sep, int64_t maxsplit);
// str.replace; count < 0: all. An empty `from` inserts `to` around every
// character, as Python does.
std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// str.upper / str.lower.
std::string CaseMap(const std::string& s, bool upper);
// Jinja2's escape filter (markupsafe).
std::string HtmlEscape(const std::string& s);

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_STRINGS_H_
