// DeepSeek-V3.2 DSML tool calls in the chat output parser: the official
// format (as encoding_dsv32.py writes it), the variants models write, the
// malformed blocks that stay text, and the streaming properties GLM's
// format has (every prefix's parse is a prefix of the whole parse; the
// incremental parser equals the one-shot parse).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/rng.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"
#include "text/chat_output_parser.h"

namespace spar {
namespace {

#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

constexpr ChatOutputSyntax kDsml{.reasoning = true, .starts_in_reasoning = false, .tool_calls = true,
                                 .format = ToolCallFormat::kDsml};
constexpr ChatOutputSyntax kDsmlThinking{.reasoning = true, .starts_in_reasoning = true, .tool_calls = true,
                                         .format = ToolCallFormat::kDsml};

const std::string kOfficial =
    "Let me check.\n\n<" DSML "function_calls>\n<" DSML "invoke name=\"get_weather\">\n<" DSML
    "parameter name=\"city\" string=\"true\">Hangzhou</" DSML "parameter>\n<" DSML
    "parameter name=\"days\" string=\"false\">3</" DSML "parameter>\n</" DSML "invoke>\n<" DSML
    "invoke name=\"list_files\">\n\n</" DSML "invoke>\n</" DSML "function_calls>";

TEST(DsmlOutputParserTest, OfficialFormat) {
  const ChatOutput out = ParseChatOutput(kOfficial, kDsml, true);
  EXPECT_EQ(out.content, "Let me check.");  // the "\n\n" before the block is the format's
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  const std::vector<std::pair<std::string, std::string>> args = {{"city", "Hangzhou"}, {"days", "3"}};
  EXPECT_EQ(out.tool_calls[0].args, args);
  EXPECT_EQ(out.tool_calls[0].arg_string, (std::vector<std::optional<bool>>{true, false}));
  EXPECT_EQ(out.tool_calls[1].name, "list_files");
  EXPECT_TRUE(out.tool_calls[1].args.empty());
}

TEST(DsmlOutputParserTest, Variants) {
  // ASCII pipes, attributes reversed, no whitespace, a missing string flag.
  const ChatOutput ascii = ParseChatOutput(
      "<|DSML|function_calls><|DSML|invoke name=\"f\"><|DSML|parameter string=\"false\" name=\"x\">[1]</|DSML|"
      "parameter><|DSML|parameter name=\"y\">v</|DSML|parameter></|DSML|invoke></|DSML|function_calls>",
      kDsml, true);
  ASSERT_EQ(ascii.tool_calls.size(), 1u);
  EXPECT_EQ(ascii.tool_calls[0].args[0], (std::pair<std::string, std::string>{"x", "[1]"}));
  EXPECT_EQ(ascii.tool_calls[0].arg_string, (std::vector<std::optional<bool>>{false, std::nullopt}));
  EXPECT_EQ(ascii.content, "");
  // Without the DSML prefix.
  const ChatOutput plain = ParseChatOutput(
      "ok <function_calls>\n<invoke name=\"g\">\n<parameter name=\"q\" string=\"true\">a < b</parameter>\n"
      "</invoke>\n</function_calls>",
      kDsml, true);
  ASSERT_EQ(plain.tool_calls.size(), 1u);
  EXPECT_EQ(plain.tool_calls[0].name, "g");
  EXPECT_EQ(plain.tool_calls[0].args[0].second, "a < b");
  EXPECT_EQ(plain.content, "ok");
}

TEST(DsmlOutputParserTest, MalformedAndUnclosedBlocksStayText) {
  const std::string bad = "x\n\n<" DSML "function_calls>\n<" DSML "invoke>\n</" DSML "invoke>\n</" DSML
                          "function_calls>";
  EXPECT_EQ(ParseChatOutput(bad, kDsml, true).content, bad);
  const std::string bad_flag = "<" DSML "function_calls><" DSML "invoke name=\"f\"><" DSML
                               "parameter name=\"a\" string=\"maybe\">1</" DSML "parameter></" DSML "invoke></" DSML
                               "function_calls>";
  EXPECT_TRUE(ParseChatOutput(bad_flag, kDsml, true).tool_calls.empty());
  const std::string empty = "<" DSML "function_calls>\n</" DSML "function_calls>";
  EXPECT_EQ(ParseChatOutput(empty, kDsml, true).content, empty);
  const std::string unclosed = "a \n<" DSML "function_calls>\n<" DSML "invoke name=\"f\">";
  EXPECT_EQ(ParseChatOutput(unclosed, kDsml, true).content, unclosed);
  EXPECT_EQ(ParseChatOutput(unclosed, kDsml, false).content, "a");
  // GLM's tags are text in DSML mode.
  EXPECT_EQ(ParseChatOutput("<tool_call>f</tool_call>", kDsml, true).content, "<tool_call>f</tool_call>");
}

TEST(DsmlOutputParserTest, ReasoningEndsAtThinkCloseOrABlock) {
  const ChatOutput a = ParseChatOutput("let me think</think>\n\n<" DSML "function_calls>\n<" DSML
                                       "invoke name=\"f\">\n</" DSML "invoke>\n</" DSML "function_calls>",
                                       kDsmlThinking, true);
  EXPECT_EQ(a.reasoning, "let me think");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.content, "");
  const ChatOutput b = ParseChatOutput("plan<" DSML "function_calls><" DSML "invoke name=\"f\"></" DSML
                                       "invoke></" DSML "function_calls>done",
                                       kDsmlThinking, true);
  EXPECT_EQ(b.reasoning, "plan");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.content, "done");
}

