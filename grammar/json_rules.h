// The JSON rules every constrained grammar shares: whitespace, strings,
// numbers and any value / object / array, declared once per grammar under
// fixed shared keys ("json.*"), so their states' token tables are computed
// once per vocabulary (state_masks.h). The tag-safe family (strings without
// "</", json_text.h) is for JSON inside tag-delimited tool-call formats.
//
// Whitespace between tokens is any run of JSON whitespace (vLLM's default
// with xgrammar); a model that keeps writing spaces is still finished in
// time by the token budget (token_mask.h).
#ifndef SPAR_GRAMMAR_JSON_RULES_H_
#define SPAR_GRAMMAR_JSON_RULES_H_

#include "grammar/grammar.h"

namespace spar::grammar {

class JsonRules {
 public:
  JsonRules(Grammar* grammar, bool tag_safe) : g_(grammar), tag_safe_(tag_safe) {}

  bool tag_safe() const { return tag_safe_; }
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

 private:
  int Shared(const char* name);
  int Plain(const char* name);

  Grammar* g_;
  bool tag_safe_;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_JSON_RULES_H_
