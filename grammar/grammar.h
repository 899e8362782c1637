// A context-free grammar over bytes, as spar's constrained decoding writes
// them: named rules whose bodies are regular expressions over bytes that
// may call other rules (a recursive transition network). Recursion is what
// nesting needs (a JSON value inside an array inside an object); the rest
// stays inside a rule's own automaton. rule_compiler.h turns each body into
// a deterministic automaton whose edges are bytes or calls, and a
// CompiledGrammar joins them; matcher.h runs it as a pushdown automaton.
//
// Expressions are values (copied when reused); a shared part that is large
// or recursive belongs in a rule of its own and is referenced by Call().
#ifndef SPAR_GRAMMAR_GRAMMAR_H_
#define SPAR_GRAMMAR_GRAMMAR_H_

#include <bitset>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grammar/byte_dfa.h"

namespace spar::grammar {

struct Expr {
  enum class Kind {
    kBytes,      // the literal `bytes`
    kClass,      // one byte of `byte_set`
    kSeq,        // items in order
    kAlt,        // one of items
    kRepeat,     // items[0], min..max times (max < 0: unbounded)
    kCall,       // the rule `rule`
    kAutomaton,  // a string `dfa` accepts
  };
  Kind kind = Kind::kSeq;
  std::string bytes;
  std::bitset<256> byte_set;
  std::vector<Expr> items;
  int min = 0, max = -1;
  int rule = -1;
  std::shared_ptr<const ByteDfa> dfa;
};

Expr Lit(absl::string_view bytes);
Expr Bytes(const std::bitset<256>& set);
Expr ByteRange(unsigned char lo, unsigned char hi);
Expr Seq(std::vector<Expr> items);
Expr Alt(std::vector<Expr> items);
Expr Repeat(Expr item, int min, int max);
inline Expr Star(Expr item) { return Repeat(std::move(item), 0, -1); }
inline Expr Plus(Expr item) { return Repeat(std::move(item), 1, -1); }
inline Expr Opt(Expr item) { return Repeat(std::move(item), 0, 1); }
Expr Call(int rule);
Expr Automaton(ByteDfa dfa);
inline Expr Empty() { return Seq({}); }
// Matches nothing at all (an Alt with no choices).
inline Expr Nothing() { return Alt({}); }

struct Rule {
  std::string name;  // for messages and debugging
  Expr body;
  // Rules whose automaton (with everything it calls) is the same in every
  // grammar — JSON strings, numbers, any value — carry a key, so the token
  // mask tables of their states are computed once per vocabulary and shared
  // (state_masks.h). Empty: this grammar's own rule.
  std::string shared_key;
};

class Grammar {
 public:
  // A rule to fill in later (recursive definitions): returns its id.
  int Declare(std::string name, std::string shared_key = "");
  void Define(int rule, Expr body);
  int Add(std::string name, Expr body, std::string shared_key = "") {
    const int id = Declare(std::move(name), std::move(shared_key));
    Define(id, std::move(body));
    return id;
  }
  // The id of the rule declared with `shared_key`, or -1.
  int FindShared(absl::string_view shared_key) const;

  void set_root(int rule) { root_ = rule; }
  int root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }

 private:
  std::vector<Rule> rules_;
  int root_ = -1;
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_GRAMMAR_H_
