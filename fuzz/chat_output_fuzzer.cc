// Fuzzes the chat output parser with arbitrary model output: byte 0 picks
// the syntax (reasoning, starts in reasoning, tool calls), the rest is the
// text. Properties: no crash, and the streaming properties of
// chat_output_properties.h (every prefix's parse is a prefix of the whole;
// the incremental parser equals the one-shot parse at every cut).
#include <cstdint>
#include <string>

#include "fuzz/chat_output_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  spar::ChatOutputSyntax syntax;
  syntax.reasoning = data[0] & 1;
  syntax.starts_in_reasoning = data[0] & 2;
  syntax.tool_calls = data[0] & 4;
  spar::fuzz::CheckChatOutputProperties(std::string(reinterpret_cast<const char*>(data + 1), size - 1), syntax);
  return 0;
}
