// Jinja2's builtin tests (`v is name`, `v is name(arg)`, `v is not ...`),
// with their operator aliases (`v is eq 1`, `v is == 1`).
#include "absl/strings/str_cat.h"
#include "text/jinja_builtins.h"
#include "text/jinja_interpreter.h"
#include "text/jinja_strings.h"

namespace spar {
namespace jinja {
namespace {

bool IsMapping(const Value& v) { return v.is_object() && !v.object().is_namespace; }

bool IsIterable(const Value& v) { return v.is_string() || v.is_array() || IsMapping(v); }

absl::StatusOr<bool> IsCase(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  return v.as_string() == CaseMap(v.as_string(), upper);
}

absl::StatusOr<bool> Parity(Interpreter& in, const Value& v, absl::string_view name, bool odd) {
  if (!v.is_int()) return in.Error(absl::StrCat("test '", name, "' needs an integer"));
  return (v.as_int() % 2 != 0) == odd;
}

absl::StatusOr<bool> DivisibleBy(Interpreter& in, const Value& v, const CallArgs& args) {
  if (!v.is_int()) return in.Error("test 'divisibleby' needs an integer");
  const Value* arg = args.positional.empty() ? nullptr : &args.positional[0];
  if (arg == nullptr || !arg->is_int() || arg->as_int() == 0) return in.Error("divisibleby needs a non-zero integer");
  return v.as_int() % arg->as_int() == 0;
}

absl::StatusOr<bool> SameAs(Interpreter&, const Value& v, const CallArgs& args) {
  const Value& arg = args.positional[0];
  if (v.type() != arg.type()) return false;
  if (v.is_array() || v.is_object()) {
    return v.Equals(arg) && (v.is_array() ? &v.array() == &arg.array() : &v.object() == &arg.object());
  }
  return v.Equals(arg);
}

absl::StatusOr<bool> In(Interpreter&, const Value& v, const CallArgs& args) {
  const Value& arg = args.positional[0];
  if (arg.is_array()) {
    for (const Value& x : arg.array()) {
      if (x.Equals(v)) return true;
    }
    return false;
  }
  if (arg.is_string()) return v.is_string() && arg.as_string().find(v.as_string()) != std::string::npos;
  if (arg.is_object()) return v.is_string() && arg.object().Find(v.as_string()) != nullptr;
  return false;
}

enum class Relation { kLess, kLessEqual, kGreater, kGreaterEqual };

absl::StatusOr<bool> Ordered(Interpreter& in, const Value& v, const CallArgs& args, Relation r) {
  auto c = Compare(v, args.positional[0]);
  if (!c.ok()) return in.Error(c.status().message());
  switch (r) {
    case Relation::kLess: return *c < 0;
    case Relation::kLessEqual: return *c <= 0;
    case Relation::kGreater: return *c > 0;
    case Relation::kGreaterEqual: return *c >= 0;
  }
  return false;
}

absl::StatusOr<bool> Equal(Interpreter&, const Value& v, const CallArgs& args) { return v.Equals(args.positional[0]); }

absl::StatusOr<bool> NotEqual(Interpreter&, const Value& v, const CallArgs& args) {
  return !v.Equals(args.positional[0]);
}

absl::StatusOr<bool> Less(Interpreter& in, const Value& v, const CallArgs& a) {
  return Ordered(in, v, a, Relation::kLess);
}
absl::StatusOr<bool> LessEqual(Interpreter& in, const Value& v, const CallArgs& a) {
  return Ordered(in, v, a, Relation::kLessEqual);
}
absl::StatusOr<bool> Greater(Interpreter& in, const Value& v, const CallArgs& a) {
  return Ordered(in, v, a, Relation::kGreater);
}
absl::StatusOr<bool> GreaterEqual(Interpreter& in, const Value& v, const CallArgs& a) {
  return Ordered(in, v, a, Relation::kGreaterEqual);
}

// A test of the value alone.
#define SPAR_VALUE_TEST(expr) \
  [](Interpreter&, const Value& v, const CallArgs&) -> absl::StatusOr<bool> { return expr; }

constexpr TestEntry kTests[] = {
    {"!=", NotEqual, true},
    {"<", Less, true},
    {"<=", LessEqual, true},
    {"==", Equal, true},
    {">", Greater, true},
    {">=", GreaterEqual, true},
    {"boolean", SPAR_VALUE_TEST(v.is_bool()), false},
    {"callable", SPAR_VALUE_TEST(v.is_function()), false},
    {"defined", SPAR_VALUE_TEST(!v.is_undefined()), false},
    {"divisibleby", DivisibleBy, false},
    {"eq", Equal, true},
    {"equalto", Equal, true},
    {"even", [](Interpreter& in, const Value& v, const CallArgs&) { return Parity(in, v, "even", false); }, false},
    {"false", SPAR_VALUE_TEST(v.is_bool() && !v.as_bool()), false},
    {"float", SPAR_VALUE_TEST(v.is_float()), false},
    {"ge", GreaterEqual, true},
    {"greaterthan", Greater, true},
    {"gt", Greater, true},
    {"in", In, true},
    {"integer", SPAR_VALUE_TEST(v.is_int()), false},
    {"iterable", SPAR_VALUE_TEST(IsIterable(v)), false},
    {"le", LessEqual, true},
    {"lessthan", Less, true},
    {"lower", SPAR_VALUE_TEST(IsCase(v, false)), false},
    {"lt", Less, true},
    {"mapping", SPAR_VALUE_TEST(IsMapping(v)), false},
    {"ne", NotEqual, true},
    {"none", SPAR_VALUE_TEST(v.is_none()), false},
    {"number", SPAR_VALUE_TEST(v.is_number()), false},
    {"odd", [](Interpreter& in, const Value& v, const CallArgs&) { return Parity(in, v, "odd", true); }, false},
    {"sameas", SameAs, true},
    {"sequence", SPAR_VALUE_TEST(IsIterable(v)), false},
    {"string", SPAR_VALUE_TEST(v.is_string()), false},
    {"true", SPAR_VALUE_TEST(v.is_bool() && v.as_bool()), false},
    {"undefined", SPAR_VALUE_TEST(v.is_undefined()), false},
    {"upper", SPAR_VALUE_TEST(IsCase(v, true)), false},
};
static_assert(SortedByName(kTests));

#undef SPAR_VALUE_TEST

}  // namespace

const TestEntry* FindTest(std::string_view name) { return FindByName(kTests, name); }

}  // namespace jinja
}  // namespace spar
