#include "text/jinja_lexer.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {

absl::Status SyntaxError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

std::string DescribeToken(const Token& t) {
  switch (t.type) {
    case Tok::kText:
      return "template text";
    case Tok::kVarBegin:
      return "'{{'";
    case Tok::kVarEnd:
      return "'}}'";
    case Tok::kBlockBegin:
      return "'{%'";
    case Tok::kBlockEnd:
      return "'%}'";
    case Tok::kEof:
      return "end of template";
    case Tok::kString:
      return "a string";
    default:
      return absl::StrCat("'", t.value, "'");
  }
}

namespace {

class Lexer {
 public:
  explicit Lexer(absl::string_view src) : src_(src) {
    // Jinja2's default keep_trailing_newline=False.
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t start = FindTagStart(pos_);
      std::string text(src_.substr(pos_, (start == absl::string_view::npos ? src_.size() : start) - pos_));
      const int text_line = line_;
      if (strip_next_text_) {
        size_t k = 0;
        while (k < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[k]))) ++k;
        text.erase(0, k);
        strip_next_text_ = false;
      }
      if (start == absl::string_view::npos) {
        Advance(src_.size());
        Emit(Tok::kText, std::move(text), text_line);
        break;
      }
      const char kind = src_[start + 1];
      size_t after = start + 2;
      const bool minus = after < src_.size() && src_[after] == '-';
      const bool plus = after < src_.size() && src_[after] == '+';
      if (minus) {
        while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      } else if ((kind == '%' || kind == '#') && !plus) {
        LStripBlock(&text, pos_);
      }
      Advance(start);
      Emit(Tok::kText, std::move(text), text_line);
      if (minus || plus) ++after;
      if (kind == '#') {
        const size_t end = src_.find("#}", after);
        if (end == absl::string_view::npos) return SyntaxError(line_, "unclosed comment '{#'");
        const bool end_minus = end > after && src_[end - 1] == '-';
        Advance(end + 2);
        AfterTag(end_minus);
        continue;
      }
      const bool is_var = kind == '{';
      Emit(is_var ? Tok::kVarBegin : Tok::kBlockBegin, "", line_);
      Advance(after);
      SPAR_RETURN_IF_ERROR(LexTagBody(is_var));
    }
    Emit(Tok::kEof, "", line_);
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return absl::string_view::npos;
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block
  // or comment tag are removed.
  void LStripBlock(std::string* text, size_t text_begin) const {
    size_t k = text->size();
    while (k > 0 && ((*text)[k - 1] == ' ' || (*text)[k - 1] == '\t')) --k;
    const bool at_line_start = k > 0 ? (*text)[k - 1] == '\n' : (text_begin == 0 || src_[text_begin - 1] == '\n');
    if (at_line_start) text->resize(k);
  }

  void AfterTag(bool end_minus) {
    if (end_minus) {
      strip_next_text_ = true;
    } else if (pos_ < src_.size() && src_[pos_] == '\n') {
      // trim_blocks: the first newline after a block or comment tag.
      Advance(pos_ + 1);
    }
  }

  void Advance(size_t to) {
    for (size_t i = pos_; i < to; ++i) {
      if (src_[i] == '\n') ++line_;
    }
    pos_ = to;
  }

  void Emit(Tok type, std::string value, int line) {
    if (type == Tok::kText && value.empty()) return;
    tokens_.push_back({type, std::move(value), line});
  }

  absl::Status LexTagBody(bool is_var) {
    int depth = 0;  // brackets: a '}}' inside a dict literal does not end the tag
    const absl::string_view close = is_var ? "}}" : "%}";
    while (true) {
      while (pos_ < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[pos_]))) Advance(pos_ + 1);
      if (pos_ >= src_.size()) return SyntaxError(line_, is_var ? "unclosed '{{'" : "unclosed '{%'");
      const absl::string_view rest = src_.substr(pos_);
      if (depth == 0) {
        const bool minus_close = rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close;
        if (minus_close || rest.substr(0, 2) == close) {
          Advance(pos_ + (minus_close ? 3 : 2));
          Emit(is_var ? Tok::kVarEnd : Tok::kBlockEnd, "", line_);
          if (is_var) {
            if (minus_close) strip_next_text_ = true;
          } else {
            AfterTag(minus_close);
          }
          return absl::OkStatus();
        }
      }
      const char c = rest[0];
      if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() && (absl::ascii_isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        Emit(Tok::kName, std::string(rest.substr(0, n)), line_);
        Advance(pos_ + n);
        continue;
      }
      if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        size_t n = 0;
        bool is_float = false;
        while (n < rest.size() && (absl::ascii_isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        if (n + 1 < rest.size() && rest[n] == '.' && absl::ascii_isdigit(static_cast<unsigned char>(rest[n + 1]))) {
          is_float = true;
          ++n;
          while (n < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[m]))) {
            is_float = true;
            n = m;
            while (n < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[n]))) ++n;
          }
        }
        std::string num;
        for (char d : rest.substr(0, n)) {
          if (d != '_') num.push_back(d);
        }
        Emit(is_float ? Tok::kFloat : Tok::kInt, num, line_);
        Advance(pos_ + n);
        continue;
      }
      if (c == '\'' || c == '"') {
        SPAR_RETURN_IF_ERROR(LexString(c));
        continue;
      }
      static constexpr absl::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
      bool two = false;
      for (absl::string_view op : kTwo) {
        if (rest.substr(0, 2) == op) {
          Emit(Tok::kOp, std::string(op), line_);
          Advance(pos_ + 2);
          two = true;
          break;
        }
      }
      if (two) continue;
      if (absl::string_view("+-*/%~<>=.,:|()[]{}").find(c) == absl::string_view::npos) {
        return SyntaxError(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      Emit(Tok::kOp, std::string(1, c), line_);
      Advance(pos_ + 1);
    }
  }

  // Python string literal escapes.
  absl::Status LexString(char quote) {
    const int start_line = line_;
    size_t i = pos_ + 1;
    std::string out;
    while (true) {
      if (i >= src_.size()) return SyntaxError(start_line, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out.push_back(c);
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case 'a': out.push_back('\a'); break;
        case '0': out.push_back('\0'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + digits > src_.size()) return SyntaxError(line_, "truncated escape in string literal");
          const std::string hex(src_.substr(i, digits));
          char* end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (end != hex.c_str() + digits || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return SyntaxError(line_, absl::StrCat("bad escape \\", std::string(1, e), hex));
          }
          AppendUtf8(static_cast<char32_t>(cp), &out);
          i += digits;
          break;
        }
        default:
          // Python keeps unknown escapes as written.
          out.push_back('\\');
          out.push_back(e);
      }
    }
    Emit(Tok::kString, std::move(out), start_line);
    Advance(i + 1);
    return absl::OkStatus();
  }

  absl::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool strip_next_text_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source) { return Lexer(source).Run(); }

}  // namespace jinja
}  // namespace spar
