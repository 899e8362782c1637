#include "grammar/grammar.h"

#include <utility>

namespace spar::grammar {

Expr Lit(absl::string_view bytes) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = std::string(bytes);
  return e;
}

Expr Bytes(const std::bitset<256>& set) {
  Expr e;
  e.kind = Expr::Kind::kClass;
  e.byte_set = set;
  return e;
}

Expr ByteRange(unsigned char lo, unsigned char hi) {
  std::bitset<256> set;
  for (int c = lo; c <= hi; ++c) set.set(c);
  return Bytes(set);
}

Expr Seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kSeq;
  e.items = std::move(items);
  return e;
}

Expr Alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.items = std::move(items);
  return e;
}

Expr Repeat(Expr item, int min, int max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

Expr Call(int rule) {
  Expr e;
  e.kind = Expr::Kind::kCall;
  e.rule = rule;
  return e;
}

Expr Automaton(ByteDfa dfa) {
  Expr e;
  e.kind = Expr::Kind::kAutomaton;
  e.dfa = std::make_shared<const ByteDfa>(std::move(dfa));
  return e;
}

int Grammar::Declare(std::string name, std::string shared_key) {
  Rule r;
  r.name = std::move(name);
  r.shared_key = std::move(shared_key);
  r.body = Nothing();
  rules_.push_back(std::move(r));
  return static_cast<int>(rules_.size()) - 1;
}

void Grammar::Define(int rule, Expr body) { rules_[rule].body = std::move(body); }

int Grammar::FindShared(absl::string_view shared_key) const {
  if (shared_key.empty()) return -1;
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].shared_key == shared_key) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace spar::grammar
