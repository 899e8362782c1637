// Recursive-descent parser for spar's Jinja subset, over the tokens of
// jinja_lexer.h. The grammar and operator precedence follow Jinja2's parser
// (filters and `is` tests bind tighter than arithmetic; `~` between + and *).
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits) : toks_(std::move(tokens)), limits_(limits) {}

  absl::StatusOr<Body> ParseAll() {
    std::string end;
    SPAR_ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    if (Peek().type != Tok::kEof) return SyntaxError(Peek().line, absl::StrCat("unexpected ", DescribeToken(Peek())));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    const size_t k = std::min(idx_ + ahead, toks_.size() - 1);
    return toks_[k];
  }
  Token Next() {
    Token t = toks_[idx_];
    if (idx_ + 1 < toks_.size()) ++idx_;
    return t;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kOp && Peek(ahead).value == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kName && Peek(ahead).value == name;
  }
  absl::Status Expect(Tok type, absl::string_view value = "") {
    const Token& t = Peek();
    if (t.type != type || (!value.empty() && t.value != value)) {
      Token want{type, std::string(value), 0};
      return SyntaxError(t.line, absl::StrCat("expected ", value.empty() ? DescribeToken(want) : absl::StrCat("'", value, "'"),
                                              ", got ", DescribeToken(t)));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != Tok::kName) return SyntaxError(Peek().line, absl::StrCat("expected a name, got ", DescribeToken(Peek())));
    return Next().value;
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };
  absl::Status CheckDepth() const {
    if (depth_ > limits_.max_nesting) return SyntaxError(Peek().line, "nesting is too deep");
    return absl::OkStatus();
  }

  // Parses statements until `{% <one of ends> ...`; consumes the '{%' and
  // the keyword and reports which one in *end (empty at end of input).
  absl::StatusOr<Body> ParseBody(std::initializer_list<absl::string_view> ends, std::string* end) {
    DepthGuard guard(&depth_);
    SPAR_RETURN_IF_ERROR(CheckDepth());
    Body body;
    end->clear();
    while (true) {
      const Token& t = Peek();
      if (t.type == Tok::kEof) {
        if (ends.size() != 0) {
          return SyntaxError(t.line, absl::StrCat("unexpected end of template, expected '{% ", *ends.begin(), " %}'"));
        }
        return body;
      }
      if (t.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = Next().value;
        body.push_back(std::move(s));
        continue;
      }
      if (t.type == Tok::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = Next().line;
        SPAR_ASSIGN_OR_RETURN(s->expr, ParseExpression());
        SPAR_RETURN_IF_ERROR(Expect(Tok::kVarEnd));
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != Tok::kBlockBegin) return SyntaxError(t.line, absl::StrCat("unexpected ", DescribeToken(t)));
      const Token& kw = Peek(1);
      for (absl::string_view e : ends) {
        if (kw.type == Tok::kName && kw.value == e) {
          Next();
          *end = Next().value;
          return body;
        }
      }
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> s, ParseStatement());
      if (s != nullptr) body.push_back(std::move(s));
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    const int line = Next().line;  // '{%'
    SPAR_ASSIGN_OR_RETURN(std::string kw, ExpectName());
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> cond, ParseExpression());
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      while (true) {
        std::string end;
        SPAR_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") {
          SPAR_ASSIGN_OR_RETURN(cond, ParseExpression());
          SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
          continue;
        }
        SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
        if (end == "else") {
          SPAR_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, &end));
          SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
        }
        break;
      }
      return s;
    }
    if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        SPAR_ASSIGN_OR_RETURN(std::string target, ExpectName());
        s->targets.push_back(target);
      } while (IsOp(",") && (Next(), true));
      SPAR_RETURN_IF_ERROR(Expect(Tok::kName, "in"));
      // No conditional expression here: a trailing `if` filters the loop.
      SPAR_ASSIGN_OR_RETURN(s->expr, ParseOr());
      if (IsName("if")) {
        Next();
        SPAR_ASSIGN_OR_RETURN(s->cond, ParseExpression());
      }
      if (IsName("recursive")) return SyntaxError(line, "recursive loops are not supported");
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      std::string end;
      SPAR_ASSIGN_OR_RETURN(s->body, ParseBody({"else", "endfor"}, &end));
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      if (end == "else") {
        SPAR_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, &end));
        SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      }
      return s;
    }
    if (kw == "set") {
      SPAR_ASSIGN_OR_RETURN(std::string target, ExpectName());
      if (IsOp(".")) {
        Next();
        SPAR_ASSIGN_OR_RETURN(s->attr, ExpectName());
      }
      s->targets.push_back(target);
      while (IsOp(",") && s->attr.empty()) {
        Next();
        SPAR_ASSIGN_OR_RETURN(std::string more, ExpectName());
        s->targets.push_back(more);
      }
      if (Peek().type == Tok::kBlockEnd && s->targets.size() == 1 && s->attr.empty()) {
        Next();
        s->kind = Stmt::Kind::kSetBlock;
        std::string end;
        SPAR_ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, &end));
        SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
        return s;
      }
      s->kind = Stmt::Kind::kSet;
      SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, "="));
      SPAR_ASSIGN_OR_RETURN(s->expr, ParseExpression());
      if (IsOp(",")) {
        // `set a = 1, 2` builds a tuple.
        auto tuple = std::make_unique<Expr>();
        tuple->kind = Expr::Kind::kTuple;
        tuple->line = line;
        tuple->args.push_back(std::move(s->expr));
        while (IsOp(",")) {
          Next();
          SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParseExpression());
          tuple->args.push_back(std::move(e));
        }
        s->expr = std::move(tuple);
      }
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      return s;
    }
    if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      SPAR_ASSIGN_OR_RETURN(s->text, ExpectName());
      SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, "("));
      while (!IsOp(")")) {
        SPAR_ASSIGN_OR_RETURN(std::string param, ExpectName());
        std::unique_ptr<Expr> def;
        if (IsOp("=")) {
          Next();
          SPAR_ASSIGN_OR_RETURN(def, ParseExpression());
        }
        s->params.emplace_back(param, std::move(def));
        if (!IsOp(",")) break;
        Next();
      }
      SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, ")"));
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      std::string end;
      SPAR_ASSIGN_OR_RETURN(s->body, ParseBody({"endmacro"}, &end));
      if (Peek().type == Tok::kName) Next();  // optional macro name after endmacro
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      return s;
    }
    if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      return s;
    }
    if (kw == "generation" || kw == "endgeneration") {
      // transformers' assistant-mask markers: no output of their own.
      SPAR_RETURN_IF_ERROR(Expect(Tok::kBlockEnd));
      return std::unique_ptr<Stmt>();
    }
    return SyntaxError(line, absl::StrCat("unsupported or unexpected tag '{% ", kw, " %}'"));
  }

  // --- expressions ---

  std::unique_ptr<Expr> Make(Expr::Kind kind, int line, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    return e;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseExpression() {
    DepthGuard guard(&depth_);
    SPAR_RETURN_IF_ERROR(CheckDepth());
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParseOr());
    while (IsName("if")) {
      const int line = Next().line;
      auto c = Make(Expr::Kind::kConditional, line);
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> cond, ParseOr());
      std::unique_ptr<Expr> other;
      if (IsName("else")) {
        Next();
        SPAR_ASSIGN_OR_RETURN(other, ParseExpression());
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseOr() {
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParseAnd());
    while (IsName("or")) {
      auto n = Make(Expr::Kind::kOr, Next().line);
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> rhs, ParseAnd());
      n->args.push_back(std::move(e));
      n->args.push_back(std::move(rhs));
      e = std::move(n);
    }
    return e;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseAnd() {
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParseNot());
    while (IsName("and")) {
      auto n = Make(Expr::Kind::kAnd, Next().line);
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> rhs, ParseNot());
      n->args.push_back(std::move(e));
      n->args.push_back(std::move(rhs));
      e = std::move(n);
    }
    return e;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      SPAR_RETURN_IF_ERROR(CheckDepth());
      auto n = Make(Expr::Kind::kUnary, Next().line, "not");
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> operand, ParseNot());
      n->args.push_back(std::move(operand));
      return n;
    }
    return ParseCompare();
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseCompare() {
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParseMath1());
    while (true) {
      std::string op;
      if (Peek().type == Tok::kOp &&
          (Peek().value == "==" || Peek().value == "!=" || Peek().value == "<" || Peek().value == ">" ||
           Peek().value == "<=" || Peek().value == ">=")) {
        op = Peek().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      auto n = Make(Expr::Kind::kBinary, Peek().line, op);
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> rhs, ParseMath1());
      n->args.push_back(std::move(e));
      n->args.push_back(std::move(rhs));
      e = std::move(n);
    }
    return e;
  }

  template <typename Next_>
  absl::StatusOr<std::unique_ptr<Expr>> ParseBinaryLevel(std::initializer_list<absl::string_view> ops, Next_ next) {
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, next());
    while (true) {
      bool matched = false;
      for (absl::string_view op : ops) {
        if (IsOp(op)) {
          matched = true;
          auto n = Make(Expr::Kind::kBinary, Next().line, std::string(op));
          SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> rhs, next());
          n->args.push_back(std::move(e));
          n->args.push_back(std::move(rhs));
          e = std::move(n);
          break;
        }
      }
      if (!matched) return e;
    }
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseMath1() {
    return ParseBinaryLevel({"+", "-"}, [this] { return ParseConcat(); });
  }
  absl::StatusOr<std::unique_ptr<Expr>> ParseConcat() {
    return ParseBinaryLevel({"~"}, [this] { return ParseMath2(); });
  }
  absl::StatusOr<std::unique_ptr<Expr>> ParseMath2() {
    return ParseBinaryLevel({"*", "/", "//", "%"}, [this] { return ParsePow(); });
  }
  absl::StatusOr<std::unique_ptr<Expr>> ParsePow() {
    return ParseBinaryLevel({"**"}, [this] { return ParseUnary(); });
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseUnary() {
    DepthGuard guard(&depth_);
    SPAR_RETURN_IF_ERROR(CheckDepth());
    if (IsOp("-") || IsOp("+")) {
      const Token t = Next();
      auto n = Make(Expr::Kind::kUnary, t.line, t.value);
      SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> operand, ParseUnary());
      n->args.push_back(std::move(operand));
      return n;
    }
    SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> e, ParsePrimary());
    return ParsePostfix(std::move(e));
  }

  absl::Status ParseCallArgs(Expr* call) {
    // '(' already consumed.
    while (!IsOp(")")) {
      if (Peek().type == Tok::kName && IsOp("=", 1)) {
        std::string key = Next().value;
        Next();
        SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> v, ParseExpression());
        call->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> v, ParseExpression());
        call->args.push_back(std::move(v));
      }
      if (!IsOp(",")) break;
      Next();
    }
    return Expect(Tok::kOp, ")");
  }

  bool StartsPrimary() const {
    const Token& t = Peek();
    if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat) return true;
    if (t.type == Tok::kOp) return t.value == "(" || t.value == "[" || t.value == "{" || t.value == "-";
    if (t.type != Tok::kName) return false;
    for (absl::string_view kw : {"else", "or", "and", "if", "in", "is", "not"}) {
      if (t.value == kw) return false;
    }
    return true;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParsePostfix(std::unique_ptr<Expr> e) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().type == Tok::kInt) {
          auto n = Make(Expr::Kind::kIndex, line);
          auto lit = Make(Expr::Kind::kLiteral, line);
          lit->literal = Value::Int(std::strtoll(Next().value.c_str(), nullptr, 10));
          n->args.push_back(std::move(e));
          n->args.push_back(std::move(lit));
          e = std::move(n);
          continue;
        }
        SPAR_ASSIGN_OR_RETURN(std::string attr, ExpectName());
        auto n = Make(Expr::Kind::kAttr, line, attr);
        n->args.push_back(std::move(e));
        e = std::move(n);
      } else if (IsOp("[")) {
        const int line = Next().line;
        std::unique_ptr<Expr> parts[3];
        bool slice = false;
        if (!IsOp(":")) {
          SPAR_ASSIGN_OR_RETURN(parts[0], ParseExpression());
        }
        if (IsOp(":")) {
          slice = true;
          Next();
          if (!IsOp(":") && !IsOp("]")) {
            SPAR_ASSIGN_OR_RETURN(parts[1], ParseExpression());
          }
          if (IsOp(":")) {
            Next();
            if (!IsOp("]")) {
              SPAR_ASSIGN_OR_RETURN(parts[2], ParseExpression());
            }
          }
        }
        SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, "]"));
        auto n = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, line);
        n->args.push_back(std::move(e));
        if (slice) {
          for (auto& p : parts) n->args.push_back(std::move(p));
        } else {
          n->args.push_back(std::move(parts[0]));
        }
        e = std::move(n);
      } else if (IsOp("(")) {
        auto n = Make(Expr::Kind::kCall, Next().line);
        n->args.push_back(std::move(e));
        SPAR_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        e = std::move(n);
      } else if (IsOp("|")) {
        const int line = Next().line;
        SPAR_ASSIGN_OR_RETURN(std::string name, ExpectName());
        auto n = Make(Expr::Kind::kFilter, line, name);
        n->args.push_back(std::move(e));
        if (IsOp("(")) {
          Next();
          SPAR_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        }
        e = std::move(n);
      } else if (IsName("is")) {
        const int line = Next().line;
        bool negated = false;
        if (IsName("not")) {
          Next();
          negated = true;
        }
        SPAR_ASSIGN_OR_RETURN(std::string name, ExpectName());
        auto n = Make(Expr::Kind::kTest, line, name);
        n->negated = negated;
        n->args.push_back(std::move(e));
        if (IsOp("(")) {
          Next();
          SPAR_RETURN_IF_ERROR(ParseCallArgs(n.get()));
        } else if (StartsPrimary()) {
          // `is divisibleby 3`, `is sameas false`: one bare argument.
          SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> arg, ParseUnary());
          n->args.push_back(std::move(arg));
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParsePrimary() {
    const Token t = Peek();
    switch (t.type) {
      case Tok::kName: {
        Next();
        auto lit = Make(Expr::Kind::kLiteral, t.line);
        if (t.value == "true" || t.value == "True") {
          lit->literal = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          lit->literal = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          lit->literal = Value::None();
        } else {
          return Make(Expr::Kind::kName, t.line, t.value);
        }
        return lit;
      }
      case Tok::kString: {
        std::string s = Next().value;
        while (Peek().type == Tok::kString) s += Next().value;  // adjacent literals
        auto lit = Make(Expr::Kind::kLiteral, t.line);
        lit->literal = Value::String(std::move(s));
        return lit;
      }
      case Tok::kInt: {
        Next();
        auto lit = Make(Expr::Kind::kLiteral, t.line);
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) return SyntaxError(t.line, absl::StrCat("integer literal ", t.value, " is too large"));
        lit->literal = Value::Int(v);
        return lit;
      }
      case Tok::kFloat: {
        Next();
        auto lit = Make(Expr::Kind::kLiteral, t.line);
        lit->literal = Value::Float(std::strtod(t.value.c_str(), nullptr));
        return lit;
      }
      case Tok::kOp:
        if (t.value == "(") {
          Next();
          auto tuple = Make(Expr::Kind::kTuple, t.line);
          if (IsOp(")")) {
            Next();
            return tuple;
          }
          SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> first, ParseExpression());
          if (IsOp(")")) {
            Next();
            return first;
          }
          tuple->args.push_back(std::move(first));
          while (IsOp(",")) {
            Next();
            if (IsOp(")")) break;
            SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> more, ParseExpression());
            tuple->args.push_back(std::move(more));
          }
          SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, ")"));
          return tuple;
        }
        if (t.value == "[") {
          Next();
          auto list = Make(Expr::Kind::kList, t.line);
          while (!IsOp("]")) {
            SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> item, ParseExpression());
            list->args.push_back(std::move(item));
            if (!IsOp(",")) break;
            Next();
          }
          SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, "]"));
          return list;
        }
        if (t.value == "{") {
          Next();
          auto dict = Make(Expr::Kind::kDict, t.line);
          while (!IsOp("}")) {
            SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> key, ParseExpression());
            SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, ":"));
            SPAR_ASSIGN_OR_RETURN(std::unique_ptr<Expr> value, ParseExpression());
            dict->args.push_back(std::move(key));
            dict->args.push_back(std::move(value));
            if (!IsOp(",")) break;
            Next();
          }
          SPAR_RETURN_IF_ERROR(Expect(Tok::kOp, "}"));
          return dict;
        }
        break;
      default:
        break;
    }
    return SyntaxError(t.line, absl::StrCat("unexpected ", DescribeToken(t), " in expression"));
  }

  std::vector<Token> toks_;
  size_t idx_ = 0;
  int depth_ = 0;
  ParseLimits limits_;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(absl::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template is ", source.size(), " bytes, more than the limit of ", limits.max_source_bytes));
  }
  if (!IsValidUtf8(source)) return absl::InvalidArgumentError("chat template is not valid UTF-8");
  SPAR_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  Parser parser(std::move(tokens), limits);
  return parser.ParseAll();
}

}  // namespace jinja
}  // namespace spar
