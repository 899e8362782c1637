// The pre-tokenizer's split regexes. Hugging Face tokenizers runs them with
// Oniguruma; spar uses PCRE2 (UTF + Unicode properties, JIT when available),
// which also has the lookahead those patterns need (RE2 has none).
#ifndef SPAR_TEXT_REGEX_H_
#define SPAR_TEXT_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>

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

  // The leftmost match in `text` (valid UTF-8) starting at or after
  // `offset`. With `more_may_follow`, `text` is only the beginning of the
  // subject (PCRE2's hard partial matching): a match is reported only when
  // no continuation of the text could change it, and kNeedMore says where a
  // match might start that needs more text to decide (none starts before
  // that). This lets the pre-tokenizer split a prefix of a long text exactly
  // as it would split the whole. An error when the match limit (backtracking
  // bound) is hit. Thread-safe.
  struct Search {
    enum Kind { kMatch, kNoMatch, kNeedMore } kind = kNoMatch;
    size_t begin = 0;  // kMatch, kNeedMore
    size_t end = 0;    // kMatch (may equal begin: an empty match)
  };
  absl::StatusOr<Search> Find(absl::string_view text, size_t offset, bool more_may_follow) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Regex() = default;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  bool jit_partial_ = false;
};

// Rewrites Oniguruma-isms into PCRE2 syntax with the same meaning: `\s` and
// `\S` become the Unicode White_Space set (PCRE2's UCP `\s` differs on
// U+180E), and \x{...} style escapes pass through. Exposed for tests.
std::string TranslateOnigPattern(absl::string_view pattern);

}  // namespace spar

#endif  // SPAR_TEXT_REGEX_H_
