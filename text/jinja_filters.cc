// Jinja2's builtin filters (`v | name(args)`), those the supported chat
// templates use and their close relatives, with Jinja2's argument names.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/jinja_builtins.h"
#include "text/jinja_interpreter.h"
#include "text/jinja_strings.h"

namespace spar {
namespace jinja {
namespace {

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

// `item`, or with attribute="a.b" its nested attribute.
Value AttributeOf(const CallArgs& args, const Value& item) {
  const Value* attr = args.Keyword("attribute");
  if (attr == nullptr) return item;
  Value cur = item;
  const std::string path = attr->Str();
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    cur = GetAttr(cur, path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

// What the sequence filters iterate: a list's items, a string's
// characters, a mapping's keys, nothing for undefined (as in Jinja2);
// nullopt for anything else.
std::optional<std::vector<Value>> Sequence(const Value& v) {
  std::vector<Value> seq;
  if (v.is_array()) {
    seq = v.array();
  } else if (v.is_string()) {
    for (std::string& ch : Characters(v.as_string())) seq.push_back(Value::String(std::move(ch)));
  } else if (v.is_object() && !v.object().is_namespace) {
    for (const auto& kv : v.object().items) seq.push_back(Value::String(kv.first));
  } else if (!v.is_undefined()) {
    return std::nullopt;
  }
  return seq;
}

absl::StatusOr<std::vector<Value>> SequenceOr(Interpreter& in, const Value& v, absl::string_view what) {
  std::optional<std::vector<Value>> seq = Sequence(v);
  if (!seq) return in.Error(what);
  return std::move(*seq);
}

absl::StatusOr<Value> Charged(Interpreter& in, std::string s) {
  SPAR_RETURN_IF_ERROR(in.ChargeString(s.size()));
  return Value::String(std::move(s));
}

// --- values ------------------------------------------------------------------

absl::StatusOr<Value> ToJson(Interpreter& in, const Value& v, CallArgs& args) {
  JsonDumpOptions opt;
  SPAR_ASSIGN_OR_RETURN(int64_t indent, args.Int(0, "indent", -1));
  opt.indent = static_cast<int>(std::min<int64_t>(indent, 64));
  opt.ensure_ascii = args.Bool(99, "ensure_ascii", false);
  opt.sort_keys = args.Bool(99, "sort_keys", false);
  if (const Value* sep = args.Keyword("separators"); sep != nullptr && sep->is_array() && sep->array().size() == 2) {
    opt.item_separator = sep->array()[0].Str();
    opt.key_separator = sep->array()[1].Str();
  }
  auto s = DumpJson(v, opt);
  if (!s.ok()) return in.Error(s.status().message());
  return Charged(in, std::move(*s));
}

absl::StatusOr<Value> Default(Interpreter&, const Value& v, CallArgs& args) {
  const Value* dflt = args.Get(0, "default_value");
  const bool boolean = args.Bool(1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.Truthy())) return dflt != nullptr ? *dflt : Value::String("");
  return v;
}

absl::StatusOr<Value> Length(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) return Value::Int(static_cast<int64_t>(CodePointLength(v.as_string())));
  if (v.is_array()) return Value::Int(static_cast<int64_t>(v.array().size()));
  if (v.is_object()) return Value::Int(static_cast<int64_t>(v.object().items.size()));
  if (v.is_undefined()) return Value::Int(0);
  return in.Error(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<Value> Trim(Interpreter& in, const Value& v, CallArgs& args) {
  if (!v.is_string()) return in.Error(absl::StrCat("trim needs a string, got ", v.TypeName()));
  const Value* chars = args.Get(0, "chars");
  return Value::String(
      PyStrip(v.as_string(), chars != nullptr && chars->is_string() ? &chars->as_string() : nullptr, true, true));
}

absl::StatusOr<Value> ToInt(Interpreter&, const Value& v, CallArgs& args) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::Int(v.as_bool());
  if (v.is_float()) return Value::Int(static_cast<int64_t>(v.as_number()));
  if (v.is_string()) {
    char* end = nullptr;
    const std::string s = PyStrip(v.as_string(), nullptr, true, true);
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::Int(x);
  }
  const Value* dflt = args.Get(0, "default");
  return dflt != nullptr ? *dflt : Value::Int(0);
}

absl::StatusOr<Value> ToFloat(Interpreter&, const Value& v, CallArgs& args) {
  if (v.is_number() || v.is_bool()) return Value::Float(v.as_number());
  if (v.is_string()) {
    char* end = nullptr;
    const std::string s = PyStrip(v.as_string(), nullptr, true, true);
    const double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(x);
  }
  const Value* dflt = args.Get(0, "default");
  return dflt != nullptr ? *dflt : Value::Float(0.0);
}

absl::StatusOr<Value> Abs(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_int()) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_number()) return Value::Float(std::fabs(v.as_number()));
  return in.Error("abs needs a number");
}

absl::StatusOr<Value> Round(Interpreter& in, const Value& v, CallArgs& args) {
  if (!v.is_number()) return in.Error("round needs a number");
  SPAR_ASSIGN_OR_RETURN(int64_t precision, args.Int(0, "precision", 0));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return Value::Float(std::round(v.as_number() * scale) / scale);
}

// capitalize / title: the str methods of the value's str().
absl::StatusOr<Value> StrMethod(Interpreter& in, const Value& v, absl::string_view method) {
  bool found = false;
  CallArgs none;
  return in.CallMethod(Value::String(v.Str()), std::string(method), none, &found);
}

absl::StatusOr<Value> Items(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::Array();
  if (!v.is_object()) return in.Error(absl::StrCat("items needs a mapping, got ", v.TypeName()));
  bool found = false;
  CallArgs none;
  return in.CallMethod(v, "items", none, &found);
}

absl::StatusOr<Value> DictSort(Interpreter& in, const Value& v, CallArgs&) {
  if (!v.is_object()) return in.Error("dictsort needs a mapping");
  std::vector<std::pair<std::string, Value>> items = v.object().items;
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Value> out;
  for (auto& [k, x] : items) out.push_back(Value::Array({Value::String(k), x}));
  return Value::Array(std::move(out));
}

// --- sequences ---------------------------------------------------------------

absl::StatusOr<Value> List(Interpreter& in, const Value& v, CallArgs&) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq,
                        SequenceOr(in, v, absl::StrCat("'", v.TypeName(), "' object is not iterable")));
  return Value::Array(std::move(seq));
}

