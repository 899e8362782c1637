// DeepSeek-V3.2's prompt format. The model ships no Jinja chat template but
// a Python encoder (encoding/encoding_dsv32.py in the model repository,
// encode_messages); this is the same rules in C++, byte for byte (checked
// against DeepSeek's own test vectors, tests/text/data/dsv32/official):
//
//   <｜begin▁of▁sentence｜>
//   system:    {content}[\n\n{tools block}]
//   user:      <｜User｜>{content}<｜Assistant｜> then <think> (thinking mode,
//              last user turn) or </think>
//   developer: <｜User｜>[\n\n{tools block}]\n\n# The user's message is: {content}
//              <｜Assistant｜> + <think> / </think> as for user
//   assistant: [{reasoning}</think>, thinking mode, after the last user
//              turn]{content}[\n\n{DSML calls}]<｜end▁of▁sentence｜>
//   tool:      results of the assistant's calls in order:
//              \n\n<function_results> (first) \n<result>{content}</result>
//              \n</function_results>\n\n<think> / </think> (last)
//
// The tools block lists each tool's function object as Python's
// json.dumps(ensure_ascii=False) writes it; calls are DSML blocks with each
// argument written as is (string="true") or as JSON (string="false").
// As serving frameworks call it: the request's tools go into the first
// system message (one is added when there is none), thinking mode is on
// when the chat_template_kwargs say `thinking` or `enable_thinking` true
// (off otherwise), and earlier turns' reasoning is dropped (drop_thinking,
// which the format's own rule makes a no-op before the last user turn).
// Errors are INVALID_ARGUMENT naming the message, as the Python raises.
#ifndef SPAR_TEXT_DSV32_ENCODING_H_
#define SPAR_TEXT_DSV32_ENCODING_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"

namespace spar {

struct Dsv32Options {
  bool thinking = false;      // thinking_mode "thinking" (else "chat")
  bool add_bos = true;        // add_default_bos_token
  nlohmann::ordered_json tools;  // OpenAI-style, into the first system message
};

// encode_messages(messages, thinking_mode, drop_thinking=True) for OpenAI-
// style messages (content strings, tool_calls with arguments as objects or
// JSON strings, reasoning_content).
absl::StatusOr<std::string> EncodeDsv32Messages(const nlohmann::ordered_json& messages, const Dsv32Options& options);

// The options a chat request means: tools, and thinking from the kwargs.
Dsv32Options Dsv32OptionsFor(const ChatTemplateOptions& options);

// The encoder as the server's chat template (ChatTemplate::FromEncoder).
std::unique_ptr<ChatTemplate> Dsv32ChatTemplate();

}  // namespace spar

#endif  // SPAR_TEXT_DSV32_ENCODING_H_
