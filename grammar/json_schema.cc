#include "grammar/json_schema.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "grammar/json_text.h"
#include "grammar/member_order.h"
#include "grammar/number_range.h"

namespace spar::grammar {
namespace {

constexpr int kMaxSchemaNodes = 20000;
constexpr int kMaxCount = 1024;  // minItems / maxItems / minLength / maxLength
constexpr int kMaxMergeDepth = 32;

// Keywords that only describe: validators ignore them, so does generation.
const std::set<std::string>& Annotations() {
  static const auto* k = new std::set<std::string>{
      "title",    "description", "default",          "examples",         "example",         "$schema",
      "$id",      "$anchor",     "$comment",         "deprecated",       "readOnly",        "writeOnly",
      "format",   "$defs",       "definitions",      "contentMediaType", "contentEncoding", "contentSchema",
      "strict",   "xml",         "externalDocs",     "discriminator",    "$dynamicAnchor",  "$vocabulary"};
  return *k;
}

// Assertions the generator cannot honour.
const std::set<std::string>& Unsupported() {
  static const auto* k = new std::set<std::string>{
      "pattern", "patternProperties", "propertyNames",     "not",              "if",           "then",
      "else",    "contains",          "minContains",       "maxContains",      "dependentRequired",
      "dependentSchemas", "dependencies", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};
  return *k;
}

absl::Status Bad(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, " ", message));
}

std::string Child(const std::string& path, const std::string& key) { return absl::StrCat(path, ".", key); }
std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

const Json* Find(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// A non-negative integer keyword, at most kMaxCount.
absl::StatusOr<std::optional<int>> Count(const Json& s, const char* key, const std::string& path) {
  const Json* v = Find(s, key);
  if (v == nullptr) return std::optional<int>();
  if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == static_cast<int64_t>(v->get<double>()))) {
    return Bad(Child(path, key), "must be a non-negative integer");
  }
  const double d = v->get<double>();
  if (d < 0) return Bad(Child(path, key), "must be a non-negative integer");
  if (d > kMaxCount) {
    return Bad(Child(path, key), absl::StrCat("above ", kMaxCount, " is not supported by constrained decoding"));
  }
  return std::optional<int>(static_cast<int>(d));
}

bool HasAssertions(const Json& s) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!Annotations().count(it.key())) return true;
  }
  return false;
}

Json Without(const Json& s, std::initializer_list<const char*> keys) {
  Json out = s;
  for (const char* k : keys) out.erase(k);
  return out;
}

bool TypeMatches(const Json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  }
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

const std::set<std::string>& KnownTypes() {
  static const auto* k = new std::set<std::string>{"null", "boolean", "string", "number", "integer", "object", "array"};
  return *k;
}

absl::StatusOr<std::vector<std::string>> TypesOf(const Json& type, const std::string& path) {
  std::vector<std::string> out;
  auto add = [&](const Json& t, const std::string& p) -> absl::Status {
    if (!t.is_string() || !KnownTypes().count(t.get<std::string>())) {
      return Bad(p, "must be one of null, boolean, string, number, integer, object, array");
    }
    out.push_back(t.get<std::string>());
    return absl::OkStatus();
  };
  if (type.is_array()) {
    if (type.empty()) return Bad(path, "must not be empty");
    for (size_t i = 0; i < type.size(); ++i) SPAR_RETURN_IF_ERROR(add(type[i], Index(path, i)));
  } else {
    SPAR_RETURN_IF_ERROR(add(type, path));
  }
  return out;
}

// The types a schema without "type" implies through its keywords; empty:
// any value.
std::vector<std::string> ImpliedTypes(const Json& s) {
  static const std::set<std::string> object = {"properties", "required", "additionalProperties", "minProperties",
                                               "maxProperties", "unevaluatedProperties"};
  static const std::set<std::string> array = {"items", "prefixItems", "minItems", "maxItems", "additionalItems",
                                              "uniqueItems"};
  static const std::set<std::string> string = {"minLength", "maxLength"};
  static const std::set<std::string> number = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                               "multipleOf"};
  std::vector<std::string> out;
  auto any_of = [&](const std::set<std::string>& keys) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (keys.count(it.key())) return true;
    }
    return false;
  };
  if (any_of(object)) out.push_back("object");
  if (any_of(array)) out.push_back("array");
  if (any_of(string)) out.push_back("string");
  if (any_of(number)) out.push_back("number");
  return out;
}

