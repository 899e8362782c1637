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

// `final`: the text is complete (nothing is held back).
ChatOutput ParseChatOutput(absl::string_view text, const ChatOutputSyntax& syntax, bool final);

}  // namespace spar

#endif  // SPAR_TEXT_CHAT_OUTPUT_PARSER_H_
