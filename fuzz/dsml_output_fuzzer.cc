// Fuzzes DeepSeek-V3.2's DSML tool-call parsing of model output (the chat
// output parser in its DSML format): byte 0 picks reasoning / starts in
// reasoning, the rest is the text. Properties as for GLM's format (the
// streaming properties of chat_output_properties.h), and every call has a
// name and one string flag per argument.
#include <cstdint>
#include <string>

#include "fuzz/chat_output_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  spar::ChatOutputSyntax syntax;
  syntax.reasoning = data[0] & 1;
  syntax.starts_in_reasoning = data[0] & 2;
  syntax.tool_calls = true;
  syntax.format = spar::ToolCallFormat::kDsml;
  const spar::ChatOutput whole =
      spar::fuzz::CheckChatOutputProperties(std::string(reinterpret_cast<const char*>(data + 1), size - 1), syntax);
  for (const spar::ToolCallText& c : whole.tool_calls) {
    SPAR_FUZZ_CHECK(!c.name.empty());
    SPAR_FUZZ_CHECK(c.arg_string.size() == c.args.size());
  }
  return 0;
}
