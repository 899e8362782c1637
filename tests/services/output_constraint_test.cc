// OpenAI response_format / tool_choice and reasoning_effort in the request
// layer: what becomes a constraint, how it is completed with the output's
// syntax, and the 400s that name the field.
#include "services/http/output_constraint.h"

#include <string>

#include "gtest/gtest.h"
#include "services/common/status_field.h"
#include "services/http/openai_request.h"

namespace spar::http {
namespace {

const std::string kMessages = R"("messages":[{"role":"user","content":"hi"}])";
const std::string kTools = R"("tools":[
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
       "properties":{"city":{"type":"string"}},"required":["city"]}}},
    {"type":"function","function":{"name":"search","parameters":{"type":"object",
       "properties":{"q":{"type":"string","pattern":"^x"}}}}}])";

OpenAiRequest Parse(const std::string& body) {
  auto r = ParseChatRequest(body);
  EXPECT_TRUE(r.ok()) << body << ": " << r.status();
  return r.ok() ? *r : OpenAiRequest();
}

TEST(OutputConstraintTest, ResponseFormats) {
  EXPECT_FALSE(Parse("{" + kMessages + R"(,"response_format":{"type":"text"}})").constraint.has_value());
  auto obj = Parse("{" + kMessages + R"(,"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(obj.constraint);
  EXPECT_EQ(obj.constraint->spec.kind, grammar::ConstraintSpec::Kind::kJsonObject);
  auto schema = Parse("{" + kMessages +
                      R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
                           "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})");
  ASSERT_TRUE(schema.constraint);
  EXPECT_EQ(schema.constraint->spec.schema["properties"]["a"]["type"], "integer");
}

TEST(OutputConstraintTest, ToolChoices) {
  auto required = Parse("{" + kMessages + "," + kTools + R"(,"tool_choice":"required","parallel_tool_calls":false})");
  ASSERT_TRUE(required.constraint);
  EXPECT_EQ(required.constraint->spec.tools.size(), 2u);
  EXPECT_FALSE(required.constraint->spec.parallel);
  auto named = Parse("{" + kMessages + "," + kTools +
                     R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ASSERT_TRUE(named.constraint);
  ASSERT_EQ(named.constraint->spec.tools.size(), 1u);
  EXPECT_EQ(named.constraint->spec.tools[0].name, "get_weather");
  EXPECT_EQ(named.constraint->spec.tools[0].path, "tools[0].function.parameters");
  EXPECT_FALSE(named.constraint->spec.parallel);  // a named function: one call
  EXPECT_FALSE(Parse("{" + kMessages + "," + kTools + R"(,"tool_choice":"auto"})").constraint);
  auto both = ParseChatRequest("{" + kMessages + "," + kTools +
                               R"(,"tool_choice":"required","response_format":{"type":"json_object"}})");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(FieldOf(both.status()).value_or(""), "response_format");
}

TEST(OutputConstraintTest, AppliedWithTheOutputSyntax) {
  auto named = Parse("{" + kMessages + "," + kTools +
                     R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ChatOutputSyntax syntax{.reasoning = true, .starts_in_reasoning = true, .tool_calls = true,
                          .format = ToolCallFormat::kDsml};
  GenerateParams p;
  ASSERT_TRUE(ApplyOutputConstraint(*named.constraint, syntax, &p).ok());
  ASSERT_TRUE(p.constraint);
  EXPECT_FALSE(p.skip_special_tokens);
  auto spec = grammar::ConstraintSpec::Parse(*p.constraint);
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->reasoning);
  EXPECT_EQ(spec->syntax, grammar::ToolSyntax::kDsml);
  // No tool-call parser: a required call cannot be written.
  syntax.tool_calls = false;
  absl::Status s = ApplyOutputConstraint(*named.constraint, syntax, &p);
  EXPECT_EQ(FieldOf(s).value_or(""), "tool_choice.function.name") << s;
}

TEST(OutputConstraintTest, SchemasTheGrammarRefusesAre400sNamingThem) {
  auto required = Parse("{" + kMessages + "," + kTools + R"(,"tool_choice":"required"})");
  GenerateParams p;
  const ChatOutputSyntax glm{.tool_calls = true};
  absl::Status s = ApplyOutputConstraint(*required.constraint, glm, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(FieldOf(s).value_or(""), "tools[1].function.parameters.properties.q.pattern") << s;
  auto schema = Parse("{" + kMessages +
                      R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"integer",
                           "minimum":3,"maximum":1}}}})");
  s = ApplyOutputConstraint(*schema.constraint, ChatOutputSyntax(), &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(s).value_or(""), "response_format.json_schema.schema") << s;
}

TEST(OutputConstraintTest, ReasoningEffortIsATemplateKwarg) {
  auto r = Parse("{" + kMessages + R"(,"reasoning_effort":"low"})");
  EXPECT_EQ(r.template_options.kwargs["reasoning_effort"], "low");
  auto both = Parse("{" + kMessages +
                    R"(,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"high","other":1}})");
  EXPECT_EQ(both.template_options.kwargs["reasoning_effort"], "high");  // chat_template_kwargs wins, as in vLLM
  EXPECT_EQ(both.template_options.kwargs["other"], 1);
  EXPECT_TRUE(Parse("{" + kMessages + "}").template_options.kwargs.is_null());
}

}  // namespace
}  // namespace spar::http
