// Syntax tree of spar's Jinja subset, and the parser that builds it.
#ifndef SPAR_TEXT_JINJA_AST_H_
#define SPAR_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja_value.h"

namespace spar {
namespace jinja {

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: elements
    kTuple,      // args: elements
    kDict,       // args: key0, value0, key1, value1...
    kAttr,       // args[0].name
    kIndex,      // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name: "-", "+", "not"
    kBinary,     // name: operator; args[0], args[1]
    kAnd,
    kOr,
    kConditional,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  std::string name;
  Value literal;
  bool negated = false;  // kTest with "is not"
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body); else_body
    kFor,       // targets in expr [if cond]: body; else_body
    kSet,       // targets = expr, or target.attr = expr
    kSetBlock,  // {% set name %}body{% endset %}
    kMacro,     // name(params = defaults): body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> cond;  // kFor filter
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;  // kMacro
};

struct ParseLimits {
  size_t max_source_bytes = 1 << 20;
  int max_nesting = 100;
};

// Parses with the options transformers uses: trim_blocks and lstrip_blocks
// on, a single trailing newline of the source dropped. Errors name the line.
absl::StatusOr<Body> ParseTemplate(absl::string_view source, const ParseLimits& limits);

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_AST_H_