// JSON pointer unescaping of one reference segment.
std::string Unescape(std::string seg) {
  seg = absl::StrReplaceAll(seg, {{"~1", "/"}});
  return absl::StrReplaceAll(seg, {{"~0", "~"}});
}

}  // namespace

JsonSchemaCompiler::JsonSchemaCompiler(Grammar* grammar, JsonRules* json, const Json& root, std::string root_path)
    : g_(grammar), json_(json), root_(root), root_path_(std::move(root_path)) {}

absl::StatusOr<Expr> JsonSchemaCompiler::CompileRoot() {
  SPAR_ASSIGN_OR_RETURN(int rule, RefRule("#", root_path_));
  return Call(rule);
}

std::string JsonSchemaCompiler::Literal(const Json& value) const { return json_->Literal(value); }

absl::StatusOr<const Json*> JsonSchemaCompiler::Resolve(const std::string& ref, const std::string& path) const {
  if (ref.empty() || ref[0] != '#') {
    return Bad(path, absl::StrCat("\"", ref, "\" is not supported: only references into this schema (\"#/...\") are"));
  }
  const Json* cur = &root_;
  if (ref.size() == 1) return cur;
  if (ref[1] != '/') return Bad(path, absl::StrCat("\"", ref, "\" is not a JSON pointer (\"#/...\")"));
  size_t pos = 2;
  while (pos <= ref.size()) {
    const size_t slash = ref.find('/', pos);
    const std::string seg = Unescape(ref.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos));
    if (cur->is_object() && cur->contains(seg)) {
      cur = &(*cur)[seg];
    } else if (cur->is_array() && !seg.empty() && std::all_of(seg.begin(), seg.end(), ::isdigit) &&
               std::stoul(seg) < cur->size()) {
      cur = &(*cur)[std::stoul(seg)];
    } else {
      return Bad(path, absl::StrCat("\"", ref, "\" does not resolve (no \"", seg, "\")"));
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return cur;
}

absl::StatusOr<int> JsonSchemaCompiler::RefRule(const std::string& ref, const std::string& path) {
  if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
  SPAR_ASSIGN_OR_RETURN(const Json* target, Resolve(ref, path));
  const int rule = g_->Declare(absl::StrCat("schema ", ref));
  ref_rules_[ref] = rule;
  const std::string where = ref == "#" ? root_path_ : absl::StrCat(root_path_, " ", ref);
  SPAR_ASSIGN_OR_RETURN(Expr body, Compile(*target, where));
  g_->Define(rule, std::move(body));
  return rule;
}

absl::StatusOr<Json> JsonSchemaCompiler::Merge(Json into, const Json& other_in, const std::string& path,
                                               int depth) const {
  if (depth > kMaxMergeDepth) return Bad(path, "combines schemas too deeply to merge");
  if (other_in.is_boolean()) {
    if (other_in.get<bool>()) return into;
    return Json(false);
  }
  if (!other_in.is_object()) return Bad(path, "must be a JSON Schema (an object or a boolean)");
  Json other = other_in;
  if (const Json* ref = Find(other, "$ref")) {
    if (!ref->is_string()) return Bad(Child(path, "$ref"), "must be a string");
    SPAR_ASSIGN_OR_RETURN(const Json* target, Resolve(ref->get<std::string>(), Child(path, "$ref")));
    SPAR_ASSIGN_OR_RETURN(Json resolved, Merge(Json::object(), *target, path, depth + 1));
    SPAR_ASSIGN_OR_RETURN(other, Merge(std::move(resolved), Without(other, {"$ref"}), path, depth + 1));
  }
  if (into.is_boolean()) return into.get<bool>() ? other : into;
  for (auto it = other.begin(); it != other.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (Annotations().count(k)) continue;
    if (!into.contains(k)) {
      into[k] = v;
    } else if (into[k] == v) {
      continue;
    } else if (k == "properties" && v.is_object() && into[k].is_object()) {
      for (auto p = v.begin(); p != v.end(); ++p) {
        if (!into[k].contains(p.key())) {
          into[k][p.key()] = p.value();
        } else {
          SPAR_ASSIGN_OR_RETURN(into[k][p.key()],
                                Merge(into[k][p.key()], p.value(), Child(Child(path, k), p.key()), depth + 1));
        }
      }
    } else if (k == "required" && v.is_array() && into[k].is_array()) {
      for (const Json& r : v) {
        if (std::find(into[k].begin(), into[k].end(), r) == into[k].end()) into[k].push_back(r);
      }
    } else if ((k == "minimum" || k == "minLength" || k == "minItems") && v.is_number() && into[k].is_number()) {
      if (v.get<double>() > into[k].get<double>()) into[k] = v;
    } else if ((k == "maximum" || k == "maxLength" || k == "maxItems") && v.is_number() && into[k].is_number()) {
      if (v.get<double>() < into[k].get<double>()) into[k] = v;
    } else if (k == "type") {
      SPAR_ASSIGN_OR_RETURN(auto a, TypesOf(into[k], Child(path, k)));
      SPAR_ASSIGN_OR_RETURN(auto b, TypesOf(v, Child(path, k)));
      Json both = Json::array();
      for (const std::string& t : a) {
        for (const std::string& u : b) {
          if (t == u || (t == "integer" && u == "number")) both.push_back(t);
          else if (t == "number" && u == "integer") both.push_back(u);
        }
      }
      if (both.empty()) return Json(false);
      into[k] = both.size() == 1 ? both[0] : both;
    } else {
      return Bad(Child(path, k), "differs between schemas combined by allOf / anyOf; merging it is not supported");
    }
  }
  return into;
}

const Json* JsonSchemaCompiler::StringOnly(const Json& schema) const {
  const Json* s = &schema;
  for (int hops = 0; hops < 8 && s->is_object(); ++hops) {
    const Json* ref = Find(*s, "$ref");
    if (ref == nullptr || !ref->is_string() || HasAssertions(Without(*s, {"$ref"}))) break;
    auto target = Resolve(ref->get<std::string>(), "");
    if (!target.ok()) return nullptr;
    s = *target;
  }
  if (!s->is_object()) return nullptr;
  const Json* type = Find(*s, "type");
  if (type == nullptr || !type->is_string() || *type != "string") return nullptr;
  for (const char* k : {"anyOf", "oneOf", "allOf", "$ref", "nullable"}) {
    if (s->contains(k)) return nullptr;
  }
  return s;
}

absl::StatusOr<Expr> JsonSchemaCompiler::Compile(const Json& s, const std::string& path) {
  if (++nodes_ > kMaxSchemaNodes) return Bad(root_path_, "is too large for constrained decoding");
  if (s.is_boolean()) return s.get<bool>() ? json_->Value() : Nothing();
  if (!s.is_object()) return Bad(path, "must be a JSON Schema (an object or a boolean)");
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (Unsupported().count(it.key())) {
      return Bad(Child(path, it.key()), "is not supported by constrained decoding");
    }
  }
  if (const Json* ref = Find(s, "$ref")) {
    if (!ref->is_string()) return Bad(Child(path, "$ref"), "must be a string");
    const Json siblings = Without(s, {"$ref"});
    if (!HasAssertions(siblings)) {
      SPAR_ASSIGN_OR_RETURN(int rule, RefRule(ref->get<std::string>(), Child(path, "$ref")));
      return Call(rule);
    }
    SPAR_ASSIGN_OR_RETURN(Json merged, Merge(Json::object(), s, path, 0));
    return Compile(merged, path);
  }
  if (const Json* all = Find(s, "allOf")) {
    if (!all->is_array() || all->empty()) return Bad(Child(path, "allOf"), "must be a non-empty array of schemas");
    Json merged = Without(s, {"allOf"});
    for (size_t i = 0; i < all->size(); ++i) {
      SPAR_ASSIGN_OR_RETURN(merged, Merge(std::move(merged), (*all)[i], Index(Child(path, "allOf"), i), 0));
    }
    return Compile(merged, path);
  }
  const char* choice = s.contains("anyOf") ? "anyOf" : s.contains("oneOf") ? "oneOf" : nullptr;
  if (choice != nullptr) {
    if (s.contains("anyOf") && s.contains("oneOf")) return Bad(path, "with both anyOf and oneOf is not supported");
    const Json& branches = s[choice];
    const std::string bpath = Child(path, choice);
    if (!branches.is_array() || branches.empty()) return Bad(bpath, "must be a non-empty array of schemas");
    const Json base = Without(s, {"anyOf", "oneOf"});
    const bool plain = !HasAssertions(base);
    std::vector<Expr> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      if (plain) {
        SPAR_ASSIGN_OR_RETURN(Expr e, Compile(branches[i], Index(bpath, i)));
        alts.push_back(std::move(e));
      } else {
        SPAR_ASSIGN_OR_RETURN(Json merged, Merge(base, branches[i], Index(bpath, i), 0));
        SPAR_ASSIGN_OR_RETURN(Expr e, Compile(merged, Index(bpath, i)));
        alts.push_back(std::move(e));
      }
    }
    return Alt(std::move(alts));
  }
  if (const Json* nullable = Find(s, "nullable"); nullable != nullptr && nullable->is_boolean() && nullable->get<bool>()) {
    SPAR_ASSIGN_OR_RETURN(Expr e, Compile(Without(s, {"nullable"}), path));
    return Alt({std::move(e), JsonRules::Null()});
  }
  const Json* type = Find(s, "type");
  std::vector<std::string> types;
  if (type != nullptr) {
    SPAR_ASSIGN_OR_RETURN(types, TypesOf(*type, Child(path, "type")));
  }
  if (const Json* c = Find(s, "const")) return Literals(Json::array({*c}), type, path);
  if (const Json* e = Find(s, "enum")) {
    if (!e->is_array()) return Bad(Child(path, "enum"), "must be an array");
    return Literals(*e, type, path);
  }
  if (types.empty()) types = ImpliedTypes(s);
  if (types.empty()) return json_->Value();
  std::vector<Expr> alts;
  for (const std::string& t : types) {
    SPAR_ASSIGN_OR_RETURN(Expr e, CompileTyped(s, t, path));
    alts.push_back(std::move(e));
  }
  return Alt(std::move(alts));
}

