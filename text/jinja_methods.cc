// Methods of str, dict and list (`v.name(args)`), with Python's semantics
// on code points. Lists have reference semantics: append/extend/pop change
// the list every holder sees.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/jinja_builtins.h"
#include "text/jinja_interpreter.h"
#include "text/jinja_strings.h"
#include "text/unicode.h"

namespace spar {
namespace jinja {
namespace {

struct MethodEntry {
  std::string_view name;
  MethodFn fn;
};

// The argument as a string, or null when absent or not a string.
const std::string* StringArg(const CallArgs& args, size_t pos, const char* name) {
  const Value* v = args.Get(pos, name);
  return v != nullptr && v->is_string() ? &v->as_string() : nullptr;
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> out;
  for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::Array(std::move(out));
}

// --- str ---------------------------------------------------------------------

absl::StatusOr<Value> StrAffix(Interpreter& in, const Value& self, CallArgs& args, absl::string_view name,
                               bool prefix) {
  const std::string& s = self.as_string();
  const Value* p = args.Get(0, "prefix");
  if (p == nullptr) return in.Error(absl::StrCat(name, "() needs an argument"));
  std::vector<std::string> cands;
  if (p->is_string()) {
    cands.push_back(p->as_string());
  } else if (p->is_array()) {
    for (const Value& v : p->array()) cands.push_back(v.Str());
  } else {
    return in.Error(absl::StrCat(name, "() argument must be a string or tuple"));
  }
  for (const std::string& c : cands) {
    const bool hit = prefix ? s.compare(0, c.size(), c) == 0 && s.size() >= c.size()
                            : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

Value StrStrip(const Value& self, const CallArgs& args, bool left, bool right) {
  return Value::String(PyStrip(self.as_string(), StringArg(args, 0, "chars"), left, right));
}

absl::StatusOr<Value> StrSplit(Interpreter& in, const Value& self, CallArgs& args, bool from_right) {
  const std::string& s = self.as_string();
  SPAR_ASSIGN_OR_RETURN(int64_t maxsplit, args.Int(1, "maxsplit", -1));
  const Value* sep = args.Get(0, "sep");
  if (sep != nullptr && sep->is_string() && sep->as_string().empty()) return in.Error("empty separator");
  const bool whitespace = sep == nullptr || sep->is_none() || sep->is_undefined();
  if (!whitespace && !sep->is_string()) {
    // Python's TypeError (reading it as "" would split forever).
    return in.Error(absl::StrCat(from_right ? "rsplit" : "split", "() separator must be a string or None, not ",
                                 sep->TypeName()));
  }
  std::vector<std::string> parts;
  if (from_right && maxsplit >= 0 && !whitespace) {
    parts = PyRSplit(s, sep->as_string(), maxsplit);
  } else {
    parts = PySplit(s, whitespace ? nullptr : &sep->as_string(), maxsplit);
  }
  Value out = StringList(std::move(parts));
  SPAR_RETURN_IF_ERROR(in.ChargeString(s.size()));
  return out;
}

Value StrSplitLines(const Value& self) {
  const std::string& s = self.as_string();
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find_first_of("\r\n", pos);
    if (e == std::string::npos) {
      out.push_back(s.substr(pos));
      break;
    }
    out.push_back(s.substr(pos, e - pos));
    pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
  }
  return StringList(std::move(out));
}

absl::StatusOr<Value> StrReplace(Interpreter& in, const Value& self, CallArgs& args) {
  const Value* from = args.Get(0, "old");
  const Value* to = args.Get(1, "new");
  if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
    return in.Error("replace() needs two strings");
  }
  SPAR_ASSIGN_OR_RETURN(int64_t count, args.Int(2, "count", -1));
  std::string out = ReplaceAll(self.as_string(), from->as_string(), to->as_string(), count);
  SPAR_RETURN_IF_ERROR(in.ChargeString(out.size()));
  return Value::String(std::move(out));
}

// capitalize: first code point upper, the rest lower; title: every run of
// alphanumerics starts upper.
Value StrCapitalize(const Value& self, bool every_word) {
  std::u32string cs = ToCodePoints(self.as_string());
  bool start = true;
  for (size_t k = 0; k < cs.size(); ++k) {
    const bool alpha = IsUnicodeAlphanumeric(cs[k]);
    if (!every_word) {
      cs[k] = k == 0 ? UnicodeToUpper(cs[k]) : UnicodeToLower(cs[k]);
    } else {
      cs[k] = start && alpha ? UnicodeToUpper(cs[k]) : UnicodeToLower(cs[k]);
      start = !alpha;
    }
  }
  return Value::String(FromCodePoints(cs));
}

absl::StatusOr<const std::string*> Substring(Interpreter& in, const CallArgs& args, absl::string_view name) {
  const std::string* sub = StringArg(args, 0, "sub");
  if (sub == nullptr) return in.Error(absl::StrCat(name, "() needs a string"));
  return sub;
}

// find / rfind / index: the code-point offset of the first (last) hit.
absl::StatusOr<Value> StrFind(Interpreter& in, const Value& self, CallArgs& args, absl::string_view name,
                              bool from_right, bool raise) {
  SPAR_ASSIGN_OR_RETURN(const std::string* t, Substring(in, args, name));
  const std::string& s = self.as_string();
  const size_t pos = from_right ? s.rfind(*t) : s.find(*t);
  if (pos == std::string::npos) {
    if (raise) return in.Error("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(CodePointLength(s.substr(0, pos))));
}

absl::StatusOr<Value> StrCount(Interpreter& in, const Value& self, CallArgs& args) {
  SPAR_ASSIGN_OR_RETURN(const std::string* t, Substring(in, args, "count"));
  const std::string& s = self.as_string();
  if (t->empty()) return Value::Int(static_cast<int64_t>(CodePointLength(s)) + 1);
  int64_t n = 0;
  for (size_t pos = s.find(*t); pos != std::string::npos; pos = s.find(*t, pos + t->size())) ++n;
  return Value::Int(n);
}

absl::StatusOr<Value> StrJoin(Interpreter& in, const Value& self, CallArgs& args) {
  const Value* items = args.Get(0, "iterable");
  if (items == nullptr || !items->is_array()) return in.Error("join() needs a list");
  std::string out;
  for (size_t k = 0; k < items->array().size(); ++k) {
    if (k > 0) out += self.as_string();
    out += items->array()[k].Str();
  }
  SPAR_RETURN_IF_ERROR(in.ChargeString(out.size()));
  return Value::String(std::move(out));
}

// isdigit, isalpha, ...: true when the string is not empty and every code
// point passes.
Value AllCodePoints(const Value& self, bool (*pass)(char32_t)) {
  const std::u32string cs = ToCodePoints(self.as_string());
  if (cs.empty()) return Value::Bool(false);
  for (char32_t c : cs) {
    if (!pass(c)) return Value::Bool(false);
  }
  return Value::Bool(true);
}

// isupper / islower: at least one cased code point, and none of the other
// case.
Value StrIsCase(const Value& self, bool upper) {
  bool all = true, cased = false;
  for (char32_t c : ToCodePoints(self.as_string())) {
    const bool up = UnicodeToLower(c) != c, low = UnicodeToUpper(c) != c;
    cased = cased || up || low;
    if (upper ? low : up) all = false;
  }
  return Value::Bool(all && cased);
}

constexpr MethodEntry kStringMethods[] = {
    {"capitalize", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return StrCapitalize(v, /*every_word=*/false);
     }},
    {"count", StrCount},
    {"endswith", [](Interpreter& in, const Value& v, CallArgs& a) { return StrAffix(in, v, a, "endswith", false); }},
    {"find", [](Interpreter& in, const Value& v, CallArgs& a) { return StrFind(in, v, a, "find", false, false); }},
    {"index", [](Interpreter& in, const Value& v, CallArgs& a) { return StrFind(in, v, a, "index", false, true); }},
    {"isalnum", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return AllCodePoints(v, IsUnicodeAlphanumeric);
     }},
    {"isalpha", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return AllCodePoints(v, [](char32_t c) { return IsUnicodeAlphanumeric(c) && !IsUnicodeNumeric(c); });
     }},
    {"isdigit", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return AllCodePoints(v, IsUnicodeNumeric);
     }},
    {"islower", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return StrIsCase(v, false); }},
    {"isspace", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return AllCodePoints(v, IsPySpace);
     }},
    {"isupper", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return StrIsCase(v, true); }},
    {"join", StrJoin},
    {"lower", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return Value::String(CaseMap(v.as_string(), false));
     }},
    {"lstrip", [](Interpreter&, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
       return StrStrip(v, a, true, false);
     }},
    {"replace", StrReplace},
    {"rfind", [](Interpreter& in, const Value& v, CallArgs& a) { return StrFind(in, v, a, "rfind", true, false); }},
    {"rsplit", [](Interpreter& in, const Value& v, CallArgs& a) { return StrSplit(in, v, a, /*from_right=*/true); }},
    {"rstrip", [](Interpreter&, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
       return StrStrip(v, a, false, true);
     }},
    {"split", [](Interpreter& in, const Value& v, CallArgs& a) { return StrSplit(in, v, a, /*from_right=*/false); }},
    {"splitlines", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return StrSplitLines(v); }},
    {"startswith", [](Interpreter& in, const Value& v, CallArgs& a) { return StrAffix(in, v, a, "startswith", true); }},
    {"strip", [](Interpreter&, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
       return StrStrip(v, a, true, true);
     }},
    {"title", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return StrCapitalize(v, /*every_word=*/true);
     }},
    {"upper", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return Value::String(CaseMap(v.as_string(), true));
     }},
};
static_assert(SortedByName(kStringMethods));

