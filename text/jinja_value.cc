#include "text/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "text/utf8.h"

namespace spar {
namespace jinja {

const Value* CallArgs::Keyword(absl::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* CallArgs::Get(size_t pos, absl::string_view name) const {
  if (pos < positional.size()) return &positional[pos];
  return Keyword(name);
}

absl::StatusOr<int64_t> CallArgs::Int(size_t pos, absl::string_view name, int64_t dflt) const {
  const Value* v = Get(pos, name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return dflt;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return static_cast<int64_t>(v->as_bool());
  return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' must be an integer, got ", v->TypeName()));
}

bool CallArgs::Bool(size_t pos, absl::string_view name, bool dflt) const {
  const Value* v = Get(pos, name);
  return v == nullptr || v->is_undefined() ? dflt : v->Truthy();
}

const Value* Object::Find(absl::string_view key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Object::Set(const std::string& key, Value v) {
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::Array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::MakeObject() {
  Value v;
  v.type_ = Type::kObject;
  v.object_ = std::make_shared<Object>();
  return v;
}
Value Value::Namespace() {
  Value v = MakeObject();
  v.object_->is_namespace = true;
  return v;
}
Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.type_ = Type::kFunction;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<NativeFunction>(std::move(fn));
  return v;
}

namespace {

template <typename Json>
Value ValueFromJson(const Json& j);

}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j) { return ValueFromJson(j); }
Value Value::FromJson(const nlohmann::json& j) { return ValueFromJson(j); }

namespace {

template <typename Json>
Value ValueFromJson(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::Float(static_cast<double>(u)) : Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(ValueFromJson(e));
      return Value::Array(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value v = Value::MakeObject();
      for (auto it = j.begin(); it != j.end(); ++it) v.object().Set(it.key(), ValueFromJson(it.value()));
      return v;
    }
    default:
      return Value();
  }
}

}  // namespace

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return b_;
    case Type::kInt:
      return i_ != 0;
    case Type::kFloat:
      return f_ != 0.0;
    case Type::kString:
      return !s_.empty();
    case Type::kArray:
      return !array_->empty();
    case Type::kObject:
      return object_->is_namespace || !object_->items.empty();
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest digits that read back to the same double, in Python's repr
  // layout: positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
  std::string sci(buf);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp;
  return out;
}

namespace {

std::string PyStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::Str() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      // Python prints "None"; @huggingface/jinja (and every chat template's
      // intent, e.g. {{ message.get('content') }} on a tool-call turn whose
      // content is null) prints nothing. spar follows the latter.
      return "";
    case Type::kString:
      return s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return b_ ? "True" : "False";
    case Type::kInt:
      return absl::StrCat(i_);
    case Type::kFloat:
      return FormatFloat(f_);
    case Type::kString:
      return PyStringRepr(s_);
    case Type::kArray: {
      std::string out = "[";
      for (size_t k = 0; k < array_->size(); ++k) {
        if (k > 0) out += ", ";
        out += (*array_)[k].Repr();
      }
      return out + "]";
    }
    case Type::kObject: {
      if (object_->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : object_->items) {
        if (!first) out += ", ";
        first = false;
        out += PyStringRepr(k) + ": " + v.Repr();
      }
      return out + "}";
    }
    case Type::kFunction:
      return absl::StrCat("<function ", s_, ">");
  }
  return "";
}

std::string Value::TypeName() const {
  switch (type_) {
    case Type::kUndefined:
      return "undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kArray:
      return "list";
    case Type::kObject:
      return object_->is_namespace ? "Namespace" : "dict";
    case Type::kFunction:
      return "function";
  }
  return "?";
}

bool Value::Equals(const Value& o) const {
  const bool num_a = is_number() || is_bool();
  const bool num_b = o.is_number() || o.is_bool();
  if (num_a && num_b) {
    if ((is_int() || is_bool()) && (o.is_int() || o.is_bool())) {
      return (is_bool() ? b_ : i_) == (o.is_bool() ? o.b_ : o.i_);
    }
    return as_number() == o.as_number();
  }
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return s_ == o.s_;
    case Type::kArray: {
      if (array_ == o.array_) return true;
      if (array_->size() != o.array_->size()) return false;
      for (size_t k = 0; k < array_->size(); ++k) {
        if (!(*array_)[k].Equals((*o.array_)[k])) return false;
      }
      return true;
    }
    case Type::kObject: {
      if (object_ == o.object_) return true;
      if (object_->is_namespace || o.object_->is_namespace) return false;
      if (object_->items.size() != o.object_->items.size()) return false;
      for (const auto& [k, v] : object_->items) {
        const Value* other = o.object_->Find(k);
        if (other == nullptr || !v.Equals(*other)) return false;
      }
      return true;
    }
    case Type::kFunction:
      return fn_ == o.fn_;
    default:
      return false;
  }
}

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
      absl::StatusOr<int> c = Compare(x[k], y[k]);
      if (!c.ok() || *c != 0) return c;
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

