// Tool-call grammars (GLM XML, DeepSeek DSML): what they accept, and that
// every sentence of them — random walks under a token budget, whatever
// tokens are picked — parses back with the model's own output parser into
// calls of the offered tools with their required arguments and values of
// the right type.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar/state_masks.h"
#include "grammar/token_mask.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grammar/grammar_test_util.h"
#include "text/chat_output_parser.h"

namespace spar::grammar {
namespace {

using Json = nlohmann::ordered_json;
#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

ConstraintSpec Tools(ToolSyntax syntax, bool parallel) {
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kToolCalls;
  s.syntax = syntax;
  s.parallel = parallel;
  ToolSpec weather;
  weather.name = "get_weather";
  weather.parameters = Json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
      "unit": {"enum": ["c", "f"]}, "opts": {"type": "object", "properties": {"x": {"type": "string"}}}},
      "required": ["city", "days"]})");
  weather.path = "tools[0].function.parameters";
  ToolSpec ping;
  ping.name = "ping";
  ping.path = "tools[1].function.parameters";
  s.tools = {weather, ping};
  return s;
}

bool Accepts(const ConstraintSpec& spec, const std::string& text) {
  auto c = CompileConstraint(spec);
  EXPECT_TRUE(c.ok()) << c.status();
  GrammarMatcher m(c->grammar);
  return m.Advance(text) && m.accepting();
}

