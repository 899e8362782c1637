// The interpreter's builtins, each a name table from a name to a small
// function: filters (`v | name(args)`, jinja_filters.cc), methods of str,
// dict and list (`v.name(args)`, jinja_methods.cc) and tests
// (`v is name(args)`, jinja_tests.cc). A builtin reports errors through
// Interpreter::Error (which names the template line) and charges what it
// builds to the interpreter's budgets, as the interpreter does itself.
#ifndef SPAR_TEXT_JINJA_BUILTINS_H_
#define SPAR_TEXT_JINJA_BUILTINS_H_

#include <algorithm>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace spar {
namespace jinja {

using FilterFn = absl::StatusOr<Value> (*)(Interpreter& in, const Value& v, CallArgs& args);
using MethodFn = absl::StatusOr<Value> (*)(Interpreter& in, const Value& self, CallArgs& args);
using TestFn = absl::StatusOr<bool> (*)(Interpreter& in, const Value& v, const CallArgs& args);

// Null when no builtin has that name.
FilterFn FindFilter(std::string_view name);
// The method `name` of `self`'s type (str, dict or list; namespaces have
// none); null when that type has no such method.
MethodFn FindMethod(const Value& self, std::string_view name);

struct TestEntry {
  std::string_view name;
  TestFn fn;
  bool needs_argument;  // `v is eq(x)`: called only with a positional argument
};
const TestEntry* FindTest(std::string_view name);

// A name table: entries sorted by name (checked at compile time), looked up
// by binary search.
template <typename Entry, size_t N>
constexpr bool SortedByName(const Entry (&entries)[N]) {
  for (size_t k = 1; k < N; ++k) {
    if (!(entries[k - 1].name < entries[k].name)) return false;
  }
  return true;
}

template <typename Entry, size_t N>
const Entry* FindByName(const Entry (&entries)[N], std::string_view name) {
  const Entry* it =
      std::lower_bound(entries, entries + N, name, [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != entries + N && it->name == name ? it : nullptr;
}

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_BUILTINS_H_