// --- dict --------------------------------------------------------------------

enum class MapView { kItems, kKeys, kValues };

Value DictView(const Value& self, MapView view) {
  std::vector<Value> out;
  for (const auto& [k, v] : self.object().items) {
    switch (view) {
      case MapView::kItems: out.push_back(Value::Array({Value::String(k), v})); break;
      case MapView::kKeys: out.push_back(Value::String(k)); break;
      case MapView::kValues: out.push_back(v); break;
    }
  }
  return Value::Array(std::move(out));
}

absl::StatusOr<Value> DictGet(Interpreter& in, const Value& self, CallArgs& args) {
  const Value* key = args.Get(0, "key");
  if (key == nullptr) return in.Error("get() needs a key");
  const Value* v = key->is_string() ? self.object().Find(key->as_string()) : nullptr;
  if (v != nullptr) return *v;
  const Value* dflt = args.Get(1, "default");
  return dflt != nullptr ? *dflt : Value::None();
}

constexpr MethodEntry kDictMethods[] = {
    {"get", DictGet},
    {"items", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return DictView(v, MapView::kItems);
     }},
    {"keys", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return DictView(v, MapView::kKeys);
     }},
    {"values", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return DictView(v, MapView::kValues);
     }},
};
static_assert(SortedByName(kDictMethods));

