// Hugging Face pre-tokenization (tokenizer.json "pre_tokenizer"): a sequence
// of steps, each splitting every piece the previous step produced into
// smaller pieces; what the last step yields are the words BPE encodes.
//
// Words are produced as a stream, a window of the text at a time, so that an
// encoder that needs only the first N tokens of a long text stops early: the
// words are exactly those of splitting the whole text at once, because every
// regex search on a window uses PCRE2's hard partial matching (a match is
// taken only when no continuation of the text could change it) and a piece
// is handed to the next step, or becomes a word, only once its end is known.
// Work and memory grow with the part of the text consumed, not its length,
// except that one word (e.g. a megabyte run of letters, which a regex splits
// no further) is produced whole.
#ifndef SPAR_TEXT_PRE_TOKENIZER_H_
#define SPAR_TEXT_PRE_TOKENIZER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "text/regex.h"

namespace spar {

// How a Split step turns matches ("delimiters") into pieces.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kDigits, kByteLevel };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;  // kDigits
  bool add_prefix_space = false;   // kByteLevel
};

class PreTokenizer {
 public:
  // `steps` in tokenizer.json order (a ByteLevel step, if any, last).
  void AddStep(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool has_steps() const { return !steps_.empty(); }

  // Calls `on_word` with every non-empty word of `text` (valid UTF-8) in
  // order, until it returns false. `window` is the first stretch of the
  // text split (it doubles while more is needed); 0 splits the whole text
  // in one pass, the fastest way when every word is wanted. Errors: a regex
  // that hits its backtracking bound.
  absl::Status ForEachWord(absl::string_view text, size_t window,
                           absl::FunctionRef<bool(absl::string_view word)> on_word) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace spar

#endif  // SPAR_TEXT_PRE_TOKENIZER_H_
