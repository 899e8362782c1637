#include "grammar/json_rules.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grammar/json_text.h"
#include "grammar/number_range.h"

namespace spar::grammar {

// Shared keys name the rule and its family; bump the version when a body
// changes, so no process mixes tables of two definitions.
int JsonRules::Shared(const char* name) {
  const std::string key = absl::StrCat("json.v1.", name, tag_safe_ ? ".tag" : "");
  if (const int id = g_->FindShared(key); id >= 0) return id;
  const std::string n(name);
  const int id = g_->Declare(key, key);
  if (n == "ws") {
    g_->Define(id, Star(Bytes(std::bitset<256>().set(' ').set('\t').set('\n').set('\r'))));
  } else if (n == "string") {
    StringShape shape;
    shape.tag_safe = tag_safe_;
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
    g_->Define(id, Seq({Lit("{"), Ws(), Opt(CommaList(member, 1, -1)), Ws(), Lit("}")}));
  } else if (n == "array") {
    g_->Define(id, Seq({Lit("["), Ws(), Opt(CommaList(Value(), 1, -1)), Ws(), Lit("]")}));
  }
  return id;
}

// Whitespace and numbers are the same inside and outside tags.
int JsonRules::Plain(const char* name) {
  const bool saved = tag_safe_;
  tag_safe_ = false;
  const int id = Shared(name);
  tag_safe_ = saved;
  return id;
}

Expr JsonRules::Ws() { return Call(Plain("ws")); }
Expr JsonRules::String() { return Call(Shared("string")); }
Expr JsonRules::Number() { return Call(Plain("number")); }
Expr JsonRules::Integer() { return Call(Plain("integer")); }
Expr JsonRules::Value() { return Call(Shared("value")); }
Expr JsonRules::Object() { return Call(Shared("object")); }
Expr JsonRules::Array() { return Call(Shared("array")); }

Expr JsonRules::CommaList(const Expr& item, int min, int max) {
  const Expr sep = Seq({Ws(), Lit(","), Ws()});
  if (max == 0) return Empty();
  const int rest_min = min > 0 ? min - 1 : 0;
  const int rest_max = max < 0 ? -1 : max - 1;
  Expr list = Seq({item, Repeat(Seq({sep, item}), rest_min, rest_max)});
  return min == 0 ? Opt(std::move(list)) : list;
}

}  // namespace spar::grammar