absl::StatusOr<Expr> JsonSchemaCompiler::Literals(const Json& values, const Json* type, const std::string& path) {
  std::vector<std::string> types;
  if (type != nullptr) {
    SPAR_ASSIGN_OR_RETURN(types, TypesOf(*type, Child(path, "type")));
  }
  std::vector<Expr> alts;
  std::set<std::string> seen;
  for (const Json& v : values) {
    if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) { return TypeMatches(v, t); })) {
      continue;
    }
    std::string text = Literal(v);
    if (seen.insert(text).second) alts.push_back(Lit(text));
  }
  return Alt(std::move(alts));
}

absl::StatusOr<Expr> JsonSchemaCompiler::CompileTyped(const Json& s, const std::string& type, const std::string& path) {
  if (type == "null") return JsonRules::Null();
  if (type == "boolean") return JsonRules::Boolean();
  if (type == "string") return String(s, path);
  if (type == "number") return Number(s, false, path);
  if (type == "integer") return Number(s, true, path);
  if (type == "object") return Object(s, path);
  return Array(s, path);
}

absl::StatusOr<Expr> JsonSchemaCompiler::String(const Json& s, const std::string& path) {
  SPAR_ASSIGN_OR_RETURN(auto min, Count(s, "minLength", path));
  SPAR_ASSIGN_OR_RETURN(auto max, Count(s, "maxLength", path));
  if (!min && !max) return json_->String();
  StringShape shape;
  shape.forbidden = json_->family().forbidden;
  shape.min_chars = min.value_or(0);
  shape.max_chars = max.value_or(-1);
  return Automaton(JsonStringDfa(shape));
}

