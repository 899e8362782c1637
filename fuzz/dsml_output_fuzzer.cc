// Fuzzes DeepSeek-V3.2's DSML tool-call parsing of model output (the chat
// output parser in its DSML format): byte 0 picks reasoning / starts in
// reasoning, the rest is the text. Properties as for GLM's format: no
// crash; the parse of a prefix (not final) is a prefix of the whole parse,
// so a stream never sends what it must take back; the incremental parser
// agrees with the one-shot parse at every cut; the parts never hold more
// bytes than the text; every call has a name and one string flag per arg.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "text/chat_output_parser.h"

namespace {

bool IsPrefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  spar::ChatOutputSyntax syntax;
  syntax.reasoning = data[0] & 1;
  syntax.starts_in_reasoning = data[0] & 2;
  syntax.tool_calls = true;
  syntax.format = spar::ToolCallFormat::kDsml;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const spar::ChatOutput whole = spar::ParseChatOutput(text, syntax, /*final=*/true);
  SPAR_FUZZ_CHECK(whole.reasoning.size() + whole.content.size() <= text.size());
  for (const spar::ToolCallText& c : whole.tool_calls) {
    SPAR_FUZZ_CHECK(!c.name.empty());
    SPAR_FUZZ_CHECK(c.arg_string.size() == c.args.size());
  }
  spar::ChatOutputParser incremental(syntax);
  for (size_t k = 0; k <= 72; ++k) {
    const size_t spread = text.size() > 24 ? text.size() - 24 : 0;
    const size_t n = k <= 48 ? spread * k / 48 : text.size() - std::min(text.size(), 72 - k);
    const spar::ChatOutput part = spar::ParseChatOutput(text.substr(0, n), syntax, /*final=*/false);
    incremental.Feed(absl::string_view(text).substr(0, n), /*final=*/false);
    SPAR_FUZZ_CHECK(incremental.output().reasoning == part.reasoning);
    SPAR_FUZZ_CHECK(incremental.output().content == part.content);
    SPAR_FUZZ_CHECK(incremental.output().tool_calls == part.tool_calls);
    SPAR_FUZZ_CHECK(IsPrefix(part.reasoning, whole.reasoning));
    SPAR_FUZZ_CHECK(IsPrefix(part.content, whole.content));
    SPAR_FUZZ_CHECK(part.tool_calls.size() <= whole.tool_calls.size());
    for (size_t i = 0; i < part.tool_calls.size(); ++i) SPAR_FUZZ_CHECK(part.tool_calls[i] == whole.tool_calls[i]);
  }
  incremental.Feed(text, /*final=*/true);
  SPAR_FUZZ_CHECK(incremental.output().reasoning == whole.reasoning);
  SPAR_FUZZ_CHECK(incremental.output().content == whole.content);
  SPAR_FUZZ_CHECK(incremental.output().tool_calls == whole.tool_calls);
  return 0;
}
