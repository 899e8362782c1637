// JSON Schema -> grammar: what each supported keyword accepts and refuses,
// and the errors for what is not supported (naming the keyword's path).
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "gtest/gtest.h"

namespace spar::grammar {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<CompiledConstraint> ForSchema(const std::string& schema) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.schema = Json::parse(schema);
  return CompileConstraint(spec);
}

bool Accepts(const CompiledConstraint& c, const std::string& text) {
  GrammarMatcher m(c.grammar);
  return m.Advance(text) && m.accepting();
}

struct Case {
  const char* schema;
  std::vector<const char*> accepted;
  std::vector<const char*> refused;
};

TEST(JsonSchemaTest, KeywordsAcceptAndRefuse) {
  const Case cases[] = {
      {R"({"type": "string"})", {R"("x")", R"( "")"}, {"1", "null", R"("a)"}},
      {R"({"type": "integer", "minimum": -3, "exclusiveMaximum": 10})", {"-3", "0", "9"}, {"10", "-4", "1.5", "\"1\""}},
      {R"({"type": "number", "minimum": 0.5, "maximum": 1})", {"0.5", "0.75", "1", "1.0"}, {"0.49", "1.01", "2"}},
      {R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})", {"6"}, {"5"}},
      {R"({"type": "boolean"})", {"true", "false"}, {"1", "\"true\""}},
      {R"({"type": ["string", "null"]})", {"null", R"("a")"}, {"0"}},
      {R"({"enum": ["a", 1, null, {"k": [true]}]})", {R"("a")", "1", "null", R"({"k":[true]})"}, {R"("b")", "2", "{}"}},
      {R"({"const": "only"})", {R"("only")"}, {R"("other")"}},
      {R"({"type": "string", "enum": ["a", 1]})", {R"("a")"}, {"1"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})", {R"("ab")", R"("abc")"}, {R"("a")", R"("abcd")"}},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})",
       {"[1]", "[1, 2]", "[ 3 ]"},
       {"[]", "[1,2,3]", "[\"a\"]"}},
      {R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": false})",
       {"[]", R"(["a"])", R"(["a", true])"},
       {R"([true])", R"(["a", true, 1])"}},
      {R"({"type": "array", "items": [{"type": "null"}], "additionalItems": {"type": "number"}})",
       {"[null, 1, 2.5]", "[]"},
       {"[1]"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"]})",
       {R"({"b": "x"})", R"({"a": 1, "b": "x"})", R"({ "a" : 1 , "b" : "" })"},
       {R"({})", R"({"a": 1})", R"({"b": "x", "a": 1})", R"({"b": "x", "c": 1})"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})",
       {"{}", R"({"a": 1})", R"({"b": 2})", R"({"a": 1, "b": 2})"},
       {R"({"b": 2, "a": 1})", R"({, "b": 2})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {"{}", R"({"x": 1, "y": 2})"},
       {R"({"x": "1"})"}},
      {R"({"type": "object", "additionalProperties": false})", {"{}"}, {R"({"x": 1})"}},
      {R"({"type": "object", "required": ["id"]})", {R"({"id": [1, {"z": null}]})"}, {"{}"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]})",
       {"1", "[1, 2]"},
       {"\"x\""}},
      {R"({"oneOf": [{"type": "string"}, {"type": "null"}], "description": "d"})", {"null", "\"s\""}, {"1"}},
      {R"({"type": "string", "anyOf": [{"minLength": 3}, {"enum": ["a"]}]})", {"\"a\"", "\"abc\""}, {"\"ab\""}},
      {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]})",
       {R"({"a": 1, "b": true})"},
       {R"({"a": 1})", R"({"b": true})"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                               "required": ["next"]}}, "$ref": "#/$defs/node"})",
       {R"({"next": null})", R"({"next": {"next": {"next": null}}})"},
       {R"({"next": {}})"}},
      {R"({"definitions": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/definitions/n"}})",
       {"[1, 2]"},
       {"[\"1\"]"}},
      {R"({"type": "object", "properties": {"x": {"$ref": "#"}}})", {"{}", R"({"x": {"x": {}}})"}, {R"({"x": 1})"}},
      {R"({"type": "integer", "nullable": true})", {"null", "3"}, {"\"3\""}},
      {R"({"type": "number", "multipleOf": 1})", {"3"}, {"3.5"}},
      {"true", {"1", "{}", "[\"x\"]"}, {}},
      {"{}", {"null", "{\"a\": [1]}"}, {}},
      {R"({"type": "string", "format": "date-time", "title": "t", "x-vendor": 1})", {"\"anything\""}, {"1"}},
  };
  for (const Case& c : cases) {
    auto compiled = ForSchema(c.schema);
    ASSERT_TRUE(compiled.ok()) << c.schema << ": " << compiled.status();
    for (const char* doc : c.accepted) EXPECT_TRUE(Accepts(*compiled, doc)) << c.schema << " should accept " << doc;
    for (const char* doc : c.refused) EXPECT_FALSE(Accepts(*compiled, doc)) << c.schema << " should refuse " << doc;
  }
}

