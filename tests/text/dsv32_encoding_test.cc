// DeepSeek-V3.2's prompt encoding (text/dsv32_encoding.h): renders checked
// by hand against the documented format, the errors the official encoder
// raises, byte equality with DeepSeek's own test vectors
// (tests/text/data/dsv32/official), and — when
// tests/text/data/dsv32/renders.json is present (written on a host with the
// model by tools/dsv32_render_fixtures.py from the official
// encoding_dsv32.py) — byte equality on every fixture conversation
// (tests/text/data/dsv32/cases.json). SPAR_DSV32_RENDERS overrides the
// renders file.
#include "text/dsv32_encoding.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/engine/test_util.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;

#define BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

std::string Encode(const std::string& messages, bool thinking, const Json& tools = Json()) {
  Dsv32Options o;
  o.thinking = thinking;
  o.tools = tools;
  auto p = EncodeDsv32Messages(Json::parse(messages), o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.value_or("");
}

TEST(Dsv32EncodingTest, TurnsAndThinkingMarks) {
  EXPECT_EQ(Encode(R"([{"role": "user", "content": "Hello!"}])", false), BOS USER "Hello!" ASSISTANT "</think>");
  EXPECT_EQ(Encode(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])", true),
            BOS "Be brief." USER "Hi" ASSISTANT "<think>");
  // Earlier turns: no reasoning (dropped), </think> after their user turn.
  const std::string multi = R"([{"role": "user", "content": "Q1"},
      {"role": "assistant", "content": "A1", "reasoning_content": "r1"}, {"role": "user", "content": "Q2"}])";
  EXPECT_EQ(Encode(multi, true), BOS USER "Q1" ASSISTANT "</think>A1" EOS USER "Q2" ASSISTANT "<think>");
  EXPECT_EQ(Encode(multi, false), BOS USER "Q1" ASSISTANT "</think>A1" EOS USER "Q2" ASSISTANT "</think>");
}

TEST(Dsv32EncodingTest, ToolsCallsAndResults) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const std::string messages = R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "reasoning_content": "use it",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather",
                       "arguments": {"city": "Paris", "days": 3, "opts": {"a": [1, true], "b": 0.5}}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])";
  const std::string calls =
      "\n\n<" DSML "function_calls>\n<" DSML "invoke name=\"get_weather\">\n<" DSML
      "parameter name=\"city\" string=\"true\">Paris</" DSML "parameter>\n<" DSML
      "parameter name=\"days\" string=\"false\">3</" DSML "parameter>\n<" DSML
      "parameter name=\"opts\" string=\"false\">{\"a\": [1, true], \"b\": 0.5}</" DSML "parameter>\n</" DSML
      "invoke>\n</" DSML "function_calls>";
  const std::string thinking = Encode(messages, true, tools);
  // The tools block in an added system message, Python's json.dumps spacing.
  EXPECT_EQ(thinking.rfind(BOS "\n\n## Tools\n", 0), 0u) << thinking;
  EXPECT_NE(thinking.find("<functions>\n{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
                          "\"properties\": {\"city\": {\"type\": \"string\"}}}}\n</functions>\n" USER "Weather?"),
            std::string::npos)
      << thinking;
  EXPECT_NE(thinking.find(ASSISTANT "<think>use it</think>" + calls + EOS +
                          "\n\n<function_results>\n<result>sunny</result>\n</function_results>\n\n<think>"),
            std::string::npos)
      << thinking;
  const std::string chat = Encode(messages, false, tools);
  EXPECT_NE(chat.find(ASSISTANT "</think>" + calls + EOS + "\n\n<function_results>\n<result>sunny</result>\n"
                      "</function_results>\n\n</think>"),
            std::string::npos)
      << chat;
}

TEST(Dsv32EncodingTest, WhatTheOfficialEncoderRefuses) {
  for (const auto& [messages, thinking] : std::vector<std::pair<std::string, bool>>{
           {R"([{"role": "tool", "content": "x"}])", false},
           {R"([{"role": "user", "content": "q"}, {"role": "tool", "content": "x"}])", false},
           {R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])", true},
           {R"([{"role": "developer", "content": ""}])", false},
           {R"([{"role": "developer", "content": "d"}, {"role": "user", "content": "q"}])", true},
           {R"([{"role": "robot", "content": "q"}])", false}}) {
    Dsv32Options o;
    o.thinking = thinking;
    auto p = EncodeDsv32Messages(Json::parse(messages), o);
    EXPECT_FALSE(p.ok()) << messages;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << messages;
  }
}

