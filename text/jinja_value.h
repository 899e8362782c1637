// Values of spar's Jinja subset. Semantics follow Python Jinja2 as used by
// transformers' apply_chat_template: Python truthiness, str() and repr(),
// dicts that keep insertion order, lists and namespaces with reference
// semantics (so `ns.x = ...` and `list.append(...)` are visible to every
// holder).
#ifndef SPAR_TEXT_JINJA_VALUE_H_
#define SPAR_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace jinja {

class Value;
class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* Keyword(absl::string_view name) const;
  // Python's binding of one parameter: the argument at position `pos`,
  // else the keyword `name`; null when the call passed neither.
  const Value* Get(size_t pos, absl::string_view name) const;
  // An integer parameter (a bool counts as 0 or 1): `dflt` when it is
  // absent, None or undefined; an error naming it for other types.
  absl::StatusOr<int64_t> Int(size_t pos, absl::string_view name, int64_t dflt) const;
  // A parameter's truthiness: `dflt` when it is absent or undefined.
  bool Bool(size_t pos, absl::string_view name, bool dflt) const;
};

using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

struct Object {
  std::vector<std::pair<std::string, Value>> items;
  absl::flat_hash_map<std::string, size_t> index;
  bool is_namespace = false;

  const Value* Find(absl::string_view key) const;
  void Set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value Array(std::vector<Value> items = {});
  static Value MakeObject();
  static Value Namespace();
  static Value Function(std::string name, NativeFunction fn);
  // Objects keep the JSON's key order only with ordered_json (tool schemas
  // print in the order the client sent them, as in Python).
  static Value FromJson(const nlohmann::ordered_json& j);
  static Value FromJson(const nlohmann::json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_function() const { return type_ == Type::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return type_ == Type::kInt ? static_cast<double>(i_) : type_ == Type::kBool ? b_ : f_; }
  const std::string& as_string() const { return s_; }
  std::vector<Value>& array() const { return *array_; }
  Object& object() const { return *object_; }
  const std::string& function_name() const { return s_; }
  const NativeFunction& function() const { return *fn_; }

  bool Truthy() const;
  // Python str(): what {{ x }} prints.
  std::string Str() const;
  // Python repr(): how values print inside containers.
  std::string Repr() const;
  // Python-style name of the type, for error messages.
  std::string TypeName() const;
  // Deep equality with Python's rules (1 == 1.0, True == 1).
  bool Equals(const Value& other) const;

  nlohmann::ordered_json ToJson() const;

 private:
  Type type_ = Type::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<std::vector<Value>> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<NativeFunction> fn_;
};

// Python's ordering, for sort/min/max and the comparison operators:
// numbers (bools as 0/1), strings by code point, lists element by element;
// any other pair is an error naming both types.
absl::StatusOr<int> Compare(const Value& a, const Value& b);
// `obj.key` / `obj[key]`: a mapping's value, undefined for anything else.
Value GetAttr(const Value& obj, const std::string& key);

// Python repr() of a float (shortest round-trip digits, ".0" for integral).
std::string FormatFloat(double d);

// Python json.dumps with transformers' tojson defaults (ensure_ascii=False).
struct JsonDumpOptions {
  int indent = -1;  // < 0: single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: Python's default for the indent mode
  std::string key_separator;
};
absl::StatusOr<std::string> DumpJson(const Value& v, const JsonDumpOptions& options);

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_VALUE_H_
