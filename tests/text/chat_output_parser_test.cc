// GLM reasoning and tool-call parsing: whole outputs, then the streaming
// property every client relies on — any split of the text into deltas
// (down to single bytes, tags cut anywhere) yields parses that only grow and
// end exactly at the whole-text parse.
#include "text/chat_output_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "base/rng.h"

namespace spar {
namespace {

constexpr ChatOutputSyntax kThinking{.reasoning = true, .starts_in_reasoning = true, .tool_calls = true};
constexpr ChatOutputSyntax kNoThinking{.reasoning = true, .starts_in_reasoning = false, .tool_calls = true};

TEST(ChatOutputParserTest, ReasoningContentAndToolCalls) {
  const std::string text =
      "The user wants weather.\n</think>Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key><arg_value>3</arg_value>\n</tool_call>"
      "<tool_call>list_files</tool_call>";
  const ChatOutput out = ParseChatOutput(text, kThinking, true);
  EXPECT_EQ(out.reasoning, "The user wants weather.\n");
  EXPECT_EQ(out.content, "Let me check.\n");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  const std::vector<std::pair<std::string, std::string>> args = {{"city", "Paris"}, {"days", "3"}};
  EXPECT_EQ(out.tool_calls[0].args, args);
  EXPECT_EQ(out.tool_calls[1].name, "list_files");
  EXPECT_TRUE(out.tool_calls[1].args.empty());
}

TEST(ChatOutputParserTest, ReasoningEndsAtAToolCallWithoutThinkClose) {
  const ChatOutput out = ParseChatOutput("plan<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"
                                         "</think>done",
                                         kThinking, true);
  EXPECT_EQ(out.reasoning, "plan");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.content, "done");  // the late </think> is not content
}

TEST(ChatOutputParserTest, CutOffWhileThinkingIsAllReasoning) {
  const ChatOutput out = ParseChatOutput("still thinking about it", kThinking, true);
  EXPECT_EQ(out.reasoning, "still thinking about it");
  EXPECT_EQ(out.content, "");
}

TEST(ChatOutputParserTest, ThinkingOffAndOutputsThatOpenTheirOwnThinking) {
  EXPECT_EQ(ParseChatOutput("Hello <b>world</b>", kNoThinking, true).content, "Hello <b>world</b>");
  EXPECT_EQ(ParseChatOutput("Hello", kNoThinking, true).reasoning, "");
  const ChatOutput own = ParseChatOutput("\n<think>hmm</think>Answer", kNoThinking, true);
  EXPECT_EQ(own.reasoning, "hmm");
  EXPECT_EQ(own.content, "Answer");
  // The tiny chat model's form with thinking on: an empty reasoning block.
  const ChatOutput empty = ParseChatOutput("</think>42", kThinking, true);
  EXPECT_EQ(empty.reasoning, "");
  EXPECT_EQ(empty.content, "42");
}

TEST(ChatOutputParserTest, MalformedAndUnclosedCallsStayText) {
  // No name; text between pairs; a key without a value.
  for (const std::string call : {"<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
                                 "<tool_call>f junk<arg_key>a</arg_key><arg_value>1</arg_value> x </tool_call>",
                                 "<tool_call>f<arg_key>a</arg_key></tool_call>"}) {
    const ChatOutput out = ParseChatOutput("A" + call + "B", kNoThinking, true);
    EXPECT_TRUE(out.tool_calls.empty()) << call;
    EXPECT_EQ(out.content, "A" + call + "B");
  }
  const std::string open = "Sure <tool_call>f<arg_key>a</arg_key><arg_value>1";
  EXPECT_EQ(ParseChatOutput(open, kNoThinking, false).content, "Sure ");  // may still close
  EXPECT_EQ(ParseChatOutput(open, kNoThinking, true).content, open);     // the end: nothing lost
}

TEST(ChatOutputParserTest, ValuesKeepTheirBytes) {
  const std::string code = "def f(x):\n    return x < 2 and \"</arg\" != '<tool_call>'\n";
  // The value holds a "<tool_call>" of its own: the block still closes at </tool_call>.
  const ChatOutput out =
      ParseChatOutput("<tool_call>write<arg_key>text</arg_key><arg_value>" + code + "</arg_value></tool_call>",
                      kNoThinking, true);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].args[0].second, code);
}

TEST(ChatOutputParserTest, ParsersOffLeaveTheTextAlone) {
  const std::string text = "<think>x</think><tool_call>f</tool_call>";
  const ChatOutput out = ParseChatOutput(text, ChatOutputSyntax{}, true);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.reasoning.empty() && out.tool_calls.empty());
  // Reasoning only: tool calls stay text.
  const ChatOutput r = ParseChatOutput("a</think><tool_call>f</tool_call>",
                                       ChatOutputSyntax{.reasoning = true, .starts_in_reasoning = true}, true);
  EXPECT_EQ(r.reasoning, "a");
  EXPECT_EQ(r.content, "<tool_call>f</tool_call>");
}

bool IsPrefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