absl::StatusOr<Value> End(Interpreter& in, const Value& v, absl::string_view name, bool first) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, absl::StrCat(name, " needs a sequence")));
  if (seq.empty()) return Value();
  return first ? seq.front() : seq.back();
}

absl::StatusOr<Value> Reverse(Interpreter& in, const Value& v, CallArgs&) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, "reverse needs a sequence"));
  std::reverse(seq.begin(), seq.end());
  if (v.is_string()) {
    std::string out;
    for (const Value& c : seq) out += c.as_string();
    return Value::String(std::move(out));
  }
  return Value::Array(std::move(seq));
}

absl::StatusOr<Value> Join(Interpreter& in, const Value& v, CallArgs& args) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, "join needs a sequence"));
  const Value* sep = args.Get(0, "d");
  std::string out;
  for (size_t k = 0; k < seq.size(); ++k) {
    if (k > 0 && sep != nullptr) out += sep->Str();
    out += AttributeOf(args, seq[k]).Str();
  }
  return Charged(in, std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& in, const Value& v, CallArgs& args) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, "map needs a sequence"));
  std::vector<Value> out;
  if (args.Keyword("attribute") != nullptr) {
    const Value* dflt = args.Keyword("default");
    for (const Value& item : seq) {
      Value x = AttributeOf(args, item);
      out.push_back(x.is_undefined() && dflt != nullptr ? *dflt : x);
    }
    return Value::Array(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return in.Error("map needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : seq) {
    SPAR_RETURN_IF_ERROR(in.Step());
    SPAR_ASSIGN_OR_RETURN(Value x, in.ApplyFilter(filter, item, rest));
    out.push_back(std::move(x));
  }
  return Value::Array(std::move(out));
}

// select / reject (by_attr false) and selectattr / rejectattr: the items
// whose test (or, without one, truthiness) is `keep_if`.
absl::StatusOr<Value> Select(Interpreter& in, const Value& v, CallArgs& args, absl::string_view name, bool by_attr,
                             bool keep_if) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, absl::StrCat(name, " needs a sequence")));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) return in.Error(absl::StrCat(name, " needs an attribute name"));
    attr = args.positional[0].Str();
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) test = args.positional[next].Str();
  CallArgs test_args;
  if (next + 1 < args.positional.size()) {
    test_args.positional.assign(args.positional.begin() + next + 1, args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : seq) {
    SPAR_RETURN_IF_ERROR(in.Step());
    const Value x = by_attr ? GetAttr(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = x.Truthy();
    } else {
      SPAR_ASSIGN_OR_RETURN(pass, in.ApplyTest(test, x, test_args));
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value::Array(std::move(out));
}

absl::StatusOr<Value> Unique(Interpreter& in, const Value& v, CallArgs&) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, "unique needs a sequence"));
  std::vector<Value> out;
  for (const Value& item : seq) {
    SPAR_RETURN_IF_ERROR(in.Step());
    bool seen = false;
    for (const Value& o : out) seen = seen || o.Equals(item);
    if (!seen) out.push_back(item);
  }
  return Value::Array(std::move(out));
}

