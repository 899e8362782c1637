// The streaming properties every chat output format's fuzzer checks
// (chat_output_fuzzer: GLM, dsml_output_fuzzer: DeepSeek's DSML): the parts
// never hold more bytes than the text; the parse of a prefix (not final) is
// a prefix of the whole parse, so a stream never sends what it must take
// back; the incremental parser agrees with the one-shot parse at every cut
// (48 spread over the text, then the last 24 bytes one by one) and at the end.
#ifndef SPAR_FUZZ_CHAT_OUTPUT_PROPERTIES_H_
#define SPAR_FUZZ_CHAT_OUTPUT_PROPERTIES_H_

#include <algorithm>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "text/chat_output_parser.h"

namespace spar::fuzz {

inline bool IsPrefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

// Returns the whole parse (final) after checking the properties.
inline ChatOutput CheckChatOutputProperties(const std::string& text, const ChatOutputSyntax& syntax) {
  const ChatOutput whole = ParseChatOutput(text, syntax, /*final=*/true);
  SPAR_FUZZ_CHECK(whole.reasoning.size() + whole.content.size() <= text.size());
  ChatOutputParser incremental(syntax);
  for (size_t k = 0; k <= 72; ++k) {
    const size_t spread = text.size() > 24 ? text.size() - 24 : 0;
    const size_t n = k <= 48 ? spread * k / 48 : text.size() - std::min(text.size(), 72 - k);
    const ChatOutput part = ParseChatOutput(text.substr(0, n), syntax, /*final=*/false);
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
  return whole;
}

}  // namespace spar::fuzz

#endif  // SPAR_FUZZ_CHAT_OUTPUT_PROPERTIES_H_