TEST(DsmlOutputParserTest, TrailingWhitespaceIsHeldUntilItsFateIsKnown) {
  EXPECT_EQ(ParseChatOutput("answer \n\n", kDsml, false).content, "answer");
  EXPECT_EQ(ParseChatOutput("answer \n\n", kDsml, true).content, "answer \n\n");
  EXPECT_EQ(ParseChatOutput("answer \n\nmore", kDsml, false).content, "answer \n\nmore");
}

bool IsPrefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

void ExpectGrowsToTheWholeParse(const std::string& text, const ChatOutputSyntax& syntax) {
  const ChatOutput whole = ParseChatOutput(text, syntax, true);
  ChatOutputParser incremental(syntax);
  ChatOutput last;
  for (size_t n = 0; n <= text.size(); ++n) {
    const ChatOutput part = ParseChatOutput(text.substr(0, n), syntax, false);
    incremental.Feed(absl::string_view(text).substr(0, n), false);
    ASSERT_EQ(incremental.output().content, part.content) << n << ": " << text;
    ASSERT_EQ(incremental.output().reasoning, part.reasoning) << n << ": " << text;
    ASSERT_TRUE(incremental.output().tool_calls == part.tool_calls) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(last.content, part.content)) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(part.reasoning, whole.reasoning)) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(part.content, whole.content)) << n << ": [" << part.content << "] " << text;
    ASSERT_LE(part.tool_calls.size(), whole.tool_calls.size()) << n;
    for (size_t i = 0; i < part.tool_calls.size(); ++i) ASSERT_EQ(part.tool_calls[i], whole.tool_calls[i]) << n;
    last = part;
  }
  incremental.Feed(text, true);
  ASSERT_EQ(incremental.output().content, whole.content) << text;
  ASSERT_TRUE(incremental.output().tool_calls == whole.tool_calls) << text;
}

TEST(DsmlOutputParserTest, EverySplitGrowsToTheWholeParse) {
  for (const ChatOutputSyntax& syntax : {kDsml, kDsmlThinking}) {
    ExpectGrowsToTheWholeParse(kOfficial, syntax);
    ExpectGrowsToTheWholeParse("a \n <function_calls>  <invoke name=\"x\"> </invoke> </function_calls> b \n", syntax);
  }
  Rng rng(23);
  const std::vector<std::string> pieces = {
      "<" DSML "function_calls>", "</" DSML "function_calls>", "<" DSML "invoke name=\"f\">", "</" DSML "invoke>",
      "<" DSML "parameter name=\"k\" string=\"true\">", "</" DSML "parameter>", "<function_calls>", "</function_calls>",
      "<invoke name=\"g\">", "</invoke>", "<parameter name=\"p\">", "</parameter>", "<|DSML|function_calls>",
      "</think>", "<", "/", ">", "\n", " ", "\xef\xbd", "\x9c", "DSML", "v", "\"", "="};
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng.NextU64() % 20);
    for (int k = 0; k < n; ++k) t += pieces[rng.NextU64() % pieces.size()];
    ExpectGrowsToTheWholeParse(t, i % 2 ? kDsmlThinking : kDsml);
  }
}

