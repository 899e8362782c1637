#include "text/jinja_interpreter.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {
namespace {

std::u32string ToCodePoints(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    size_t n = DecodeUtf8At(s, i, &cp);
    if (n == 0) {
      cp = kReplacementChar;
      n = 1;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string FromCodePoints(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

size_t CodePointLength(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Python's str.isspace set.
bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// str.strip / lstrip / rstrip with Python's semantics (chars or whitespace).
std::string PyStrip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string cs = ToCodePoints(s);
  std::u32string set;
  const bool use_set = chars != nullptr && chars->is_string();
  if (use_set) set = ToCodePoints(chars->as_string());
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : IsPySpace(c); };
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strip_it(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cs[e - 1])) --e;
  }
  return FromCodePoints(cs.substr(b, e - b));
}

std::vector<std::string> PySplit(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr || sep->is_none() || sep->is_undefined()) {
    // Runs of whitespace; no empty strings.
    const std::u32string cs = ToCodePoints(s);
    size_t i = 0;
    while (i < cs.size()) {
      while (i < cs.size() && IsPySpace(cs[i])) ++i;
      if (i >= cs.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cs.size();
        while (e > i && IsPySpace(cs[e - 1])) --e;
        out.push_back(FromCodePoints(cs.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < cs.size() && !IsPySpace(cs[j])) ++j;
      out.push_back(FromCodePoints(cs.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = sep->as_string();
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::u32string cs = ToCodePoints(s);
    std::string out;
    int64_t done = 0;
    for (size_t k = 0; k <= cs.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cs.size()) AppendUtf8(cs[k], &out);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string CaseMap(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : ToCodePoints(s)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c)));
    } else {
      AppendUtf8(upper ? UnicodeToUpper(c) : UnicodeToLower(c), &out);
    }
  }
  return out;
}

// Python slice semantics over n elements.
std::vector<int64_t> SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step_v, bool* ok) {
  std::vector<int64_t> idx;
  int64_t step = step_v.is_int() ? step_v.as_int() : 1;
  *ok = step != 0;
  if (!*ok) return idx;
  auto norm = [&](const Value& v, int64_t dflt, bool is_start) -> int64_t {
    if (!v.is_int()) return dflt;
    int64_t x = v.as_int();
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = norm(start, step > 0 ? 0 : n - 1, true);
  const int64_t e = norm(stop, step > 0 ? n : -1, false);
  if (step > 0) {
    for (int64_t k = b; k < e; k += step) idx.push_back(k);
  } else {
    for (int64_t k = b; k > e; k += step) idx.push_back(k);
  }
  return idx;
}

absl::StatusOr<int64_t> IntArg(const CallArgs& args, size_t pos, const char* name, int64_t dflt) {
  const Value* v = pos < args.positional.size() ? &args.positional[pos] : args.Keyword(name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return dflt;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return static_cast<int64_t>(v->as_bool());
  return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' must be an integer, got ", v->TypeName()));
}

const Value* Arg(const CallArgs& args, size_t pos, const char* name) {
  if (pos < args.positional.size()) return &args.positional[pos];
  return args.Keyword(name);
}

bool ArgBool(const CallArgs& args, size_t pos, const char* name, bool dflt) {
  const Value* v = Arg(args, pos, name);
  return v == nullptr || v->is_undefined() ? dflt : v->Truthy();
}

// Ordering used by sort/min/max and the comparison operators.
absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    const auto& x = a.array();
    const auto& y = b.array();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      SPAR_ASSIGN_OR_RETURN(int c, Compare(x[k], y[k]));
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot compare ", a.TypeName(), " with ", b.TypeName()));
}

Value GetAttr(const Value& obj, const std::string& key) {
  if (obj.is_object()) {
    const Value* v = obj.object().Find(key);
    return v == nullptr ? Value() : *v;
  }
  return Value();
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

// --- infrastructure ----------------------------------------------------------

absl::Status Interpreter::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line_, ": ", what));
}

