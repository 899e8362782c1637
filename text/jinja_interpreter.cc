#include "text/jinja_interpreter.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "text/jinja_builtins.h"
#include "text/jinja_strings.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {
namespace {

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
    for (std::string& ch : Characters(seq.as_string())) items.push_back(Value::String(std::move(ch)));
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

// --- builtins (jinja_filters.cc, jinja_methods.cc, jinja_tests.cc) ---------

absl::StatusOr<Value> Interpreter::CallMethod(const Value& obj, const std::string& name, CallArgs& args, bool* found) {
  const MethodFn method = FindMethod(obj, name);
  *found = method != nullptr;
  if (method == nullptr) return Value();
  return method(*this, obj, args);
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
  const FilterFn filter = FindFilter(name);
  if (filter == nullptr) return Error(absl::StrCat("unknown filter '", name, "'"));
  return filter(*this, v, args);
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
  const TestEntry* test = FindTest(name);
  if (test != nullptr && (!test->needs_argument || !args.positional.empty())) return test->fn(*this, v, args);
  if (args.positional.empty()) return Error(absl::StrCat("unknown test '", name, "' or missing argument"));
  return Error(absl::StrCat("unknown test '", name, "'"));
}

}  // namespace jinja
}  // namespace spar