absl::StatusOr<Expr> JsonSchemaCompiler::Number(const Json& s, bool integer, const std::string& path) {
  if (const Json* m = Find(s, "multipleOf")) {
    if (!m->is_number() || m->get<double>() <= 0) return Bad(Child(path, "multipleOf"), "must be a positive number");
    if (m->get<double>() != 1.0) return Bad(Child(path, "multipleOf"), "is not supported by constrained decoding (only 1)");
    integer = true;
  }
  NumberShape shape;
  shape.integer = integer;
  auto bound = [&](const char* key, std::optional<Decimal>* out) -> absl::Status {
    const Json* v = Find(s, key);
    if (v == nullptr) return absl::OkStatus();
    auto d = DecimalOf(*v);
    if (!d.ok()) return Bad(Child(path, key), d.status().message());
    *out = *d;
    return absl::OkStatus();
  };
  SPAR_RETURN_IF_ERROR(bound("minimum", &shape.min));
  SPAR_RETURN_IF_ERROR(bound("maximum", &shape.max));
  for (const auto& [key, is_min] : {std::pair<const char*, bool>{"exclusiveMinimum", true}, {"exclusiveMaximum", false}}) {
    const Json* v = Find(s, key);
    if (v == nullptr) continue;
    std::optional<Decimal>& b = is_min ? shape.min : shape.max;
    bool& exclusive = is_min ? shape.exclusive_min : shape.exclusive_max;
    if (v->is_boolean()) {  // draft 4: qualifies minimum / maximum
      exclusive = v->get<bool>() && b.has_value();
      continue;
    }
    std::optional<Decimal> e;
    SPAR_RETURN_IF_ERROR(bound(key, &e));
    // Both given: the stricter one wins (an equal one is exclusive).
    const double ev = v->get<double>();
    const Json* plain = Find(s, is_min ? "minimum" : "maximum");
    if (!b || (is_min ? ev >= plain->get<double>() : ev <= plain->get<double>())) {
      b = e;
      exclusive = true;
    }
  }
  if (!shape.min && !shape.max) return integer ? json_->Integer() : json_->Number();
  return Automaton(JsonNumberDfa(shape));
}

