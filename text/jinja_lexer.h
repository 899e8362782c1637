// The lexer of spar's Jinja subset: template text and the tokens inside
// `{{ }}` / `{% %}` tags, with transformers' whitespace options applied
// (trim_blocks, lstrip_blocks, `-`/`+` tag modifiers, one trailing newline
// dropped) so that the parser sees text as it will be printed.
#ifndef SPAR_TEXT_JINJA_LEXER_H_
#define SPAR_TEXT_JINJA_LEXER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {
namespace jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string value;  // kText: the text; kString: the decoded literal; else the spelling
  int line = 0;
};

// "chat template line N: what".
absl::Status SyntaxError(int line, absl::string_view what);
// How a token reads in an error message ("'}}'", "a string", "end of template").
std::string DescribeToken(const Token& t);

// The tokens of `source` (valid UTF-8), ending with kEof; errors name the line.
absl::StatusOr<std::vector<Token>> Lex(absl::string_view source);

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_LEXER_H_
