// DeepSeek-V3.2 DSML tool calls in the chat output parser: the official
// format (as encoding_dsv32.py writes it), the variants models write, the
// malformed blocks that stay text, and the streaming properties GLM's
// format has (every prefix's parse is a prefix of the whole parse; the
// incremental parser equals the one-shot parse).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/rng.h"
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

}  // namespace
}  // namespace spar