// DeepSeek's own test vectors (tests/text/data/dsv32/official): every
// assistant turn of the official renders, read back from the text the model
// wrote after its prompt, gives the turn's reasoning, content and tool calls
// (names, arguments in order, string flags, JSON values) of the input.
TEST(DsmlOutputParserTest, ReadsBackDeepSeeksTestVectors) {
  using Json = nlohmann::ordered_json;
  const std::string dir = "tests/text/data/dsv32/official/";
  const std::string eos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
  const std::string assistant = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
  int turns = 0, calls = 0;
  for (const char* name : {"", "_search_w_date", "_search_wo_date"}) {
    const Json input = Json::parse(testing::ReadSource(dir + "test_input" + name + ".json"));
    const std::string render = testing::ReadSource(dir + "test_output" + name + ".txt");
    ASSERT_FALSE(render.empty()) << name;
    size_t chunk_begin = 0;
    for (const Json& msg : input["messages"]) {
      if (msg["role"] != "assistant") continue;
      const size_t end = render.find(eos, chunk_begin);
      ASSERT_NE(end, std::string::npos) << name << ": fewer rendered assistant turns than the input has";
      const std::string chunk = render.substr(chunk_begin, end - chunk_begin);
      chunk_begin = end + eos.size();
      // The prompt ends after "<｜Assistant｜>" or a "</function_results>\n\n"
      // with <think> (the model writes its reasoning first) or </think>.
      size_t at = chunk.rfind(assistant);
      at = at == std::string::npos ? 0 : at + assistant.size();
      const size_t results = chunk.rfind("</function_results>\n\n");
      if (results != std::string::npos && results + 21 > at) at = results + 21;
      const bool thinking = chunk.compare(at, 7, "<think>") == 0;
      ASSERT_TRUE(thinking || chunk.compare(at, 8, "</think>") == 0) << name << ": turn " << turns;
      const std::string completion = chunk.substr(at + (thinking ? 7 : 8));
      const ChatOutput parsed = ParseChatOutput(completion, thinking ? kDsmlThinking : kDsml, true);
      const std::string where = std::string("test_output") + name + ".txt turn " + std::to_string(turns);
      if (thinking) EXPECT_EQ(parsed.reasoning, msg.value("reasoning_content", "")) << where;
      EXPECT_EQ(parsed.content, msg.value("content", "")) << where;
      const Json expected_calls = msg.value("tool_calls", Json::array());
      ASSERT_EQ(parsed.tool_calls.size(), expected_calls.size()) << where;
      for (size_t c = 0; c < expected_calls.size(); ++c) {
        const Json& fn = expected_calls[c]["function"];
        const ToolCallText& got = parsed.tool_calls[c];
        EXPECT_EQ(got.name, fn["name"].get<std::string>()) << where;
        const Json args = fn["arguments"].is_string() ? Json::parse(fn["arguments"].get<std::string>()) : fn["arguments"];
        ASSERT_EQ(got.args.size(), args.size()) << where;
        ASSERT_EQ(got.arg_string.size(), args.size()) << where;
        size_t k = 0;
        for (auto it = args.begin(); it != args.end(); ++it, ++k) {
          EXPECT_EQ(got.args[k].first, it.key()) << where;
          EXPECT_EQ(got.arg_string[k], std::optional<bool>(it.value().is_string())) << where << " " << it.key();
          if (it.value().is_string()) {
            EXPECT_EQ(got.args[k].second, it.value().get<std::string>()) << where << " " << it.key();
          } else {
            EXPECT_EQ(Json::parse(got.args[k].second), it.value()) << where << " " << it.key();
          }
        }
        ++calls;
      }
      ++turns;
    }
  }
  EXPECT_EQ(turns, 30);  // the three conversations' assistant turns, every one read
  EXPECT_GT(calls, 30) << calls;
}

}  // namespace
}  // namespace spar
