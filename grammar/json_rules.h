// The JSON rules every constrained grammar shares: strings, numbers and
// any value / object / array, declared once per grammar under
// fixed shared keys ("json.v1.*"), so their states' token tables are
// computed once per vocabulary (state_masks.h).
//
// A family names byte patterns that strings must never contain (JSON
// inside a tag-delimited tool-call format must not close the tag: GLM's
// "</", DeepSeek's "｜DSML｜"); its rules get their own keys.
//
// Whitespace between tokens is any run of JSON whitespace (vLLM's default
// with xgrammar); a model that keeps writing spaces is still finished in
// time by the token budget (token_mask.h).
#ifndef SPAR_GRAMMAR_JSON_RULES_H_
#define SPAR_GRAMMAR_JSON_RULES_H_

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "nlohmann/json.hpp"

namespace spar::grammar {

struct JsonFamily {
  std::string key;                     // "" for plain JSON
  std::vector<std::string> forbidden;  // never inside a string
  static JsonFamily Plain() { return {}; }
  static JsonFamily Glm() { return {"glm", {"</"}}; }
  static JsonFamily Dsml() { return {"dsml", {"</", "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"}}; }
};

class JsonRules {
 public:
  JsonRules(Grammar* grammar, JsonFamily family) : g_(grammar), family_(std::move(family)) {}

  const JsonFamily& family() const { return family_; }
  Expr Ws();
  Expr String();
  Expr Number();
  Expr Integer();
  Expr Value();
  Expr Object();
  Expr Array();
  static Expr Boolean() { return Alt({Lit("true"), Lit("false")}); }
  static Expr Null() { return Lit("null"); }
  // `item` repeated min..max times (max < 0: unbounded) with JSON commas
  // and whitespace between, e.g. the inside of an array.
  Expr CommaList(const Expr& item, int min, int max);
  // Compact JSON for `value` that contains none of the family's patterns
  // (each occurrence inside a string gets its first character escaped).
  std::string Literal(const nlohmann::ordered_json& value) const;

 private:
  int Shared(const char* name, bool family_specific);

  Grammar* g_;
  JsonFamily family_;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_JSON_RULES_H_