absl::Status Interpreter::Step() {
  if (++steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(absl::StrCat("chat template line ", line_, ": more than ", limits_.max_steps,
                                                     " evaluation steps (runaway loop?)"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ChargeString(size_t bytes) {
  total_strings_ += bytes;
  if (bytes > limits_.max_output_bytes || total_strings_ > limits_.max_string_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template line ", line_, ": strings built exceed the limit (",
                     bytes > limits_.max_output_bytes ? limits_.max_output_bytes : limits_.max_string_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ChargeCopy(const Value& v) {
  // Reading a variable copies its string; big ones count against the string
  // budget so that a loop re-reading a huge message stays bounded.
  if (v.is_string() && v.as_string().size() > 4096) return ChargeString(v.as_string().size());
  return absl::OkStatus();
}

absl::Status Interpreter::Emit(absl::string_view text) {
  total_output_ += text.size();
  if (total_output_ > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("chat template line ", line_, ": output exceeds ",
                                                     limits_.max_output_bytes, " bytes"));
  }
  outputs_.back().append(text.data(), text.size());
  return absl::OkStatus();
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return Value();
}

void Interpreter::Assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

absl::StatusOr<std::string> Interpreter::Render(const Body& body, const Value& context) {
  scopes_.clear();
  outputs_.assign(1, std::string());
  total_output_ = total_strings_ = 0;
  steps_ = 0;
  call_depth_ = 0;
  Scope root;
  if (context.is_object()) {
    for (const auto& [k, v] : context.object().items) root[k] = v;
  }
  scopes_.push_back(std::move(root));
  Flow flow = Flow::kNormal;
  SPAR_RETURN_IF_ERROR(Exec(body, &flow));
  return std::move(outputs_.back());
}

// --- statements --------------------------------------------------------------

absl::Status Interpreter::Exec(const Body& body, Flow* flow) {
  for (const auto& s : body) {
    SPAR_RETURN_IF_ERROR(ExecStmt(*s, flow));
    if (*flow != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecStmt(const Stmt& s, Flow* flow) {
  line_ = s.line;
  SPAR_RETURN_IF_ERROR(Step());
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Emit(s.text);
    case Stmt::Kind::kOutput: {
      SPAR_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      return Emit(v.Str());
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        SPAR_ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (c.Truthy()) return Exec(body, flow);
      }
      return Exec(s.else_body, flow);
    case Stmt::Kind::kFor:
      return ExecFor(s);
    case Stmt::Kind::kSet: {
      SPAR_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      if (!s.attr.empty()) {
        Value target = Lookup(s.targets[0]);
        if (!target.is_object() || !target.object().is_namespace) {
          return Error(absl::StrCat("cannot assign attribute '", s.attr, "' on '", s.targets[0],
                                    "': only namespace() objects allow it"));
        }
        target.object().Set(s.attr, std::move(v));
        return absl::OkStatus();
      }
      if (s.targets.size() == 1) {
        Assign(s.targets[0], std::move(v));
        return absl::OkStatus();
      }
      if (!v.is_array() || v.array().size() != s.targets.size()) {
        return Error(absl::StrCat("cannot unpack ", v.TypeName(), " into ", s.targets.size(), " names"));
      }
      for (size_t k = 0; k < s.targets.size(); ++k) Assign(s.targets[k], v.array()[k]);
      return absl::OkStatus();
    }
    case Stmt::Kind::kSetBlock: {
      outputs_.emplace_back();
      Flow inner = Flow::kNormal;
      absl::Status st = Exec(s.body, &inner);
      std::string captured = std::move(outputs_.back());
      outputs_.pop_back();
      SPAR_RETURN_IF_ERROR(st);
      Assign(s.targets[0], Value::String(std::move(captured)));
      return absl::OkStatus();
    }
    case Stmt::Kind::kMacro: {
      const Stmt* macro = &s;
      Assign(s.text, Value::Function(s.text, [macro](Interpreter& in, CallArgs& args) {
               return in.CallMacro(*macro, args);
             }));
      return absl::OkStatus();
    }
    case Stmt::Kind::kBreak:
      *flow = Flow::kBreak;
      return absl::OkStatus();
    case Stmt::Kind::kContinue:
      *flow = Flow::kContinue;
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& s) {
  SPAR_ASSIGN_OR_RETURN(Value seq, Eval(*s.expr));
  std::vector<Value> items;
  if (seq.is_array()) {
    items = seq.array();  // a copy: the body may append to the list
    for (const Value& item : items) SPAR_RETURN_IF_ERROR(ChargeCopy(item));
  } else if (seq.is_object() && !seq.object().is_namespace) {
    for (const auto& kv : seq.object().items) items.push_back(Value::String(kv.first));
  } else if (seq.is_string()) {
    for (char32_t c : ToCodePoints(seq.as_string())) {
      std::string ch;
      AppendUtf8(c, &ch);
      items.push_back(Value::String(std::move(ch)));
    }
  } else if (!seq.is_undefined() && !seq.is_none()) {
    return Error(absl::StrCat("cannot loop over ", seq.TypeName()));
  } else if (seq.is_none()) {
    return Error("cannot loop over None");
  }
  auto bind = [&](Scope& scope, const Value& item) -> absl::Status {
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return absl::OkStatus();
    }
    if (!item.is_array() || item.array().size() != s.targets.size()) {
      return Error(absl::StrCat("cannot unpack ", item.TypeName(), " into ", s.targets.size(), " loop variables"));
    }
    for (size_t k = 0; k < s.targets.size(); ++k) scope[s.targets[k]] = item.array()[k];
    return absl::OkStatus();
  };
  if (s.cond != nullptr) {
    // `for x in xs if cond`: filter first, so loop.* counts kept items.
    std::vector<Value> kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      absl::Status st = bind(scopes_.back(), item);
      absl::StatusOr<Value> c = st.ok() ? Eval(*s.cond) : absl::StatusOr<Value>(st);
      scopes_.pop_back();
      if (!c.ok()) return c.status();
      if (c->Truthy()) kept.push_back(item);
    }
    items.swap(kept);
  }
  if (items.empty()) {
    Flow flow = Flow::kNormal;
    return Exec(s.else_body, &flow);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    line_ = s.line;
    SPAR_RETURN_IF_ERROR(Step());
    Value loop = Value::MakeObject();
    Object& o = loop.object();
    o.Set("index", Value::Int(i + 1));
    o.Set("index0", Value::Int(i));
    o.Set("revindex", Value::Int(n - i));
    o.Set("revindex0", Value::Int(n - i - 1));
    o.Set("first", Value::Bool(i == 0));
    o.Set("last", Value::Bool(i == n - 1));
    o.Set("length", Value::Int(n));
    o.Set("previtem", i > 0 ? items[i - 1] : Value());
    o.Set("nextitem", i + 1 < n ? items[i + 1] : Value());
    const int64_t index0 = i;
    o.Set("cycle", Value::Function("cycle", [index0](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
            if (args.positional.empty()) return in.Error("loop.cycle() needs arguments");
            return args.positional[index0 % args.positional.size()];
          }));
    // A fresh scope per iteration: assignments in a loop body stay there,
    // as in Jinja2 (namespace() exists for state that must escape).
    scopes_.emplace_back();
    scopes_.back()["loop"] = std::move(loop);
    absl::Status st = bind(scopes_.back(), items[i]);
    Flow flow = Flow::kNormal;
    if (st.ok()) st = Exec(s.body, &flow);
    scopes_.pop_back();
    SPAR_RETURN_IF_ERROR(st);
    if (flow == Flow::kBreak) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& macro, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Error(absl::StrCat("macro '", macro.text, "' recursion deeper than ", limits_.max_call_depth));
  }
  if (args.positional.size() > macro.params.size()) {
    return Error(absl::StrCat("macro '", macro.text, "' takes ", macro.params.size(), " arguments, got ",
                              args.positional.size()));
  }
  Scope params;
  for (size_t k = 0; k < macro.params.size(); ++k) {
    const auto& [name, def] = macro.params[k];
    if (k < args.positional.size()) {
      params[name] = args.positional[k];
    } else if (const Value* kw = args.Keyword(name)) {
      params[name] = *kw;
    } else if (def != nullptr) {
      SPAR_ASSIGN_OR_RETURN(params[name], Eval(*def));
    } else {
      params[name] = Value();
    }
  }
  // The macro sees the template's top-level names and its parameters, not
  // the caller's loop variables.
  std::vector<Scope> saved(std::make_move_iterator(scopes_.begin() + 1), std::make_move_iterator(scopes_.end()));
  scopes_.resize(1);
  scopes_.push_back(std::move(params));
  outputs_.emplace_back();
  ++call_depth_;
  const int saved_line = line_;
  Flow flow = Flow::kNormal;
  absl::Status st = Exec(macro.body, &flow);
  --call_depth_;
  line_ = saved_line;
  std::string out = std::move(outputs_.back());
  outputs_.pop_back();
  scopes_.resize(1);
  for (Scope& sc : saved) scopes_.push_back(std::move(sc));
  SPAR_RETURN_IF_ERROR(st);
  return Value::String(std::move(out));
}

// --- expressions -------------------------------------------------------------

absl::Status Interpreter::EvalArgs(const Expr& e, size_t first, CallArgs* args) {
  for (size_t k = first; k < e.args.size(); ++k) {
    SPAR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
    args->positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    SPAR_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    args->keyword.emplace_back(name, std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  SPAR_RETURN_IF_ERROR(Step());
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName: {
      Value v = Lookup(e.name);
      SPAR_RETURN_IF_ERROR(ChargeCopy(v));
      if (!v.is_undefined()) return v;
      bool found = false;
      SPAR_ASSIGN_OR_RETURN(Value g, Global(e.name, &found));
      return g;
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) {
        SPAR_ASSIGN_OR_RETURN(Value v, Eval(*a));
        items.push_back(std::move(v));
      }
      return Value::Array(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::MakeObject();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        SPAR_ASSIGN_OR_RETURN(Value key, Eval(*e.args[k]));
        SPAR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
        if (!key.is_string()) return Error("dict keys must be strings");
        d.object().Set(key.as_string(), std::move(v));
      }
      return d;
    }
    case Expr::Kind::kAttr: {
      SPAR_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      Value v = GetAttr(obj, e.name);
      SPAR_RETURN_IF_ERROR(ChargeCopy(v));
      return v;
    }
    case Expr::Kind::kIndex: {
      SPAR_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      SPAR_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      if (obj.is_object()) {
        Value v = key.is_string() ? GetAttr(obj, key.as_string()) : Value();
        SPAR_RETURN_IF_ERROR(ChargeCopy(v));
        return v;
      }
      // Indexing a string walks its code points.
      if (obj.is_string()) SPAR_RETURN_IF_ERROR(ChargeString(obj.as_string().size()));
      if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
        if (obj.is_array()) {
          const int64_t n = static_cast<int64_t>(obj.array().size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value();
          return obj.array()[i];
        }
        const std::u32string cs = ToCodePoints(obj.as_string());
        const int64_t n = static_cast<int64_t>(cs.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        std::string ch;
        AppendUtf8(cs[i], &ch);
        return Value::String(std::move(ch));
      }
      return Value();
    }
    case Expr::Kind::kSlice: {
      SPAR_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[k + 1] != nullptr) {
          SPAR_ASSIGN_OR_RETURN(parts[k], Eval(*e.args[k + 1]));
        }
      }
      bool ok = true;
      if (obj.is_array()) {
        const auto idx = SliceIndices(static_cast<int64_t>(obj.array().size()), parts[0], parts[1], parts[2], &ok);
        if (!ok) return Error("slice step cannot be zero");
        std::vector<Value> out;
        for (int64_t i : idx) out.push_back(obj.array()[i]);
        return Value::Array(std::move(out));
      }
      if (obj.is_string()) {
        SPAR_RETURN_IF_ERROR(ChargeString(obj.as_string().size()));
        const std::u32string cs = ToCodePoints(obj.as_string());
        const auto idx = SliceIndices(static_cast<int64_t>(cs.size()), parts[0], parts[1], parts[2], &ok);
        if (!ok) return Error("slice step cannot be zero");
        std::u32string out;
        for (int64_t i : idx) out.push_back(cs[i]);
        return Value::String(FromCodePoints(out));
      }
      if (obj.is_undefined()) return Value();
      return Error(absl::StrCat("cannot slice ", obj.TypeName()));
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
      return EvalFilter(e);
    case Expr::Kind::kTest: {
      SPAR_ASSIGN_OR_RETURN(bool b, EvalTest(e));
      return Value::Bool(b);
    }
    case Expr::Kind::kUnary: {
      SPAR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_int()) return Value::Int(e.name == "-" ? -v.as_int() : v.as_int());
      if (v.is_float()) return Value::Float(e.name == "-" ? -v.as_number() : v.as_number());
      if (v.is_bool()) return Value::Int(e.name == "-" ? -static_cast<int64_t>(v.as_bool()) : v.as_bool());
      return Error(absl::StrCat("bad operand type for unary ", e.name, ": ", v.TypeName()));
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kAnd: {
      SPAR_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (!a.Truthy()) return a;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kOr: {
      SPAR_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (a.Truthy()) return a;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kConditional: {
      SPAR_ASSIGN_OR_RETURN(Value c, Eval(*e.args[1]));
      if (c.Truthy()) return Eval(*e.args[0]);
      if (e.args[2] == nullptr) return Value();
      return Eval(*e.args[2]);
    }
  }
  return Error("unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  line_ = e.line;
  SPAR_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  SPAR_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  const std::string& op = e.name;
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) return Error(absl::StrCat("'in <string>' requires a string, not ", a.TypeName()));
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_array()) {
      for (const Value& x : b.array()) {
        if (x.Equals(a)) {
          found = true;
          break;
        }
      }
    } else if (b.is_object()) {
      found = a.is_string() && b.object().Find(a.as_string()) != nullptr;
    } else if (b.is_undefined()) {
      found = false;
    } else {
      return Error(absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    return Value::Bool(op == "in" ? found : !found);
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    auto c = Compare(a, b);
    if (!c.ok()) return Error(c.status().message());
    const int r = *c;
    return Value::Bool(op == "<" ? r < 0 : op == ">" ? r > 0 : op == "<=" ? r <= 0 : r >= 0);
  }
  if (op == "~") {
    std::string s = a.Str() + b.Str();
    SPAR_RETURN_IF_ERROR(ChargeString(s.size()));
    return Value::String(std::move(s));
  }
  const bool num = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const bool ints = num && !a.is_float() && !b.is_float();
  auto iv = [](const Value& v) { return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int(); };
  if (op == "+") {
    if (ints) return Value::Int(iv(a) + iv(b));
    if (num) return Value::Float(a.as_number() + b.as_number());
    if (a.is_string() && b.is_string()) {
      SPAR_RETURN_IF_ERROR(ChargeString(a.as_string().size() + b.as_string().size()));
      return Value::String(a.as_string() + b.as_string());
    }
    if (a.is_array() && b.is_array()) {
      std::vector<Value> out = a.array();
      out.insert(out.end(), b.array().begin(), b.array().end());
      SPAR_RETURN_IF_ERROR(ChargeString(out.size() * sizeof(Value)));
      return Value::Array(std::move(out));
    }
  } else if (op == "-") {
    if (ints) return Value::Int(iv(a) - iv(b));
    if (num) return Value::Float(a.as_number() - b.as_number());
  } else if (op == "*") {
    if (ints) return Value::Int(iv(a) * iv(b));
    if (num) return Value::Float(a.as_number() * b.as_number());
    const Value* seq = a.is_string() || a.is_array() ? &a : &b;
    const Value* count = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_array()) && (count->is_int() || count->is_bool())) {
      const int64_t n = std::max<int64_t>(0, iv(*count));
      if (seq->is_string()) {
        const size_t bytes = seq->as_string().size() * static_cast<size_t>(std::min<int64_t>(n, 1LL << 40));
        SPAR_RETURN_IF_ERROR(ChargeString(bytes));
        std::string out;
        out.reserve(bytes);
        for (int64_t k = 0; k < n; ++k) out += seq->as_string();
        return Value::String(std::move(out));
      }
      const size_t bytes = seq->array().size() * sizeof(Value) * static_cast<size_t>(std::min<int64_t>(n, 1LL << 40));
      SPAR_RETURN_IF_ERROR(ChargeString(bytes));
      std::vector<Value> out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->array().begin(), seq->array().end());
      return Value::Array(std::move(out));
    }
  } else if (op == "/") {
    if (num) {
      if (b.as_number() == 0) return Error("division by zero");
      return Value::Float(a.as_number() / b.as_number());
    }
  } else if (op == "//") {
    if (num) {
      if (b.as_number() == 0) return Error("integer division by zero");
      if (ints) {
        const int64_t x = iv(a), y = iv(b);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::Int(q);
      }
      return Value::Float(std::floor(a.as_number() / b.as_number()));
    }
  } else if (op == "%") {
    if (num) {
      if (b.as_number() == 0) return Error("modulo by zero");
      if (ints) {
        const int64_t x = iv(a), y = iv(b);
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value::Int(r);
      }
      const double y = b.as_number();
      double r = std::fmod(a.as_number(), y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::Float(r);
    }
  } else if (op == "**") {
    if (ints && iv(b) >= 0) {
      int64_t base = iv(a), exp = iv(b), result = 1;
      for (int64_t k = 0; k < exp && k < 64; ++k) result *= base;
      return Value::Int(result);
    }
    if (num) return Value::Float(std::pow(a.as_number(), b.as_number()));
  }
  return Error(absl::StrCat("unsupported operand types for ", op, ": '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  CallArgs args;
  if (callee.kind == Expr::Kind::kAttr) {
    SPAR_ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0]));
    SPAR_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
    line_ = e.line;
    bool found = false;
    SPAR_ASSIGN_OR_RETURN(Value r, CallMethod(obj, callee.name, args, &found));
    if (found) return r;
    Value fn = GetAttr(obj, callee.name);
    if (fn.is_function()) return fn.function()(*this, args);
    return Error(absl::StrCat("'", obj.TypeName(), "' object has no method '", callee.name, "'"));
  }
  SPAR_ASSIGN_OR_RETURN(Value fn, Eval(callee));
  SPAR_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
  line_ = e.line;
  if (!fn.is_function()) {
    return Error(absl::StrCat(callee.kind == Expr::Kind::kName ? absl::StrCat("'", callee.name, "'") : fn.TypeName(),
                              fn.is_undefined() ? " is undefined" : " is not callable"));
  }
  return fn.function()(*this, args);
}

absl::StatusOr<Value> Interpreter::Global(const std::string& name, bool* found) {
  *found = true;
  if (name == "range") {
    return Value::Function("range", [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
      int64_t start = 0, stop = 0, step = 1;
      std::vector<int64_t> v;
      for (const Value& a : args.positional) {
        if (!a.is_int()) return in.Error("range() arguments must be integers");
        v.push_back(a.as_int());
      }
      if (v.size() == 1) {
        stop = v[0];
      } else if (v.size() == 2 || v.size() == 3) {
        start = v[0];
        stop = v[1];
        if (v.size() == 3) step = v[2];
      } else {
        return in.Error("range() takes 1 to 3 arguments");
      }
      if (step == 0) return in.Error("range() step must not be zero");
      const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                     : (start > stop ? (start - stop - step - 1) / -step : 0);
      SPAR_RETURN_IF_ERROR(in.ChargeString(static_cast<size_t>(count) * sizeof(Value)));
      std::vector<Value> out;
      out.reserve(count);
      for (int64_t k = 0; k < count; ++k) out.push_back(Value::Int(start + k * step));
      return Value::Array(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value::Function(name, [ns](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
      Value o = ns ? Value::Namespace() : Value::MakeObject();
      for (const Value& a : args.positional) {
        if (!a.is_object()) return in.Error("namespace()/dict() positional arguments must be mappings");
        for (const auto& [k, v] : a.object().items) o.object().Set(k, v);
      }
      for (const auto& [k, v] : args.keyword) o.object().Set(k, v);
      return o;
    });
  }
  if (name == "raise_exception") {
    return Value::Function(name, [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
      const std::string msg = args.positional.empty() ? "" : args.positional[0].Str();
      return in.Error(absl::StrCat("raise_exception: ", msg));
    });
  }
  if (name == "strftime_now") {
    return Value::Function(name, [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
      if (args.positional.empty() || !args.positional[0].is_string()) return in.Error("strftime_now(format) needs a format");
      const std::time_t now = std::time(nullptr);
      std::tm tm_now;
      localtime_r(&now, &tm_now);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &tm_now);
      return Value::String(std::string(buf, n));
    });
  }
  *found = false;
  return Value();
}

// --- methods -----------------------------------------------------------------

absl::StatusOr<Value> Interpreter::CallMethod(const Value& obj, const std::string& name, CallArgs& args, bool* found) {
  *found = true;
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (name == "startswith" || name == "endswith") {
      const Value* p = Arg(args, 0, "prefix");
      if (p == nullptr) return Error(absl::StrCat(name, "() needs an argument"));
      std::vector<std::string> cands;
      if (p->is_string()) {
        cands.push_back(p->as_string());
      } else if (p->is_array()) {
        for (const Value& v : p->array()) cands.push_back(v.Str());
      } else {
        return Error(absl::StrCat(name, "() argument must be a string or tuple"));
      }
      for (const std::string& c : cands) {
        const bool hit = name == "startswith" ? s.compare(0, c.size(), c) == 0 && s.size() >= c.size()
                                              : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value::String(PyStrip(s, Arg(args, 0, "chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      SPAR_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(args, 1, "maxsplit", -1));
      const Value* sep = Arg(args, 0, "sep");
      if (sep != nullptr && sep->is_string() && sep->as_string().empty()) return Error("empty separator");
      std::vector<std::string> parts;
      if (name == "rsplit" && maxsplit >= 0 && sep != nullptr && sep->is_string()) {
        // Split from the right: at most maxsplit cuts, counted from the end.
        const std::string& d = sep->as_string();
        std::string rest = s;
        std::vector<std::string> rev;
        while (static_cast<int64_t>(rev.size()) < maxsplit) {
          const size_t hit = rest.rfind(d);
          if (hit == std::string::npos) break;
          rev.push_back(rest.substr(hit + d.size()));
          rest.resize(hit);
        }
        parts.push_back(rest);
        parts.insert(parts.end(), rev.rbegin(), rev.rend());
      } else {
        parts = PySplit(s, sep, maxsplit);
      }
      std::vector<Value> out;
      for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
      SPAR_RETURN_IF_ERROR(ChargeString(s.size()));
      return Value::Array(std::move(out));
    }
    if (name == "splitlines") {
      std::vector<Value> out;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t e = s.find_first_of("\r\n", pos);
        if (e == std::string::npos) {
          out.push_back(Value::String(s.substr(pos)));
          break;
        }
        out.push_back(Value::String(s.substr(pos, e - pos)));
        pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
      }
      return Value::Array(std::move(out));
    }
    if (name == "replace") {
      const Value* from = Arg(args, 0, "old");
      const Value* to = Arg(args, 1, "new");
      if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
        return Error("replace() needs two strings");
      }
      SPAR_ASSIGN_OR_RETURN(int64_t count, IntArg(args, 2, "count", -1));
      std::string out = ReplaceAll(s, from->as_string(), to->as_string(), count);
      SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
      return Value::String(std::move(out));
    }
    if (name == "upper") return Value::String(CaseMap(s, true));
    if (name == "lower") return Value::String(CaseMap(s, false));
    if (name == "capitalize" || name == "title") {
      std::u32string cs = ToCodePoints(s);
      bool start = true;
      for (size_t k = 0; k < cs.size(); ++k) {
        const bool alpha = IsUnicodeAlphanumeric(cs[k]);
        if (name == "capitalize") {
          cs[k] = k == 0 ? UnicodeToUpper(cs[k]) : UnicodeToLower(cs[k]);
        } else {
          cs[k] = start && alpha ? UnicodeToUpper(cs[k]) : UnicodeToLower(cs[k]);
          start = !alpha;
        }
      }
      return Value::String(FromCodePoints(cs));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      const Value* sub = Arg(args, 0, "sub");
      if (sub == nullptr || !sub->is_string()) return Error(absl::StrCat(name, "() needs a string"));
      const std::string& t = sub->as_string();
      if (name == "count") {
        if (t.empty()) return Value::Int(static_cast<int64_t>(CodePointLength(s)) + 1);
        int64_t n = 0;
        for (size_t pos = s.find(t); pos != std::string::npos; pos = s.find(t, pos + t.size())) ++n;
        return Value::Int(n);
      }
      const size_t pos = name == "rfind" ? s.rfind(t) : s.find(t);
      if (pos == std::string::npos) {
        if (name == "index") return Error("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CodePointLength(s.substr(0, pos))));
    }
    if (name == "join") {
      const Value* items = Arg(args, 0, "iterable");
      if (items == nullptr || !items->is_array()) return Error("join() needs a list");
      std::string out;
      for (size_t k = 0; k < items->array().size(); ++k) {
        if (k > 0) out += s;
        out += items->array()[k].Str();
      }
      SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
      return Value::String(std::move(out));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
        name == "islower") {
      const std::u32string cs = ToCodePoints(s);
      if (cs.empty()) return Value::Bool(false);
      bool all = true, cased = false;
      for (char32_t c : cs) {
        if (name == "isdigit") all = all && IsUnicodeNumeric(c);
        if (name == "isalpha") all = all && IsUnicodeAlphanumeric(c) && !IsUnicodeNumeric(c);
        if (name == "isalnum") all = all && IsUnicodeAlphanumeric(c);
        if (name == "isspace") all = all && IsPySpace(c);
        if (name == "isupper" || name == "islower") {
          const bool up = UnicodeToLower(c) != c, low = UnicodeToUpper(c) != c;
          cased = cased || up || low;
          if (name == "isupper" && low) all = false;
          if (name == "islower" && up) all = false;
        }
      }
      if (name == "isupper" || name == "islower") return Value::Bool(all && cased);
      return Value::Bool(all);
    }
  } else if (obj.is_object() && !obj.object().is_namespace) {
    Object& o = obj.object();
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      for (const auto& [k, v] : o.items) {
        if (name == "items") out.push_back(Value::Array({Value::String(k), v}));
        if (name == "keys") out.push_back(Value::String(k));
        if (name == "values") out.push_back(v);
      }
      return Value::Array(std::move(out));
    }
    if (name == "get") {
      const Value* key = Arg(args, 0, "key");
      if (key == nullptr) return Error("get() needs a key");
      const Value* v = key->is_string() ? o.Find(key->as_string()) : nullptr;
      if (v != nullptr) return *v;
      const Value* dflt = Arg(args, 1, "default");
      return dflt != nullptr ? *dflt : Value::None();
    }
  } else if (obj.is_array()) {
    std::vector<Value>& a = obj.array();
    if (name == "append") {
      if (args.positional.size() != 1) return Error("append() takes exactly one argument");
      SPAR_RETURN_IF_ERROR(ChargeString(sizeof(Value)));
      a.push_back(args.positional[0]);
      return Value::None();
    }
    if (name == "extend") {
      if (args.positional.size() != 1 || !args.positional[0].is_array()) return Error("extend() needs a list");
      std::vector<Value> more = args.positional[0].array();
      SPAR_RETURN_IF_ERROR(ChargeString(more.size() * sizeof(Value)));
      a.insert(a.end(), more.begin(), more.end());
      return Value::None();
    }
    if (name == "pop") {
      if (a.empty()) return Error("pop from empty list");
      SPAR_ASSIGN_OR_RETURN(int64_t i, IntArg(args, 0, "index", -1));
      if (i < 0) i += static_cast<int64_t>(a.size());
      if (i < 0 || i >= static_cast<int64_t>(a.size())) return Error("pop index out of range");
      Value v = a[i];
      a.erase(a.begin() + i);
      return v;
    }
    if (name == "index" || name == "count") {
      if (args.positional.empty()) return Error(absl::StrCat(name, "() needs an argument"));
      int64_t n = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        if (a[k].Equals(args.positional[0])) {
          if (name == "index") return Value::Int(static_cast<int64_t>(k));
          ++n;
        }
      }
      if (name == "index") return Error("value is not in list");
      return Value::Int(n);
    }
  }
  *found = false;
  return Value();
}

// --- filters -----------------------------------------------------------------

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e) {
  SPAR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  CallArgs args;
  SPAR_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
  line_ = e.line;
  return ApplyFilter(e.name, v, args);
}

absl::StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& v, CallArgs& args) {
  auto attribute_of = [&](const Value& item) -> Value {
    const Value* attr = args.Keyword("attribute");
    if (attr == nullptr) return item;
    Value cur = item;
    // Dotted paths ("a.b") walk nested mappings.
    std::string path = attr->Str();
    size_t pos = 0;
    while (true) {
      const size_t dot = path.find('.', pos);
      cur = GetAttr(cur, path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    return cur;
  };
  if (name == "tojson") {
    JsonDumpOptions opt;
    SPAR_ASSIGN_OR_RETURN(int64_t indent, IntArg(args, 0, "indent", -1));
    opt.indent = static_cast<int>(std::min<int64_t>(indent, 64));
    opt.ensure_ascii = ArgBool(args, 99, "ensure_ascii", false);
    opt.sort_keys = ArgBool(args, 99, "sort_keys", false);
    if (const Value* sep = args.Keyword("separators"); sep != nullptr && sep->is_array() && sep->array().size() == 2) {
      opt.item_separator = sep->array()[0].Str();
      opt.key_separator = sep->array()[1].Str();
    }
    auto s = DumpJson(v, opt);
    if (!s.ok()) return Error(s.status().message());
    SPAR_RETURN_IF_ERROR(ChargeString(s->size()));
    return Value::String(std::move(*s));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = Arg(args, 0, "default_value");
    const bool boolean = ArgBool(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.Truthy())) return dflt != nullptr ? *dflt : Value::String("");
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(static_cast<int64_t>(CodePointLength(v.as_string())));
    if (v.is_array()) return Value::Int(static_cast<int64_t>(v.array().size()));
    if (v.is_object()) return Value::Int(static_cast<int64_t>(v.object().items.size()));
    if (v.is_undefined()) return Value::Int(0);
    return Error(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
  if (name == "trim") {
    if (!v.is_string()) return Error(absl::StrCat("trim needs a string, got ", v.TypeName()));
    return Value::String(PyStrip(v.as_string(), Arg(args, 0, "chars"), true, true));
  }
  if (name == "string") return Value::String(v.Str());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value::String(HtmlEscape(v.Str()));
  if (name == "lower" || name == "upper") return Value::String(CaseMap(v.Str(), name == "upper"));
  if (name == "capitalize" || name == "title") {
    bool found = false;
    CallArgs none;
    return CallMethod(Value::String(v.Str()), name, none, &found);
  }
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_bool()) return Value::Int(v.as_bool());
    if (v.is_float()) return Value::Int(static_cast<int64_t>(v.as_number()));
    if (v.is_string()) {
      char* end = nullptr;
      const std::string s = PyStrip(v.as_string(), nullptr, true, true);
      const long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::Int(x);
    }
    const Value* dflt = Arg(args, 0, "default");
    return dflt != nullptr ? *dflt : Value::Int(0);
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value::Float(v.as_number());
    if (v.is_string()) {
      char* end = nullptr;
      const std::string s = PyStrip(v.as_string(), nullptr, true, true);
      const double x = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(x);
    }
    const Value* dflt = Arg(args, 0, "default");
    return dflt != nullptr ? *dflt : Value::Float(0.0);
  }
  if (name == "abs") {
    if (v.is_int()) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value::Float(std::fabs(v.as_number()));
    return Error("abs needs a number");
  }
  if (name == "round") {
    if (!v.is_number()) return Error("round needs a number");
    SPAR_ASSIGN_OR_RETURN(int64_t precision, IntArg(args, 0, "precision", 0));
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::Float(std::round(v.as_number() * scale) / scale);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::Array();
    if (!v.is_object()) return Error(absl::StrCat("items needs a mapping, got ", v.TypeName()));
    bool found = false;
    CallArgs none;
    return CallMethod(v, "items", none, &found);
  }
  if (name == "dictsort") {
    if (!v.is_object()) return Error("dictsort needs a mapping");
    std::vector<std::pair<std::string, Value>> items = v.object().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Value> out;
    for (auto& [k, x] : items) out.push_back(Value::Array({Value::String(k), x}));
    return Value::Array(std::move(out));
  }
  // Filters over sequences.
  std::vector<Value> seq;
  bool is_seq = true;
  if (v.is_array()) {
    seq = v.array();
  } else if (v.is_string()) {
    for (char32_t c : ToCodePoints(v.as_string())) {
      std::string ch;
      AppendUtf8(c, &ch);
      seq.push_back(Value::String(std::move(ch)));
    }
  } else if (v.is_object() && !v.object().is_namespace) {
    for (const auto& kv : v.object().items) seq.push_back(Value::String(kv.first));
  } else if (v.is_undefined()) {
    // Iterating an undefined value yields nothing in Jinja2.
  } else {
    is_seq = false;
  }
  if (name == "list") {
    if (!is_seq) return Error(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
    return Value::Array(std::move(seq));
  }
  if (name == "first" || name == "last") {
    if (!is_seq) return Error(absl::StrCat(name, " needs a sequence"));
    if (seq.empty()) return Value();
    return name == "first" ? seq.front() : seq.back();
  }
  if (name == "reverse") {
    if (!is_seq) return Error("reverse needs a sequence");
    std::reverse(seq.begin(), seq.end());
    if (v.is_string()) {
      std::string out;
      for (const Value& c : seq) out += c.as_string();
      return Value::String(std::move(out));
    }
    return Value::Array(std::move(seq));
  }
  if (name == "join") {
    if (!is_seq) return Error("join needs a sequence");
    const Value* sep = Arg(args, 0, "d");
    std::string out;
    for (size_t k = 0; k < seq.size(); ++k) {
      if (k > 0 && sep != nullptr) out += sep->Str();
      out += attribute_of(seq[k]).Str();
    }
    SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "map") {
    if (!is_seq) return Error("map needs a sequence");
    std::vector<Value> out;
    if (args.Keyword("attribute") != nullptr) {
      const Value* dflt = args.Keyword("default");
      for (const Value& item : seq) {
        Value x = attribute_of(item);
        out.push_back(x.is_undefined() && dflt != nullptr ? *dflt : x);
      }
      return Value::Array(std::move(out));
    }
    if (args.positional.empty() || !args.positional[0].is_string()) return Error("map needs a filter name or attribute=");
    const std::string filter = args.positional[0].as_string();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : seq) {
      SPAR_RETURN_IF_ERROR(Step());
      SPAR_ASSIGN_OR_RETURN(Value x, ApplyFilter(filter, item, rest));
      out.push_back(std::move(x));
    }
    return Value::Array(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    if (!is_seq) return Error(absl::StrCat(name, " needs a sequence"));
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (args.positional.empty()) return Error(absl::StrCat(name, " needs an attribute name"));
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
      SPAR_RETURN_IF_ERROR(Step());
      const Value x = by_attr ? GetAttr(item, attr) : item;
      bool pass;
      if (test.empty()) {
        pass = x.Truthy();
      } else {
        SPAR_ASSIGN_OR_RETURN(pass, ApplyTest(test, x, test_args));
      }
      if (pass == keep_if) out.push_back(item);
    }
    return Value::Array(std::move(out));
  }
  if (name == "unique") {
    if (!is_seq) return Error("unique needs a sequence");
    std::vector<Value> out;
    for (const Value& item : seq) {
      SPAR_RETURN_IF_ERROR(Step());
      bool seen = false;
      for (const Value& o : out) seen = seen || o.Equals(item);
      if (!seen) out.push_back(item);
    }
    return Value::Array(std::move(out));
  }
  if (name == "sort" || name == "min" || name == "max") {
    if (!is_seq) return Error(absl::StrCat(name, " needs a sequence"));
    absl::Status st;
    auto less = [&](const Value& a, const Value& b) {
      auto c = Compare(attribute_of(a), attribute_of(b));
      if (!c.ok()) {
        st = c.status();
        return false;
      }
      return *c < 0;
    };
    if (name == "sort") {
      std::stable_sort(seq.begin(), seq.end(), less);
      if (!st.ok()) return Error(st.message());
      if (ArgBool(args, 0, "reverse", false)) std::reverse(seq.begin(), seq.end());
      return Value::Array(std::move(seq));
    }
    if (seq.empty()) return Value();
    auto it = name == "min" ? std::min_element(seq.begin(), seq.end(), less) : std::max_element(seq.begin(), seq.end(), less);
    if (!st.ok()) return Error(st.message());
    return *it;
  }
  if (name == "sum") {
    if (!is_seq) return Error("sum needs a sequence");
    Value total = Value::Int(0);
    if (const Value* start = Arg(args, 1, "start")) total = *start;
    for (const Value& item : seq) {
      const Value x = attribute_of(item);
      if (!(x.is_number() || x.is_bool()) || !(total.is_number() || total.is_bool())) return Error("sum needs numbers");
      if (x.is_float() || total.is_float()) {
        total = Value::Float(total.as_number() + x.as_number());
      } else {
        total = Value::Int(static_cast<int64_t>(total.as_number()) + static_cast<int64_t>(x.as_number()));
      }
    }
    return total;
  }
  if (name == "indent") {
    // Jinja2's do_indent: every line but the first (unless first=True),
    // blank lines only when blank=True.
    const Value* w = Arg(args, 0, "width");
    SPAR_ASSIGN_OR_RETURN(int64_t width, w != nullptr && w->is_string() ? absl::StatusOr<int64_t>(0)
                                                                       : IntArg(args, 0, "width", 4));
    const std::string pad = w != nullptr && w->is_string() ? w->as_string() : std::string(std::clamp<int64_t>(width, 0, 256), ' ');
    const bool first = ArgBool(args, 1, "first", false);
    const bool blank = ArgBool(args, 2, "blank", false);
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
    SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    const Value* from = Arg(args, 0, "old");
    const Value* to = Arg(args, 1, "new");
    if (from == nullptr || to == nullptr) return Error("replace needs two arguments");
    SPAR_ASSIGN_OR_RETURN(int64_t count, IntArg(args, 2, "count", -1));
    std::string out = ReplaceAll(v.Str(), from->Str(), to->Str(), count);
    SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "format") {
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
      if (next >= args.positional.size()) return Error("format: not enough arguments");
      const Value& a = args.positional[next++];
      if (spec == 's') {
        out += a.Str();
      } else if (spec == 'r') {
        out += a.Repr();
      } else if (spec == 'd' || spec == 'i') {
        if (!(a.is_number() || a.is_bool())) return Error("format: %d needs a number");
        absl::StrAppend(&out, static_cast<int64_t>(a.as_number()));
      } else {
        return Error(absl::StrCat("format: unsupported conversion %", std::string(1, spec)));
      }
    }
    SPAR_RETURN_IF_ERROR(ChargeString(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "wordcount") return Value::Int(static_cast<int64_t>(PySplit(v.Str(), nullptr, -1).size()));
  return Error(absl::StrCat("unknown filter '", name, "'"));
}

// --- tests -------------------------------------------------------------------

absl::StatusOr<bool> Interpreter::EvalTest(const Expr& e) {
  SPAR_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  CallArgs args;
  SPAR_RETURN_IF_ERROR(EvalArgs(e, 1, &args));
  line_ = e.line;
  SPAR_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, v, args));
  return e.negated ? !r : r;
}

absl::StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& v, const CallArgs& args) {
  const Value* arg = args.positional.empty() ? nullptr : &args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_object() && !v.object().is_namespace;
  if (name == "iterable") return v.is_string() || v.is_array() || (v.is_object() && !v.object().is_namespace);
  if (name == "sequence") return v.is_string() || v.is_array() || (v.is_object() && !v.object().is_namespace);
  if (name == "callable") return v.is_function();
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.as_string() == CaseMap(v.as_string(), name == "upper");
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int()) return Error(absl::StrCat("test '", name, "' needs an integer"));
    if (name == "divisibleby") {
      if (arg == nullptr || !arg->is_int() || arg->as_int() == 0) return Error("divisibleby needs a non-zero integer");
      return v.as_int() % arg->as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (arg == nullptr) return Error(absl::StrCat("unknown test '", name, "' or missing argument"));
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(*arg);
  if (name == "ne" || name == "!=") return !v.Equals(*arg);
  if (name == "sameas") {
    if (v.type() != arg->type()) return false;
    if (v.is_array() || v.is_object()) return v.Equals(*arg) && (v.is_array() ? &v.array() == &arg->array()
                                                                              : &v.object() == &arg->object());
    return v.Equals(*arg);
  }
  if (name == "in") {
    if (arg->is_array()) {
      for (const Value& x : arg->array()) {
        if (x.Equals(v)) return true;
      }
      return false;
    }
    if (arg->is_string()) return v.is_string() && arg->as_string().find(v.as_string()) != std::string::npos;
    if (arg->is_object()) return v.is_string() && arg->object().Find(v.as_string()) != nullptr;
    return false;
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" || name == ">" ||
      name == ">=" || name == "lessthan" || name == "greaterthan") {
    auto c = Compare(v, *arg);
    if (!c.ok()) return Error(c.status().message());
    if (name == "lt" || name == "<" || name == "lessthan") return *c < 0;
    if (name == "le" || name == "<=") return *c <= 0;
    if (name == "gt" || name == ">" || name == "greaterthan") return *c > 0;
    return *c >= 0;
  }
  return Error(absl::StrCat("unknown test '", name, "'"));
}

}  // namespace jinja
}  // namespace spar