// --- list --------------------------------------------------------------------

absl::StatusOr<Value> ListAppend(Interpreter& in, const Value& self, CallArgs& args) {
  if (args.positional.size() != 1) return in.Error("append() takes exactly one argument");
  SPAR_RETURN_IF_ERROR(in.ChargeString(sizeof(Value)));
  self.array().push_back(args.positional[0]);
  return Value::None();
}

absl::StatusOr<Value> ListExtend(Interpreter& in, const Value& self, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_array()) return in.Error("extend() needs a list");
  std::vector<Value> more = args.positional[0].array();
  SPAR_RETURN_IF_ERROR(in.ChargeString(more.size() * sizeof(Value)));
  self.array().insert(self.array().end(), more.begin(), more.end());
  return Value::None();
}

absl::StatusOr<Value> ListPop(Interpreter& in, const Value& self, CallArgs& args) {
  std::vector<Value>& a = self.array();
  if (a.empty()) return in.Error("pop from empty list");
  SPAR_ASSIGN_OR_RETURN(int64_t i, args.Int(0, "index", -1));
  if (i < 0) i += static_cast<int64_t>(a.size());
  if (i < 0 || i >= static_cast<int64_t>(a.size())) return in.Error("pop index out of range");
  Value v = a[i];
  a.erase(a.begin() + i);
  return v;
}

// index: the first equal element's position; count: how many are equal.
absl::StatusOr<Value> ListSearch(Interpreter& in, const Value& self, CallArgs& args, bool index) {
  const std::vector<Value>& a = self.array();
  if (args.positional.empty()) return in.Error(absl::StrCat(index ? "index" : "count", "() needs an argument"));
  int64_t n = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].Equals(args.positional[0])) {
      if (index) return Value::Int(static_cast<int64_t>(k));
      ++n;
    }
  }
  if (index) return in.Error("value is not in list");
  return Value::Int(n);
}

constexpr MethodEntry kListMethods[] = {
    {"append", ListAppend},
    {"count", [](Interpreter& in, const Value& v, CallArgs& a) { return ListSearch(in, v, a, /*index=*/false); }},
    {"extend", ListExtend},
    {"index", [](Interpreter& in, const Value& v, CallArgs& a) { return ListSearch(in, v, a, /*index=*/true); }},
    {"pop", ListPop},
};
static_assert(SortedByName(kListMethods));

template <size_t N>
MethodFn Lookup(const MethodEntry (&table)[N], std::string_view name) {
  const MethodEntry* e = FindByName(table, name);
  return e == nullptr ? nullptr : e->fn;
}

}  // namespace

MethodFn FindMethod(const Value& self, std::string_view name) {
  if (self.is_string()) return Lookup(kStringMethods, name);
  if (self.is_object() && !self.object().is_namespace) return Lookup(kDictMethods, name);
  if (self.is_array()) return Lookup(kListMethods, name);
  return nullptr;
}

}  // namespace jinja
}  // namespace spar