absl::StatusOr<Expr> JsonSchemaCompiler::Object(const Json& s, const std::string& path) {
  const Json* props = Find(s, "properties");
  if (props != nullptr && !props->is_object()) return Bad(Child(path, "properties"), "must be an object");
  std::vector<std::string> required;
  if (const Json* req = Find(s, "required")) {
    if (!req->is_array()) return Bad(Child(path, "required"), "must be an array of strings");
    for (size_t i = 0; i < req->size(); ++i) {
      if (!(*req)[i].is_string()) return Bad(Index(Child(path, "required"), i), "must be a string");
      const std::string name = (*req)[i].get<std::string>();
      if (std::find(required.begin(), required.end(), name) == required.end()) required.push_back(name);
    }
  }
  const Json* extra = Find(s, "additionalProperties");
  if (extra != nullptr && !extra->is_boolean() && !extra->is_object()) {
    return Bad(Child(path, "additionalProperties"), "must be a boolean or a schema");
  }
  SPAR_ASSIGN_OR_RETURN(auto min_props, Count(s, "minProperties", path));
  SPAR_ASSIGN_OR_RETURN(auto max_props, Count(s, "maxProperties", path));
  const Expr ws = json_->Ws();
  const Expr sep = Seq({ws, Lit(","), ws});
  const int rule = g_->Declare(path);

  // Free-form: keys are any strings, values follow additionalProperties.
  if ((props == nullptr || props->empty()) && required.empty()) {
    const bool closed = extra != nullptr && extra->is_boolean() && !extra->get<bool>();
    if (min_props && *min_props > 0) {
      if (closed) return Bad(Child(path, "minProperties"), "cannot be met: additionalProperties is false");
      return Bad(Child(path, "minProperties"), "is not supported without properties listing the keys");
    }
    Expr body = Empty();
    if (!closed && (!max_props || *max_props > 0)) {
      Expr value = json_->Value();
      if (extra != nullptr && extra->is_object()) {
        SPAR_ASSIGN_OR_RETURN(value, Compile(*extra, Child(path, "additionalProperties")));
      }
      const Expr member = Seq({json_->String(), ws, Lit(":"), ws, value});
      body = json_->CommaList(member, 0, max_props ? *max_props : -1);
    }
    g_->Define(rule, Seq({Lit("{"), ws, body, ws, Lit("}")}));
    return Call(rule);
  }

  std::vector<Member> members;
  auto value_call = [&](Expr e, const std::string& where) {
    // Each property's value is a call, so the copies the ordering below
    // makes stay small.
    if (e.kind == Expr::Kind::kCall) return e;
    return Call(g_->Add(where, std::move(e)));
  };
  std::vector<std::string> listed;
  if (props != nullptr) {
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string where = Child(Child(path, "properties"), it.key());
      SPAR_ASSIGN_OR_RETURN(Expr v, Compile(it.value(), where));
      const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
      if (v.kind == Expr::Kind::kAlt && v.items.empty()) {
        if (req) return Bad(where, "cannot be satisfied by any value but is required");
        continue;  // never generated
      }
      members.push_back({Seq({Lit(Literal(Json(it.key()))), ws, Lit(":"), ws, value_call(std::move(v), where)}), req});
      listed.push_back(it.key());
    }
  }
  for (const std::string& name : required) {
    if (std::find(listed.begin(), listed.end(), name) != listed.end()) continue;
    const std::string where = Child(Child(path, "required"), name);
    if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
      return Bad(where, "is required but not in properties, and additionalProperties is false");
    }
    Expr v = json_->Value();
    if (extra != nullptr && extra->is_object()) {
      SPAR_ASSIGN_OR_RETURN(v, Compile(*extra, Child(path, "additionalProperties")));
    }
    members.push_back({Seq({Lit(Literal(Json(name))), ws, Lit(":"), ws, value_call(std::move(v), where)}), true});
  }
  const int n = static_cast<int>(members.size());
  int num_required = 0;
  for (const Member& m : members) num_required += m.required;
  if (min_props && *min_props > num_required) {
    return Bad(Child(path, "minProperties"), "above the number of required properties is not supported");
  }
  if (max_props && *max_props < n) {
    return Bad(Child(path, "maxProperties"), "below the number of properties is not supported");
  }

  g_->Define(rule, Seq({Lit("{"), ws, OrderedMembers(g_, members, sep, path), ws, Lit("}")}));
  return Call(rule);
}

