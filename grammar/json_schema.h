// JSON Schema -> grammar rules, for the subset constrained decoding
// supports (everything generated validates against the schema):
//
//   type (one or a list), enum, const, nullable (OpenAPI), $ref to "#" and
//   "#/..." pointers (so $defs / definitions, recursion included), allOf
//   (merged), anyOf and oneOf (generated as anyOf: give oneOf branches that
//   exclude each other), boolean schemas;
//   object: properties (generated in the schema's order), required,
//     additionalProperties (a schema for the keys of an object without
//     properties; objects with properties get only those, which satisfies
//     any additionalProperties), unevaluatedProperties;
//   array: items, prefixItems (and draft-4 tuple items / additionalItems),
//     minItems, maxItems (up to 1024);
//   string: minLength, maxLength (code points, up to 1024), format ignored;
//   number / integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum
//     (draft-4 booleans too);
//   annotations (title, description, default, examples, ...) and unknown
//     keywords are ignored, as validators ignore them.
//
// Refused with INVALID_ARGUMENT naming the keyword's path (they would
// constrain what the generator cannot honour): pattern, patternProperties,
// propertyNames, multipleOf, not, if/then/else, contains, uniqueItems
// (unless at most one item), dependentRequired / dependentSchemas /
// dependencies, minProperties above the required count, maxProperties
// below the listed properties, remote $refs, and schemas that no value
// can satisfy.
#ifndef SPAR_GRAMMAR_JSON_SCHEMA_H_
#define SPAR_GRAMMAR_JSON_SCHEMA_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/json_rules.h"
#include "nlohmann/json.hpp"

namespace spar::grammar {

using Json = nlohmann::ordered_json;

class JsonSchemaCompiler {
 public:
  // `root` (kept by reference: it must outlive the compiler) resolves
  // "#..." references; `root_path` is how errors name it, e.g.
  // "response_format.json_schema.schema".
  JsonSchemaCompiler(Grammar* grammar, JsonRules* json, const Json& root, std::string root_path);

  // Values matching the root schema.
  absl::StatusOr<Expr> CompileRoot();
  // Values matching `schema`, found at `path` (for errors).
  absl::StatusOr<Expr> Compile(const Json& schema, const std::string& path);

  // The schema of a string-only value (`"type": "string"` alone, after
  // $ref resolution), which tag formats write unquoted; null otherwise.
  const Json* StringOnly(const Json& schema) const;

 private:
  absl::StatusOr<Expr> CompileTyped(const Json& s, const std::string& type, const std::string& path);
  absl::StatusOr<Expr> Object(const Json& s, const std::string& path);
  absl::StatusOr<Expr> Array(const Json& s, const std::string& path);
  absl::StatusOr<Expr> String(const Json& s, const std::string& path);
  absl::StatusOr<Expr> Number(const Json& s, bool integer, const std::string& path);
  absl::StatusOr<Expr> Literals(const Json& values, const Json* types, const std::string& path);
  absl::StatusOr<int> RefRule(const std::string& ref, const std::string& path);
  absl::StatusOr<const Json*> Resolve(const std::string& ref, const std::string& path) const;
  absl::StatusOr<Json> Merge(Json into, const Json& other, const std::string& path, int depth) const;
  std::string Literal(const Json& value) const;

  Grammar* g_;
  JsonRules* json_;
  const Json& root_;
  const std::string root_path_;
  std::map<std::string, int> ref_rules_;
  int nodes_ = 0;  // schemas compiled, bounded
};

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_JSON_SCHEMA_H_
