#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace spar {
namespace {

// Unicode White_Space, the set Oniguruma's \s matches on UTF-8 input.
constexpr absl::string_view kWhiteSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Bounds the backtracking of one match so that a hostile input yields an
// error instead of a stuck request. Real tokenizer patterns need a handful of
// steps per byte.
constexpr uint32_t kMatchLimit = 50'000'000;
constexpr size_t kJitStackMax = 8 << 20;

// Per-thread scratch: match data (only the whole-match pair is read) and a
// JIT stack. PCRE2 forbids sharing either between concurrent matches.
struct ThreadScratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadScratch() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context, kMatchLimit);
    jit_stack = pcre2_jit_stack_create(32 << 10, kJitStackMax, nullptr);
    if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadScratch() {
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(context);
    if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

std::string PcreErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return std::string(reinterpret_cast<const char*>(buffer));
}

}  // namespace

std::string TranslateOnigPattern(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        if (in_class) {
          out.append(kWhiteSpaceItems.data(), kWhiteSpaceItems.size());
        } else {
          absl::StrAppend(&out, "[", kWhiteSpaceItems, "]");
        }
        ++i;
        continue;
      }
      if (e == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kWhiteSpaceItems, "]");
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        out.push_back(']');
        ++i;
      }
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern) {
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  const std::string translated = TranslateOnigPattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex \"", pattern, "\" at offset ",
                                                   error_offset, ": ", PcreErrorMessage(error_code)));
  }
  re->code_ = code;
  // JIT is an optimization only: without it (no JIT support in this build)
  // the interpreter gives the same matches.
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  re->jit_partial_ = re->jit_ && pcre2_jit_compile(code, PCRE2_JIT_PARTIAL_HARD) == 0;
  return re;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

absl::StatusOr<Regex::Search> Regex::Find(absl::string_view text, size_t offset, bool more_may_follow) const {
  ThreadScratch& scratch = Scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  auto* code = static_cast<pcre2_code*>(code_);
  // The text was validated (or sanitized) once by the caller.
  const uint32_t options = PCRE2_NO_UTF_CHECK | (more_may_follow ? PCRE2_PARTIAL_HARD : 0);
  const int rc = (more_may_follow ? jit_partial_ : jit_)
                     ? pcre2_jit_match(code, subject, text.size(), offset, options, scratch.match_data, scratch.context)
                     : pcre2_match(code, subject, text.size(), offset, options, scratch.match_data, scratch.context);
  Search found;
  if (rc == PCRE2_ERROR_NOMATCH) return found;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_data);
  if (rc == PCRE2_ERROR_PARTIAL) {
    found.kind = Search::kNeedMore;
    found.begin = ov[0];
    return found;
  }
  if (rc < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("regex \"", pattern_, "\" failed at byte ", offset, ": ", PcreErrorMessage(rc)));
  }
  found.kind = Search::kMatch;
  found.begin = ov[0];
  found.end = ov[1];
  return found;
}

}  // namespace spar