enum class Order { kSort, kMin, kMax };

absl::StatusOr<Value> Sort(Interpreter& in, const Value& v, CallArgs& args, absl::string_view name, Order order) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, absl::StrCat(name, " needs a sequence")));
  absl::Status st;
  auto less = [&](const Value& a, const Value& b) {
    auto c = Compare(AttributeOf(args, a), AttributeOf(args, b));
    if (!c.ok()) {
      st = c.status();
      return false;
    }
    return *c < 0;
  };
  if (order == Order::kSort) {
    std::stable_sort(seq.begin(), seq.end(), less);
    if (!st.ok()) return in.Error(st.message());
    if (args.Bool(0, "reverse", false)) std::reverse(seq.begin(), seq.end());
    return Value::Array(std::move(seq));
  }
  if (seq.empty()) return Value();
  auto it = order == Order::kMin ? std::min_element(seq.begin(), seq.end(), less)
                                 : std::max_element(seq.begin(), seq.end(), less);
  if (!st.ok()) return in.Error(st.message());
  return *it;
}

absl::StatusOr<Value> Sum(Interpreter& in, const Value& v, CallArgs& args) {
  SPAR_ASSIGN_OR_RETURN(std::vector<Value> seq, SequenceOr(in, v, "sum needs a sequence"));
  Value total = Value::Int(0);
  if (const Value* start = args.Get(1, "start")) total = *start;
  for (const Value& item : seq) {
    const Value x = AttributeOf(args, item);
    if (!(x.is_number() || x.is_bool()) || !(total.is_number() || total.is_bool())) {
      return in.Error("sum needs numbers");
    }
    if (x.is_float() || total.is_float()) {
      total = Value::Float(total.as_number() + x.as_number());
    } else {
      total = Value::Int(static_cast<int64_t>(total.as_number()) + static_cast<int64_t>(x.as_number()));
    }
  }
  return total;
}

// --- text --------------------------------------------------------------------

absl::StatusOr<Value> Indent(Interpreter& in, const Value& v, CallArgs& args) {
  // Jinja2's do_indent: every line but the first (unless first=True),
  // blank lines only when blank=True.
  const Value* w = args.Get(0, "width");
  SPAR_ASSIGN_OR_RETURN(int64_t width,
                        w != nullptr && w->is_string() ? absl::StatusOr<int64_t>(0) : args.Int(0, "width", 4));
  const std::string pad =
      w != nullptr && w->is_string() ? w->as_string() : std::string(std::clamp<int64_t>(width, 0, 256), ' ');
  const bool first = args.Bool(1, "first", false);
  const bool blank = args.Bool(2, "blank", false);
  std::vector<std::string> lines;
  const std::string s = v.Str() + "\n";
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t nl = s.find('\n', pos);
    lines.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t k = 1; k < lines.size(); ++k) {
    out += "\n";
    if (blank || !lines[k].empty()) out += pad;
    out += lines[k];
  }
  if (first) out = pad + out;
  return Charged(in, std::move(out));
}

