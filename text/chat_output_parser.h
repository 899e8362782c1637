// What a GLM-5 / DeepSeek-V3.2 chat completion says, split into its parts:
// the reasoning (`<think>` … `</think>`), the answer, and GLM's XML tool calls
//
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>
//
// (vLLM's glm45 reasoning parser and glm47 tool parser accept the same).
// The parse is a pure function of the text so far, so a stream re-parses
// the whole text at every delta and sends what grew ("re-parse and diff"):
// deltas of any size and any split of the tags give the same result, which
// is where incremental parsers broke under multi-token deltas (vLLM PRs
// #39253, #45915). While the text is not final, a tail that may still become
// a tag is held back, and so is a tool call that has not closed.
//
// Rules:
//   * reasoning runs from the start (the prompt ended with `<think>`), or
//     from a `<think>` the output opens with, to `</think>` — or to the first
//     `<tool_call>`, which ends reasoning even without `</think>`;
//   * a complete tool call becomes a ToolCallText; one that does not parse
//     (no name, text between its pairs) stays in the content as text;
//   * at the end, an unclosed `<tool_call>` is content too: nothing is lost.
#ifndef SPAR_TEXT_CHAT_OUTPUT_PARSER_H_
#define SPAR_TEXT_CHAT_OUTPUT_PARSER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace spar {

struct ChatOutputSyntax {
  bool reasoning = false;            // split out <think> … </think>
  bool starts_in_reasoning = false;  // the prompt ended with <think>
  bool tool_calls = false;           // parse GLM <tool_call> blocks
  bool active() const { return reasoning || tool_calls; }
};

struct ToolCallText {
  std::string name;
  std::vector<std::pair<std::string, std::string>> args;  // key, raw value text, in order
  bool operator==(const ToolCallText& o) const { return name == o.name && args == o.args; }
};

struct ChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallText> tool_calls;
};

// The parse, kept up to date as a stream's text grows: each Feed passes the
// whole text so far (an extension of the previous one) and costs time in
// proportion to what was added (plus any tool call still open), not to the
// whole text — a long reasoning stream is not re-scanned at every delta.
// output() is always what ParseChatOutput(text, syntax, final) returns.
class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputSyntax syntax);

  // `final`: the text is complete (nothing is held back any more).
  void Feed(absl::string_view text, bool final);
  const ChatOutput& output() const { return out_; }

 private:
  enum class Phase { kStart, kReasoning, kBody };
  const ChatOutputSyntax syntax_;
  // Tags whose partial tail is held back: what ends reasoning, and what the
  // content may still turn into (fixed by the syntax).
  std::vector<absl::string_view> ends_reasoning_, body_tags_;
  Phase phase_;
  size_t pos_ = 0;           // the text before pos_ is in out_
  size_t call_open_;         // an open <tool_call> (npos: none)
  size_t close_from_ = 0;    // where its </tool_call> may start
  ChatOutput out_;
};

// The whole parse of `text` at once.
ChatOutput ParseChatOutput(absl::string_view text, const ChatOutputSyntax& syntax, bool final);

}  // namespace spar

#endif  // SPAR_TEXT_CHAT_OUTPUT_PARSER_H_
