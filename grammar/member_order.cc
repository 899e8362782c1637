#include "grammar/member_order.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace spar::grammar {

Expr OrderedMembers(Grammar* g, const std::vector<Member>& members, const Expr& sep, const std::string& name) {
  const int n = static_cast<int>(members.size());
  if (n == 0) return Empty();
  int first_required = n;
  for (int i = 0; i < n; ++i) {
    if (members[i].required) {
      first_required = i;
      break;
    }
  }
  auto piece = [&](int i) {
    Expr e = Seq({sep, members[i].expr});
    return members[i].required ? e : Opt(std::move(e));
  };
  const int candidates = std::min(first_required + 1, n);
  std::vector<Expr> tails(n);  // tails[j]: what may follow member j
  if (static_cast<int64_t>(candidates) * n > 2048) {
    std::vector<int> rules(n);
    for (int j = n - 1; j >= 0; --j) {
      rules[j] = g->Add(absl::StrCat(name, " after member ", j),
                        j == n - 1 ? Empty() : Seq({piece(j + 1), Call(rules[j + 1])}));
      tails[j] = Call(rules[j]);
    }
  } else {
    for (int j = n - 1; j >= 0; --j) {
      std::vector<Expr> rest;
      for (int i = j + 1; i < n; ++i) rest.push_back(piece(i));
      tails[j] = Seq(std::move(rest));
    }
  }
  std::vector<Expr> alts;
  for (int j = 0; j < candidates; ++j) alts.push_back(Seq({members[j].expr, tails[j]}));
  if (first_required == n) alts.push_back(Empty());
  return Alt(std::move(alts));
}

}  // namespace spar::grammar