// Every prefix's parse is a prefix of the whole parse (the stream never
// sends what it must take back), and the whole text's parse is reached.
void ExpectGrowsToTheWholeParse(const std::string& text, const ChatOutputSyntax& syntax) {
  const ChatOutput whole = ParseChatOutput(text, syntax, true);
  ChatOutput last;
  for (size_t n = 0; n <= text.size(); ++n) {
    const ChatOutput part = ParseChatOutput(text.substr(0, n), syntax, false);
    ASSERT_TRUE(IsPrefix(last.reasoning, part.reasoning)) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(last.content, part.content)) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(part.reasoning, whole.reasoning)) << n << ": " << text;
    ASSERT_TRUE(IsPrefix(part.content, whole.content)) << n << ": [" << part.content << "] " << text;
    ASSERT_LE(part.tool_calls.size(), whole.tool_calls.size()) << n;
    for (size_t i = 0; i < part.tool_calls.size(); ++i) ASSERT_EQ(part.tool_calls[i], whole.tool_calls[i]) << n;
    ASSERT_GE(part.tool_calls.size(), last.tool_calls.size()) << n;
    last = part;
  }
}

TEST(ChatOutputParserTest, EverySplitGrowsToTheWholeParse) {
  const std::vector<std::string> texts = {
      "Reasoning < not a tag </thin still</think>Answer <b> and <tool_ end.",
      "r</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
      "<tool_call>f<arg_key>x</arg_key><arg_value>{\"a\": [1, 2]}</arg_value></tool_call>after",
      "plan<tool_call>f</tool_call></think>tail</think>",
      "<think>own</think><tool_call><arg_key>bad</arg_key></tool_call>x<tool_call>unclosed",
      "  \n<thin",
      "",
  };
  for (const ChatOutputSyntax& syntax :
       {kThinking, kNoThinking, ChatOutputSyntax{.reasoning = true, .starts_in_reasoning = true},
        ChatOutputSyntax{.tool_calls = true}}) {
    for (const std::string& t : texts) ExpectGrowsToTheWholeParse(t, syntax);
  }
  // Random texts over the tags' own letters: splits inside and across tags.
  Rng rng(7);
  const std::vector<std::string> pieces = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
                                           "</arg_key>", "<arg_value>", "</arg_value>", "<", "/", ">", "t",
                                           "a", " ", "\n", "tool", "</", "call"};
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng.NextU64() % 24);
    for (int k = 0; k < n; ++k) t += pieces[rng.NextU64() % pieces.size()];
    ExpectGrowsToTheWholeParse(t, i % 2 ? kThinking : kNoThinking);
  }
}

bool SameOutput(const ChatOutput& a, const ChatOutput& b) {
  return a.reasoning == b.reasoning && a.content == b.content && a.tool_calls == b.tool_calls;
}

// The incremental parser, fed random splits, is the one-shot parse of the
// same text at every step and at the end.
TEST(ChatOutputParserTest, IncrementalFeedsEqualTheOneShotParse) {
  Rng rng(11);
  const std::vector<std::string> pieces = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
                                           "</arg_key>", "<arg_value>", "</arg_value>", "<", "/", ">", "_",
                                           "tool", "call", " ", "\n", "x", "{\"a\": 1}"};
  for (int i = 0; i < 400; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng.NextU64() % 30);
    for (int k = 0; k < n; ++k) t += pieces[rng.NextU64() % pieces.size()];
    const ChatOutputSyntax syntax{.reasoning = (i & 1) != 0, .starts_in_reasoning = (i & 2) != 0,
                                  .tool_calls = (i & 4) != 0};
    ChatOutputParser parser(syntax);
    size_t at = 0;
    while (at < t.size()) {
      at = std::min(t.size(), at + 1 + static_cast<size_t>(rng.NextU64() % 9));
      parser.Feed(absl::string_view(t).substr(0, at), false);
      ASSERT_TRUE(SameOutput(parser.output(), ParseChatOutput(t.substr(0, at), syntax, false))) << at << ": " << t;
    }
    parser.Feed(t, true);
    ASSERT_TRUE(SameOutput(parser.output(), ParseChatOutput(t, syntax, true))) << t;
  }
}

// A long stream costs what it adds per delta: 400 KB of reasoning and a 200 KB
// tool argument in 4-byte deltas (150K feeds). Re-scanning the whole text at
// every delta would read ~30 GB here.
TEST(ChatOutputParserTest, LongStreamsAreLinear) {
  std::string text(400000, 'r');
  text += "</think>ok<tool_call>write<arg_key>text</arg_key><arg_value>";
  text += std::string(200000, 'v');
  text += "</arg_value></tool_call>";
  ChatOutputParser parser(kThinking);
  const auto start = std::chrono::steady_clock::now();
  for (size_t at = 4; at < text.size(); at += 4) parser.Feed(absl::string_view(text).substr(0, at), false);
  parser.Feed(text, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(parser.output().reasoning.size(), 400000u);
  EXPECT_EQ(parser.output().content, "ok");
  ASSERT_EQ(parser.output().tool_calls.size(), 1u);
  EXPECT_EQ(parser.output().tool_calls[0].args[0].second.size(), 200000u);
  EXPECT_LT(seconds, 3.0);
}

}  // namespace
}  // namespace spar
