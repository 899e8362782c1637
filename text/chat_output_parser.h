// What a GLM-5 / DeepSeek-V3.2 chat completion says, split into its parts:
// the reasoning (`<think>` … `</think>`), the answer, and the tool calls in
// the model's format:
//
//   GLM (vLLM's glm45 reasoning and glm47 tool parsers accept the same):
//     <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>
//   DeepSeek-V3.2 DSML (text/dsml_tool_calls.h):
//     <｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter
//     name="K" string="true|false">V</｜DSML｜parameter>…</｜DSML｜invoke>…
//     </｜DSML｜function_calls>   (also |DSML| and unprefixed tags)
//
// The parse is a pure function of the text so far, so a stream re-parses
// the whole text at every delta and sends what grew ("re-parse and diff"):
// deltas of any size and any split of the tags give the same result, which
// is where incremental parsers broke under multi-token deltas (vLLM PRs
// #39253, #45915). While the text is not final, a tail that may still become
// a tag is held back, and so is a call block that has not closed.
//
// Rules:
//   * reasoning runs from the start (the prompt ended with `<think>`), or
//     from a `<think>` the output opens with, to `</think>` — or to the first
//     call block, which ends reasoning even without `</think>`;
//   * a complete block becomes ToolCallTexts (GLM: one per <tool_call>;
//     DSML: every invoke of the block); one that does not parse stays in the
//     content as text;
//   * DSML: the whitespace right before a block (the format's "\n\n") is
//     not content; while the text may still grow, trailing whitespace is
//     held back for that reason;
//   * at the end, an unclosed block is content too: nothing is lost.
#ifndef SPAR_TEXT_CHAT_OUTPUT_PARSER_H_
#define SPAR_TEXT_CHAT_OUTPUT_PARSER_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace spar {

enum class ToolCallFormat { kGlm, kDsml };

struct ChatOutputSyntax {
  bool reasoning = false;            // split out <think> … </think>
  bool starts_in_reasoning = false;  // the prompt ended with <think>
  bool tool_calls = false;           // parse call blocks of `format`
  ToolCallFormat format = ToolCallFormat::kGlm;
  bool active() const { return reasoning || tool_calls; }
};

struct ToolCallText {
  std::string name;
  std::vector<std::pair<std::string, std::string>> args;  // key, raw value text, in order
  // DSML: per arg, its string="true|false" (nullopt: not given); empty
  // for GLM, whose values the tool's schema types.
  std::vector<std::optional<bool>> arg_string;
  bool operator==(const ToolCallText& o) const {
    return name == o.name && args == o.args && arg_string == o.arg_string;
  }
};

struct ChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallText> tool_calls;
};

// The parse, kept up to date as a stream's text grows: each Feed passes the
// whole text so far (an extension of the previous one) and costs time in
// proportion to what was added (plus any call block still open), not to
// the whole text — a long reasoning stream is not re-scanned at every delta.
// output() is always what ParseChatOutput(text, syntax, final) returns.
class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputSyntax syntax);

  // `final`: the text is complete (nothing is held back any more).
  void Feed(absl::string_view text, bool final);
  const ChatOutput& output() const { return out_; }

 private:
  enum class Phase { kStart, kReasoning, kBody };
  // The first call opener at or after `from` (npos: none), and which.
  size_t FindOpener(absl::string_view text, size_t from, size_t* which) const;
  // Parses a closed block's inside into out_.tool_calls; false: malformed.
  bool ParseBlock(absl::string_view inner);

  const ChatOutputSyntax syntax_;
  // Call block tags (closer i for opener i), static: the views below and
  // copies of the parser stay valid.
  const std::vector<std::string>* openers_;
  const std::vector<std::string>* closers_;
  // Tags whose partial tail is held back: what ends reasoning, and what the
  // content may still turn into (fixed by the syntax).
  std::vector<absl::string_view> ends_reasoning_, body_tags_;
  bool space_before_block_;  // DSML: whitespace before a block is not content
  Phase phase_;
  size_t pos_ = 0;           // the text before pos_ is in out_
  size_t call_open_;         // an open block's opener (npos: none)
  size_t call_text_ = 0;     // where the block's text starts (whitespace before a DSML block)
  size_t opener_ = 0;        // which opener
  size_t close_from_ = 0;    // where its closer may start
  size_t ws_known_ = 0;      // DSML: text[pos_, ws_known_) is whitespace held back
  ChatOutput out_;
};

// The whole parse of `text` at once.
ChatOutput ParseChatOutput(absl::string_view text, const ChatOutputSyntax& syntax, bool final);

}  // namespace spar

#endif  // SPAR_TEXT_CHAT_OUTPUT_PARSER_H_