TEST(ToolCallGrammarTest, GlmCalls) {
  const ConstraintSpec s = Tools(ToolSyntax::kGlm, true);
  EXPECT_TRUE(Accepts(s, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                         "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"));
  EXPECT_TRUE(Accepts(s, "\n<tool_call>ping\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                         "<arg_value>a </ b</arg_value>\n<arg_key>days</arg_key>\n<arg_value>7</arg_value>\n"
                         "<arg_key>unit</arg_key><arg_value>\"f\"</arg_value></tool_call>"));
  EXPECT_FALSE(Accepts(s, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value></tool_call>"));
  EXPECT_FALSE(Accepts(s, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>9</arg_value></tool_call>"));
  EXPECT_FALSE(Accepts(s, "text first <tool_call>ping</tool_call>"));
  EXPECT_FALSE(Accepts(s, "<tool_call>nope</tool_call>"));
  EXPECT_FALSE(Accepts(Tools(ToolSyntax::kGlm, false), "<tool_call>ping</tool_call><tool_call>ping</tool_call>"));
}

TEST(ToolCallGrammarTest, DsmlCallsAsTheEncoderWritesThem) {
  const ConstraintSpec s = Tools(ToolSyntax::kDsml, true);
  const std::string one = "<" DSML "invoke name=\"get_weather\">\n<" DSML "parameter name=\"city\" string=\"true\">Paris</" DSML
                          "parameter>\n<" DSML "parameter name=\"days\" string=\"false\">3</" DSML "parameter>\n</" DSML "invoke>";
  EXPECT_TRUE(Accepts(s, "\n\n<" DSML "function_calls>\n" + one + "\n</" DSML "function_calls>"));
  EXPECT_TRUE(Accepts(s, "\n\n<" DSML "function_calls>\n<" DSML "invoke name=\"ping\">\n\n</" DSML "invoke>\n" + one +
                             "\n</" DSML "function_calls>"));
  EXPECT_FALSE(Accepts(s, "\n\n<" DSML "function_calls>\n<" DSML "invoke name=\"get_weather\">\n<" DSML
                          "parameter name=\"days\" string=\"true\">3</" DSML "parameter>\n</" DSML "invoke>\n</" DSML
                          "function_calls>"));
}

// Random walks: each step a random allowed token (long ones preferred, so
// budgets bind), the end token ends the walk.
std::vector<std::string> Walks(const ConstraintSpec& spec, int walks, uint32_t seed) {
  std::vector<std::optional<std::string>> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  std::vector<int32_t> special;
  for (const char* tag : {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                          "<" DSML "function_calls>", "</" DSML "function_calls>", "<" DSML "invoke name=\"",
                          "</" DSML "invoke>", "<" DSML "parameter name=\"", "</" DSML "parameter>"}) {
    special.push_back(static_cast<int32_t>(pieces.size()));
    pieces.push_back(std::string(tag));
  }
  for (const char* t : {"city", "days", "get_weather", "ping", "\" string=\"true\">", "\" string=\"false\">", "Paris",
                        "hello world", "</", "\">\n", "\n\n", "{\"x\": \"", "\"}", "12", "\xef\xbd\x9c", "DSML"}) {
    pieces.push_back(std::string(t));
  }
  pieces.push_back(std::nullopt);  // the end token
  const auto vocab = TokenVocab::FromPieces(pieces, special);
  auto compiled = CompileConstraint(spec, vocab.get());
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  StateMasks tables(compiled->grammar, std::make_shared<SharedTableCache>(vocab));
  const int32_t end = vocab->size() - 1;
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(compiled->grammar);
    std::string text;
    const int max_tokens = 40 + static_cast<int>(rng() % 60);
    for (int step = 0; step < max_tokens && !m.terminated(); ++step) {
      std::vector<uint32_t> words(vocab->mask_words());
      MaskOptions opt;
      opt.end_ids = {end};
      opt.allowed_special = SpecialTokensOf(*vocab, compiled->special_tags);
      opt.remaining = max_tokens - step - 1;
      FillTokenMask(tables, m, opt, words.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (MaskAllows(words.data(), id)) allowed.push_back(id);
      }
      EXPECT_FALSE(allowed.empty());
      if (allowed.empty()) break;
      const int32_t pick = rng() % 3 == 0 ? allowed.back() : allowed[rng() % allowed.size()];
      if (pick == end) break;
      text += std::string(vocab->bytes(pick));
      EXPECT_TRUE(m.Advance(vocab->bytes(pick)));
    }
    EXPECT_TRUE(m.accepting()) << text;
    if (std::getenv("SPAR_PRINT_WALKS") != nullptr) std::printf("walk: %s\n", absl::CEscape(text).c_str());
    out.push_back(text);
  }
  return out;
}

void ExpectValidCalls(const std::vector<ToolCallText>& calls, const std::string& text) {
  ASSERT_FALSE(calls.empty()) << text;
  for (const ToolCallText& c : calls) {
    if (c.name == "ping") {
      EXPECT_TRUE(c.args.empty()) << text;
      continue;
    }
    ASSERT_EQ(c.name, "get_weather") << text;
    std::map<std::string, std::string> args(c.args.begin(), c.args.end());
    ASSERT_TRUE(args.count("city") && args.count("days")) << text;
    const Json days = Json::parse(args["days"], nullptr, false);
    ASSERT_TRUE(days.is_number_integer()) << text;
    EXPECT_GE(days.get<int>(), 1);
    EXPECT_LE(days.get<int>(), 7);
    if (args.count("unit")) EXPECT_TRUE(args["unit"] == "\"c\"" || args["unit"] == "\"f\"") << text;
    if (args.count("opts")) EXPECT_TRUE(Json::parse(args["opts"], nullptr, false).is_object()) << text;
  }
}

TEST(ToolCallGrammarTest, EverySentenceParsesIntoValidCalls) {
  for (const bool parallel : {false, true}) {
    for (const std::string& text : Walks(Tools(ToolSyntax::kGlm, parallel), 30, parallel ? 1 : 2)) {
      const ChatOutput out = ParseChatOutput(text, ChatOutputSyntax{.tool_calls = true}, true);
      ExpectValidCalls(out.tool_calls, text);
      if (!parallel) EXPECT_EQ(out.tool_calls.size(), 1u) << text;
      EXPECT_TRUE(absl::StripAsciiWhitespace(out.content).empty()) << text;
    }
    for (const std::string& text : Walks(Tools(ToolSyntax::kDsml, parallel), 30, parallel ? 3 : 4)) {
      const ChatOutput out =
          ParseChatOutput(text, ChatOutputSyntax{.tool_calls = true, .format = ToolCallFormat::kDsml}, true);
      ExpectValidCalls(out.tool_calls, text);
      EXPECT_EQ(out.content, "") << text;
      for (const ToolCallText& c : out.tool_calls) {
        for (size_t i = 0; i < c.args.size(); ++i) {
          EXPECT_EQ(c.arg_string[i], std::optional<bool>(c.args[i].first == "city")) << text;
        }
      }
    }
  }
}

TEST(ToolCallGrammarTest, NamesTheSyntaxCannotWriteAreRefused) {
  ConstraintSpec s = Tools(ToolSyntax::kGlm, true);
  s.tools[1].name = "bad<name";
  auto c = CompileConstraint(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad<name"), std::string::npos) << c.status();
  s = Tools(ToolSyntax::kDsml, true);
  s.tools[0].parameters["properties"]["q\"uote"] = {{"type", "string"}};
  c = CompileConstraint(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tools[0].function.parameters.properties.q\"uote"), std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace spar::grammar
