// The pre-tokenizer's split regexes. Hugging Face tokenizers runs them with
// Oniguruma; spar uses PCRE2 (UTF + Unicode properties, JIT when available),
// which also has the lookahead those patterns need (RE2 has none).
#ifndef SPAR_TEXT_REGEX_H_
#define SPAR_TEXT_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {

class Regex {
 public:
  // Compiles a pattern written for Oniguruma (as found in tokenizer.json).
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of all non-overlapping, non-empty
  // matches in `text` (valid UTF-8), offset by `base`. Thread-safe.
  absl::Status FindAll(absl::string_view text, size_t base,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Regex() = default;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites Oniguruma-isms into PCRE2 syntax with the same meaning: `\s` and
// `\S` become the Unicode White_Space set (PCRE2's UCP `\s` differs on
// U+180E), and \x{...} style escapes pass through. Exposed for tests.
std::string TranslateOnigPattern(absl::string_view pattern);

}  // namespace spar

#endif  // SPAR_TEXT_REGEX_H_