TEST(JsonSchemaTest, UnsupportedOrImpossibleSchemasNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a"})", "schema.pattern is not supported"},
      {R"({"type": "object", "properties": {"a": {"not": {}}}})", "schema.properties.a.not is not supported"},
      {R"({"type": "object", "patternProperties": {}})", "schema.patternProperties"},
      {R"({"type": "array", "uniqueItems": true})", "schema.uniqueItems"},
      {R"({"type": "number", "multipleOf": 0.5})", "schema.multipleOf"},
      {R"({"type": "strange"})", "schema.type must be one of"},
      {R"({"$ref": "https://example.com/s.json"})", "only references into this schema"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"type": "object", "properties": {"a": false}, "required": ["a"]})", "cannot be satisfied"},
      {R"({"type": "integer", "minimum": 5, "maximum": 1})", "accepts no output"},
      {R"({"type": "array", "maxItems": 100000})", "schema.maxItems above 1024"},
      {R"({"type": "object", "minProperties": 2})", "schema.minProperties"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "accepts no output"},
      {R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})", "left recursion"},
      {R"({"allOf": [{"type": "string", "enum": ["a"]}, {"enum": ["b"]}]})", "schema.allOf[1].enum differs between schemas"},
      {R"(["not a schema"])", "must be a JSON Schema"},
  };
  for (const auto& [schema, want] : cases) {
    auto compiled = ForSchema(schema);
    ASSERT_FALSE(compiled.ok()) << schema;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(compiled.status().message().find(want), std::string::npos) << schema << ": " << compiled.status();
  }
}

TEST(JsonSchemaTest, ManyOptionalPropertiesStayCompact) {
  Json props = Json::object();
  for (int i = 0; i < 80; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  const Json schema = {{"type", "object"}, {"properties", props}};
  auto compiled = ForSchema(schema.dump());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_TRUE(Accepts(*compiled, R"({"p3": 1, "p40": 2, "p79": 3})"));
  EXPECT_FALSE(Accepts(*compiled, R"({"p40": 2, "p3": 1})"));
  EXPECT_LT(compiled->grammar->num_states(), 20000);
}

TEST(ConstraintSpecTest, RoundTripsAndReasoningPrefix) {
  auto spec = ConstraintSpec::Parse(R"({"type": "json_object", "reasoning": true})");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->reasoning);
  auto again = ConstraintSpec::Parse(spec->Key());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Key(), spec->Key());
  auto compiled = CompileConstraint(*spec);
  ASSERT_TRUE(compiled.ok());
  EXPECT_TRUE(Accepts(*compiled, "thinking about it</think>\n{\"a\": 1}"));
  EXPECT_FALSE(Accepts(*compiled, "{\"a\": 1}"));
  EXPECT_FALSE(Accepts(*compiled, "x<tool_call>y</think>{}"));
  EXPECT_FALSE(ConstraintSpec::Parse(R"({"type": "regex"})").ok());
  EXPECT_FALSE(ConstraintSpec::Parse("[").ok());
}

}  // namespace
}  // namespace spar::grammar