absl::StatusOr<Value> Replace(Interpreter& in, const Value& v, CallArgs& args) {
  const Value* from = args.Get(0, "old");
  const Value* to = args.Get(1, "new");
  if (from == nullptr || to == nullptr) return in.Error("replace needs two arguments");
  SPAR_ASSIGN_OR_RETURN(int64_t count, args.Int(2, "count", -1));
  return Charged(in, ReplaceAll(v.Str(), from->Str(), to->Str(), count));
}

absl::StatusOr<Value> Format(Interpreter& in, const Value& v, CallArgs& args) {
  // Python's printf-style `fmt % args` for %s, %d, %i, %r and %%.
  const std::string fmt = v.Str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out.push_back(fmt[i]);
      continue;
    }
    const char spec = fmt[++i];
    if (spec == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.positional.size()) return in.Error("format: not enough arguments");
    const Value& a = args.positional[next++];
    if (spec == 's') {
      out += a.Str();
    } else if (spec == 'r') {
      out += a.Repr();
    } else if (spec == 'd' || spec == 'i') {
      if (!(a.is_number() || a.is_bool())) return in.Error("format: %d needs a number");
      absl::StrAppend(&out, static_cast<int64_t>(a.as_number()));
    } else {
      return in.Error(absl::StrCat("format: unsupported conversion %", std::string(1, spec)));
    }
  }
  return Charged(in, std::move(out));
}

absl::StatusOr<Value> AsString(Interpreter&, const Value& v, CallArgs&) { return Value::String(v.Str()); }

absl::StatusOr<Value> Escape(Interpreter&, const Value& v, CallArgs&) { return Value::String(HtmlEscape(v.Str())); }

constexpr FilterEntry kFilters[] = {
    {"abs", Abs},
    {"capitalize", [](Interpreter& in, const Value& v, CallArgs&) { return StrMethod(in, v, "capitalize"); }},
    {"count", Length},
    {"d", Default},
    {"default", Default},
    {"dictsort", DictSort},
    {"e", Escape},
    {"escape", Escape},
    {"first", [](Interpreter& in, const Value& v, CallArgs&) { return End(in, v, "first", /*first=*/true); }},
    {"float", ToFloat},
    {"format", Format},
    {"indent", Indent},
    {"int", ToInt},
    {"items", Items},
    {"join", Join},
    {"last", [](Interpreter& in, const Value& v, CallArgs&) { return End(in, v, "last", /*first=*/false); }},
    {"length", Length},
    {"list", List},
    {"lower", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return Value::String(CaseMap(v.Str(), false));
     }},
    {"map", Map},
    {"max", [](Interpreter& in, const Value& v, CallArgs& a) { return Sort(in, v, a, "max", Order::kMax); }},
    {"min", [](Interpreter& in, const Value& v, CallArgs& a) { return Sort(in, v, a, "min", Order::kMin); }},
    {"reject", [](Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, "reject", false, false); }},
    {"rejectattr",
     [](Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, "rejectattr", true, false); }},
    {"replace", Replace},
    {"reverse", Reverse},
    {"round", Round},
    {"safe", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return v; }},
    {"select", [](Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, "select", false, true); }},
    {"selectattr",
     [](Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, "selectattr", true, true); }},
    {"sort", [](Interpreter& in, const Value& v, CallArgs& a) { return Sort(in, v, a, "sort", Order::kSort); }},
    {"string", AsString},
    {"sum", Sum},
    {"title", [](Interpreter& in, const Value& v, CallArgs&) { return StrMethod(in, v, "title"); }},
    {"tojson", ToJson},
    {"trim", Trim},
    {"unique", Unique},
    {"upper", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return Value::String(CaseMap(v.Str(), true));
     }},
    {"wordcount", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
       return Value::Int(static_cast<int64_t>(PySplit(v.Str(), nullptr, -1).size()));
     }},
};
static_assert(SortedByName(kFilters));

}  // namespace

FilterFn FindFilter(std::string_view name) {
  const FilterEntry* e = FindByName(kFilters, name);
  return e == nullptr ? nullptr : e->fn;
}

}  // namespace jinja
}  // namespace spar
