// Byte automata for JSON's lexical parts and the raw text values of
// tag-delimited tool-call formats:
//   - a JSON string literal, optionally with a bound on its length in code
//     points (JSON Schema minLength / maxLength count code points: an
//     escape is one, a 4-byte UTF-8 character is one; \u escapes of
//     surrogates are not generated, so every escape is one code point) and
//     optionally without some byte patterns, so a string inside a
//     tag-delimited format can never close the tag around it ("</" is
//     always writable as "<\/", "｜" as "\uff5c");
//   - raw text with a length bound, for a format's unquoted string values.
#ifndef SPAR_GRAMMAR_JSON_TEXT_H_
#define SPAR_GRAMMAR_JSON_TEXT_H_

#include <string>
#include <vector>

#include "grammar/byte_dfa.h"

namespace spar::grammar {

struct StringShape {
  std::vector<std::string> forbidden;
  int min_chars = 0;
  int max_chars = -1;  // < 0: unbounded
};

// The whole literal, quotes included.
ByteDfa JsonStringDfa(const StringShape& shape);

// Well-formed UTF-8 text of min..max code points (max < 0: unbounded)
// containing none of `forbidden`.
ByteDfa RawTextDfa(int min_chars, int max_chars, const std::vector<std::string>& forbidden);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_JSON_TEXT_H_
