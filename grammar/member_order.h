// A list of members in a fixed order where optional ones may be left out
// and a separator stands between those present: the inside of a JSON
// object generated in the schema's property order, or a tool call's
// arguments in a tag format. The first member present is some j with no
// required member before it; every later one comes after a separator. As
// an expression that is |candidates| x n members; long lists share their
// tails as rules instead.
#ifndef SPAR_GRAMMAR_MEMBER_ORDER_H_
#define SPAR_GRAMMAR_MEMBER_ORDER_H_

#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace spar::grammar {

struct Member {
  Expr expr;
  bool required = false;
};

// `name` prefixes the names of the rules made for long lists.
Expr OrderedMembers(Grammar* grammar, const std::vector<Member>& members, const Expr& separator,
                    const std::string& name);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_MEMBER_ORDER_H_
