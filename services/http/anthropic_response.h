// The answer side of the Anthropic Messages API, pure (no HTTP): a
// generation's updates become the Message object — content blocks
// thinking (the model's reasoning), text, tool_use (calls parsed from the
// model's syntax, input typed by the tool's schema) — and, streamed, the
// documented event sequence:
//
//   message_start (content empty, stop_reason null), ping,
//   per block: content_block_start, content_block_delta (thinking_delta,
//   text_delta, or one input_json_delta with the whole input),
//   content_block_stop; then message_delta (stop_reason end_turn /
//   max_tokens / stop_sequence / tool_use, stop_sequence, usage) and
//   message_stop.
//
// With thinking on (the prompt opened <think>) the message starts with a
// thinking block, empty when the model closed its reasoning at once.
// Blocks follow the output: a block closes when the next kind begins, so
// text after a tool call is a new text block. Trailing whitespace of text
// (the newline a template writes before a call) is held back and dropped
// before a tool call and at the end.
// The non-streamed Message is built by the same machine, so both agree.
#ifndef SPAR_SERVICES_HTTP_ANTHROPIC_RESPONSE_H_
#define SPAR_SERVICES_HTTP_ANTHROPIC_RESPONSE_H_

#include <string>
#include <utility>
#include <vector>

#include "services/http/chat_output.h"
#include "services/http/json_fields.h"
#include "services/scheduler/generation_types.h"

namespace spar::http {

struct SseEvent {
  std::string name;
  Json data;
};

// "event: NAME\ndata: {...}\n\n"
std::string SseText(const SseEvent& event);

class AnthropicMessageBuilder {
 public:
  // `tools` (the request's, OpenAI form) must outlive the builder.
  AnthropicMessageBuilder(std::string id, std::string model, ChatOutputSyntax syntax, const Json* tools);

  // message_start and a ping (input_tokens: the prompt's).
  std::vector<SseEvent> Start(int input_tokens);
  // The events one update adds (its text delta; and, when it is the last,
  // the closing events).
  std::vector<SseEvent> Add(const GenerationUpdate& update);
  // The whole Message (after the last update).
  Json Message() const;

 private:
  enum class Open { kNone, kThinking, kText };
  void CloseBlock(std::vector<SseEvent>* events);
  void OpenBlock(Json block, Open kind, std::vector<SseEvent>* events);
  void Feed(const Json& delta, bool final, std::vector<SseEvent>* events);
  void EnsureThinking(std::vector<SseEvent>* events);
  std::vector<SseEvent> Finish(const FinishInfo& finish);

  const std::string id_, model_;
  ChatOutputStream stream_;
  std::string text_;          // the output so far
  std::string pending_space_; // trailing whitespace of the text, held back
  Open open_ = Open::kNone;
  Json content_ = Json::array();  // the blocks so far, as the Message carries them
  bool called_tools_ = false;
  bool thinking_expected_;  // thinking on and no thinking block yet
  int input_tokens_ = 0, output_tokens_ = 0;
  std::string stop_reason_ = "end_turn";
  Json stop_sequence_ = nullptr;
  bool finished_ = false;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_ANTHROPIC_RESPONSE_H_
