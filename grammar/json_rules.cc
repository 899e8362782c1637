#include "grammar/json_rules.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "grammar/json_text.h"
#include "grammar/number_range.h"
#include "text/utf8.h"

namespace spar::grammar {

// Shared keys name the rule and its family; bump the version when a body
// changes, so no process mixes tables of two definitions.
int JsonRules::Shared(const char* name, bool family_specific) {
  const std::string suffix = family_specific && !family_.key.empty() ? absl::StrCat(".", family_.key) : "";
  const std::string key = absl::StrCat("json.v1.", name, suffix);
  if (const int id = g_->FindShared(key); id >= 0) return id;
  const std::string n(name);
  const int id = g_->Declare(key, key);
  if (n == "string") {
    StringShape shape;
    shape.forbidden = family_.forbidden;
    g_->Define(id, Automaton(JsonStringDfa(shape)));
  } else if (n == "number") {
    g_->Define(id, Automaton(JsonNumberDfa(NumberShape())));
  } else if (n == "integer") {
    NumberShape shape;
    shape.integer = true;
    g_->Define(id, Automaton(JsonNumberDfa(shape)));
  } else if (n == "value") {
    g_->Define(id, Alt({Object(), Array(), String(), Number(), Boolean(), Null()}));
  } else if (n == "object") {
    const Expr member = Seq({String(), Ws(), Lit(":"), Ws(), Value()});
    g_->Define(id, Seq({Lit("{"), Ws(), CommaList(member, 0, -1), Ws(), Lit("}")}));
  } else if (n == "array") {
    g_->Define(id, Seq({Lit("["), Ws(), CommaList(Value(), 0, -1), Ws(), Lit("]")}));
  }
  return id;
}

// Whitespace is inlined, not called: a called rule that may end after any
// space would make every token that starts with one ("Ġthe" and ~50K
// others in a 150K vocabulary) an escaping token of its table, matched
// against the caller one by one; inline, the caller's own state rejects
// them at once.
Expr JsonRules::Ws() { return Star(Bytes(std::bitset<256>().set(' ').set('\t').set('\n').set('\r'))); }

// Numbers are the same in every family.
Expr JsonRules::String() { return Call(Shared("string", true)); }
Expr JsonRules::Number() { return Call(Shared("number", false)); }
Expr JsonRules::Integer() { return Call(Shared("integer", false)); }
Expr JsonRules::Value() { return Call(Shared("value", true)); }
Expr JsonRules::Object() { return Call(Shared("object", true)); }
Expr JsonRules::Array() { return Call(Shared("array", true)); }

Expr JsonRules::CommaList(const Expr& item, int min, int max) {
  const Expr sep = Seq({Ws(), Lit(","), Ws()});
  if (max == 0) return Empty();
  const int rest_min = min > 0 ? min - 1 : 0;
  const int rest_max = max < 0 ? -1 : max - 1;
  Expr list = Seq({item, Repeat(Seq({sep, item}), rest_min, rest_max)});
  return min == 0 ? Opt(std::move(list)) : list;
}

std::string JsonRules::Literal(const nlohmann::ordered_json& value) const {
  std::string text = value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // In compact JSON these patterns (never JSON punctuation) can only occur
  // inside strings, where a \u escape of their first character reads the same.
  for (const std::string& p : family_.forbidden) {
    char32_t cp = 0;
    const size_t len = DecodeUtf8At(p, 0, &cp);
    if (len == 0 || cp > 0xFFFF) continue;
    text = absl::StrReplaceAll(text, {{p, absl::StrCat(absl::StrFormat("\\u%04x", static_cast<uint32_t>(cp)), p.substr(len))}});
  }
  return text;
}

}  // namespace spar::grammar