nlohmann::ordered_json Value::ToJson() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
    case Type::kFunction:
      return nullptr;
    case Type::kBool:
      return b_;
    case Type::kInt:
      return i_;
    case Type::kFloat:
      return f_;
    case Type::kString:
      return s_;
    case Type::kArray: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const Value& v : *array_) a.push_back(v.ToJson());
      return a;
    }
    case Type::kObject: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& [k, v] : object_->items) o[k] = v.ToJson();
      return o;
    }
  }
  return nullptr;
}

namespace {

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    char32_t cp = 0;
    size_t n = DecodeUtf8At(s, i, &cp);
    if (n == 0) {
      cp = kReplacementChar;
      n = 1;
    }
    if (!ensure_ascii) {
      AppendUtf8(cp, out);
    } else {
      char buf[16];
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      *out += buf;
    }
    i += n;
  }
  out->push_back('"');
}

absl::Status DumpJsonInto(const Value& v, const JsonDumpOptions& opt, const std::string& item_sep,
                          const std::string& key_sep, int depth, std::string* out) {
  if (depth > 256) return absl::InvalidArgumentError("tojson: value is nested too deeply");
  auto newline = [&](int level) {
    if (opt.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(opt.indent) * level, ' ');
  };
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Type::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Type::kInt:
      absl::StrAppend(out, v.as_int());
      return absl::OkStatus();
    case Value::Type::kFloat: {
      const double d = v.as_number();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FormatFloat(d);
      return absl::OkStatus();
    }
    case Value::Type::kString:
      AppendJsonString(v.as_string(), opt.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Type::kArray: {
      const auto& items = v.array();
      if (items.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        newline(depth + 1);
        auto st = DumpJsonInto(items[k], opt, item_sep, key_sep, depth + 1, out);
        if (!st.ok()) return st;
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Type::kObject: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.object().items) items.push_back(&kv);
      if (opt.sort_keys) {
        std::sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      out->push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(items[k]->first, opt.ensure_ascii, out);
        *out += key_sep;
        auto st = DumpJsonInto(items[k]->second, opt, item_sep, key_sep, depth + 1, out);
        if (!st.ok()) return st;
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Value::Type::kFunction:
      return absl::InvalidArgumentError("tojson: a function is not JSON serializable");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DumpJson(const Value& v, const JsonDumpOptions& options) {
  std::string item_sep = options.item_separator;
  std::string key_sep = options.key_separator;
  if (item_sep.empty()) item_sep = options.indent < 0 ? ", " : ",";
  if (key_sep.empty()) key_sep = ": ";
  std::string out;
  auto st = DumpJsonInto(v, options, item_sep, key_sep, 0, &out);
  if (!st.ok()) return st;
  return out;
}

}  // namespace jinja
}  // namespace spar