TEST(Dsv32EncodingTest, AsTheServersChatTemplate) {
  auto t = Dsv32ChatTemplate();
  ChatTemplateOptions o;
  o.kwargs = {{"thinking", true}};
  auto p = t->Apply(Json::parse(R"([{"role": "user", "content": "Hi"}])"), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, BOS USER "Hi" ASSISTANT "<think>");
  o.kwargs = {{"enable_thinking", false}, {"unknown_kwarg", 1}};
  EXPECT_EQ(*t->Apply(Json::parse(R"([{"role": "user", "content": "Hi"}])"), o), BOS USER "Hi" ASSISTANT "</think>");
  EXPECT_FALSE(t->Render(Json::object()).ok());
}

// DeepSeek's own test vectors (encoding/test_input*.json -> test_output*.txt
// in the model repository, tests/text/data/dsv32/official/README.md): the
// request's tools on the first message, thinking mode, as the official test
// calls encode_messages. The .txt files end with one newline the encoder
// does not write.
TEST(Dsv32EncodingTest, EqualsDeepSeeksTestVectors) {
  const std::string dir = "tests/text/data/dsv32/official/";
  for (const char* name : {"", "_search_w_date", "_search_wo_date"}) {
    const std::string input_text = testing::ReadSource(dir + "test_input" + name + ".json");
    std::string expected = testing::ReadSource(dir + "test_output" + name + ".txt");
    ASSERT_FALSE(input_text.empty()) << name;
    ASSERT_FALSE(expected.empty()) << name;
    if (expected.back() == '\n') expected.pop_back();
    const Json input = Json::parse(input_text);
    Json messages = input["messages"];
    if (input.contains("tools")) messages[0]["tools"] = input["tools"];
    Dsv32Options o;
    o.thinking = true;
    auto p = EncodeDsv32Messages(messages, o);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    size_t at = 0;
    while (at < p->size() && at < expected.size() && (*p)[at] == expected[at]) ++at;
    EXPECT_TRUE(*p == expected) << "test_output" << name << ".txt: first difference at byte " << at << ": expected \""
                               << expected.substr(at > 40 ? at - 40 : 0, 120) << "\", got \""
                               << p->substr(at > 40 ? at - 40 : 0, 120) << "\"";
  }
}

// Byte equality with the official encoder's renders, when committed.
TEST(Dsv32EncodingTest, EqualsTheOfficialEncoderOnTheFixtures) {
  const char* env = std::getenv("SPAR_DSV32_RENDERS");
  const std::string dir = std::string(SPAR_SOURCE_DIR) + "/tests/text/data/dsv32/";
  std::ifstream renders_file(env != nullptr ? env : dir + "renders.json");
  if (!renders_file) {
    GTEST_SKIP() << "no renders.json: run tools/dsv32_render_fixtures.py where encoding_dsv32.py is (DeepSeek's "
                    "test vectors, EqualsDeepSeeksTestVectors, cover thinking mode; these cases add chat mode and "
                    "the encoder's refusals)";
  }
  std::stringstream rs, cs;
  rs << renders_file.rdbuf();
  cs << std::ifstream(dir + "cases.json").rdbuf();
  const Json renders = Json::parse(rs.str())["renders"];
  const Json cases = Json::parse(cs.str())["cases"];
  ASSERT_EQ(renders.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    ASSERT_EQ(renders[i]["name"], c["name"]);
    Dsv32Options o;
    o.thinking = c["thinking"].get<bool>();
    if (c.contains("tools")) o.tools = c["tools"];
    auto p = EncodeDsv32Messages(c["messages"], o);
    if (renders[i].contains("error")) {
      EXPECT_FALSE(p.ok()) << c["name"] << ": the official encoder raised " << renders[i]["error"];
      continue;
    }
    ASSERT_TRUE(p.ok()) << c["name"] << ": " << p.status();
    EXPECT_EQ(*p, renders[i]["prompt"].get<std::string>()) << c["name"];
  }
}

}  // namespace
}  // namespace spar