absl::StatusOr<Expr> JsonSchemaCompiler::Array(const Json& s, const std::string& path) {
  std::vector<Expr> prefix;
  std::optional<Expr> item = json_->Value();
  auto compile_call = [&](const Json& schema, const std::string& where) -> absl::StatusOr<std::optional<Expr>> {
    if (schema.is_boolean() && !schema.get<bool>()) return std::optional<Expr>();
    SPAR_ASSIGN_OR_RETURN(Expr e, Compile(schema, where));
    if (e.kind == Expr::Kind::kAlt && e.items.empty()) return std::optional<Expr>();
    if (e.kind != Expr::Kind::kCall) e = Call(g_->Add(where, std::move(e)));
    return std::optional<Expr>(std::move(e));
  };
  const Json* tuple = Find(s, "prefixItems");
  const Json* items = Find(s, "items");
  std::string tuple_key = "prefixItems";
  if (items != nullptr && items->is_array()) {  // draft 4 tuples
    tuple = items;
    tuple_key = "items";
    items = Find(s, "additionalItems");
  }
  size_t usable_prefix = 0;
  bool prefix_blocked = false;
  if (tuple != nullptr) {
    if (!tuple->is_array()) return Bad(Child(path, tuple_key), "must be an array of schemas");
    for (size_t i = 0; i < tuple->size(); ++i) {
      SPAR_ASSIGN_OR_RETURN(auto e, compile_call((*tuple)[i], Index(Child(path, tuple_key), i)));
      if (!e) {
        prefix_blocked = true;  // no value at position i: the array ends before it
        break;
      }
      prefix.push_back(std::move(*e));
      ++usable_prefix;
    }
  }
  if (items != nullptr) {
    SPAR_ASSIGN_OR_RETURN(item, compile_call(*items, Child(path, items == Find(s, "additionalItems") ? "additionalItems" : "items")));
  }
  if (prefix_blocked) item.reset();
  SPAR_ASSIGN_OR_RETURN(auto min_items, Count(s, "minItems", path));
  SPAR_ASSIGN_OR_RETURN(auto max_items, Count(s, "maxItems", path));
  const int k = static_cast<int>(usable_prefix);
  const int lo = min_items.value_or(0);
  int hi = max_items ? *max_items : -1;
  if (!item) hi = hi < 0 ? k : std::min(hi, k);
  if (const Json* unique = Find(s, "uniqueItems"); unique != nullptr && unique->is_boolean() && unique->get<bool>()) {
    if (hi < 0 || hi > 1) return Bad(Child(path, "uniqueItems"), "is not supported by constrained decoding (unless maxItems <= 1)");
  }
  if (hi >= 0 && lo > hi) return Bad(path, "allows no array: minItems exceeds what items and maxItems allow");
  const Expr ws = json_->Ws();
  const Expr sep = Seq({ws, Lit(","), ws});
  // Elements from position p on, each after a comma.
  std::function<Expr(int)> tail = [&](int p) -> Expr {
    if (hi >= 0 && p >= hi) return Empty();
    if (p >= k) {
      if (!item) return Empty();
      return Repeat(Seq({sep, *item}), std::max(0, lo - p), hi < 0 ? -1 : hi - p);
    }
    Expr e = Seq({sep, prefix[p], tail(p + 1)});
    return p >= lo ? Opt(std::move(e)) : e;
  };
  Expr body = Empty();
  if (hi != 0) {
    Expr first;
    if (k > 0) {
      first = Seq({prefix[0], tail(1)});
    } else {
      first = Seq({*item, Repeat(Seq({sep, *item}), std::max(0, lo - 1), hi < 0 ? -1 : hi - 1)});
    }
    body = lo >= 1 ? std::move(first) : Opt(std::move(first));
  }
  const int rule = g_->Add(path, Seq({Lit("["), ws, std::move(body), ws, Lit("]")}));
  return Call(rule);
}

}  // namespace spar::grammar
