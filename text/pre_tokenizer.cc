#include "text/pre_tokenizer.h"

#include <algorithm>
#include <string>

#include "base/status_macros.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

// A stretch of one piece: a regex match or the text between two ("gap"),
// or one code point for Digits. `delim` before Split's invert.
struct Part {
  size_t begin;
  size_t end;
  bool delim;
};

struct WordSink {
  absl::FunctionRef<bool(absl::string_view)> on_word;
  bool stopped = false;
};

// One step of the sequence, splitting one input piece at a time and handing
// its output pieces to the next step (or, for the last, to the sink).
//
// A piece arrives through Feed, possibly in installments: a known prefix
// (`closed` false) that later calls extend (`continuation`) until one says
// where it ends. Parts are taken only when final: in a prefix, regex
// searches use hard partial matching, and the text after the last final
// part waits. Output pieces follow the split behavior; one whose end is not
// known yet is handed on as a prefix, so the next step can work on it too.
class StepSplitter {
 public:
  StepSplitter(const PreTokenizerStep& step, StepSplitter* next, WordSink* sink)
      : step_(step), next_(next), sink_(sink) {
    switch (step.kind) {
      case PreTokenizerStep::Kind::kSplit:
        behavior_ = step.behavior;
        invert_ = step.invert;
        break;
      case PreTokenizerStep::Kind::kDigits:
        behavior_ = step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
        break;
      case PreTokenizerStep::Kind::kByteLevel:
        prefix_space_ = step.add_prefix_space;
        break;
    }
  }

  absl::Status Feed(absl::string_view piece, bool closed, bool continuation) {
    if (continuation && piece.size() < subject_.size() - (use_buffer_ ? 1 : 0)) {
      return absl::InternalError("pre-tokenizer: a piece shrank");
    }
    if (!continuation) {
      Reset();
      // ByteLevel's add_prefix_space: a piece that does not start with a
      // space is split (and becomes words) as " " + piece.
      use_buffer_ = prefix_space_ && !piece.empty() && piece[0] != ' ';
      if (use_buffer_) {
        buffer_.clear();
        buffer_.push_back(' ');
      }
    }
    if (use_buffer_) {
      buffer_.append(piece.data() + (buffer_.size() - 1), piece.size() - (buffer_.size() - 1));
      subject_ = buffer_;
    } else {
      subject_ = piece;
    }
    closed_ = closed;
    if (step_.kind == PreTokenizerStep::Kind::kByteLevel && step_.regex == nullptr) {
      // Only the prefix space: the piece passes on whole.
      return closed ? Emit(0, subject_.size(), true) : absl::OkStatus();
    }
    return Advance();
  }

 private:
  enum class Next { kPart, kBlocked, kDone };

  void Reset() {
    pos_ = search_from_ = gap_known_ = 0;
    have_match_ = exhausted_ = false;
    start_ = 0;
    run_active_ = false;
    open_out_begin_ = kNone;
  }

  absl::Status Advance() {
    while (!sink_->stopped) {
      Part part{};
      size_t frontier = 0;
      SPAR_ASSIGN_OR_RETURN(Next next, step_.kind == PreTokenizerStep::Kind::kDigits ? NextDigitPart(&part, &frontier)
                                                                                       : NextRegexPart(&part, &frontier));
      switch (next) {
        case Next::kPart:
          SPAR_RETURN_IF_ERROR(OnPart(part));
          break;
        case Next::kBlocked:
          return OnBlocked(frontier);
        case Next::kDone:
          return Finish();
      }
    }
    return absl::OkStatus();
  }

  // Regex steps: the gaps and matches FindAll-style searching yields (the
  // leftmost match from where the last one ended; an empty match steps over
  // one character). Blocked: [pos_, *frontier) is known to be gap, what
  // follows needs more text.
  absl::StatusOr<Next> NextRegexPart(Part* part, size_t* frontier) {
    const size_t size = subject_.size();
    while (true) {
      if (have_match_) {
        if (pos_ < match_begin_) {
          *part = {pos_, match_begin_, false};
          pos_ = match_begin_;
        } else {
          *part = {match_begin_, match_end_, true};
          pos_ = match_end_;
          have_match_ = false;
        }
        return Next::kPart;
      }
      if (exhausted_) {
        if (pos_ < size) {
          *part = {pos_, size, false};
          pos_ = size;
          return Next::kPart;
        }
        return Next::kDone;
      }
      if (search_from_ > size) {
        exhausted_ = true;
        continue;
      }
      SPAR_ASSIGN_OR_RETURN(Regex::Search found, step_.regex->Find(subject_, search_from_, !closed_));
      if (found.kind == Regex::Search::kNoMatch && closed_) {
        exhausted_ = true;
        continue;
      }
      if (found.kind == Regex::Search::kNoMatch || found.kind == Regex::Search::kNeedMore ||
          (found.kind == Regex::Search::kMatch && found.end == found.begin && found.begin >= size && !closed_)) {
        // No match starts before `resume` whatever follows; from there on
        // the outcome depends on text not known yet.
        // (A partial match may report where its lookbehind began, before
        // the offset: what earlier searches established still holds.)
        const size_t resume = found.kind == Regex::Search::kNoMatch ? size : std::min(found.begin, size);
        search_from_ = std::max(search_from_, resume);
        gap_known_ = std::max(gap_known_, resume);
        *frontier = std::max(pos_, gap_known_);
        return Next::kBlocked;
      }
      if (found.end > found.begin) {
        have_match_ = true;
        match_begin_ = found.begin;
        match_end_ = found.end;
        search_from_ = found.end;
        continue;
      }
      // An empty match: step over one character.
      if (found.begin >= size) {
        exhausted_ = true;
        continue;
      }
      size_t next = found.begin + 1;
      while (next < size && (static_cast<uint8_t>(subject_[next]) & 0xC0) == 0x80) ++next;
      search_from_ = next;
    }
  }

  // Digits: one part per code point, a digit or not.
  absl::StatusOr<Next> NextDigitPart(Part* part, size_t* frontier) {
    if (pos_ >= subject_.size()) {
      *frontier = pos_;
      return closed_ ? Next::kDone : Next::kBlocked;
    }
    char32_t cp = 0;
    size_t len = DecodeUtf8At(subject_, pos_, &cp);
    if (len == 0) {
      if (!closed_) {  // a character cut by the end of what is known
        *frontier = pos_;
        return Next::kBlocked;
      }
      len = 1;
    }
    *part = {pos_, pos_ + len, IsUnicodeNumeric(cp)};
    pos_ += len;
    return Next::kPart;
  }

  absl::Status OnPart(const Part& part) {
    const bool delim = part.delim != invert_;
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        return Emit(part.begin, part.end, true);
      case SplitBehavior::kRemoved:
        return delim ? absl::OkStatus() : Emit(part.begin, part.end, true);
      case SplitBehavior::kMergedWithPrevious: {
        if (!delim) return absl::OkStatus();
        const size_t begin = start_;
        start_ = part.end;
        return Emit(begin, part.end, true);
      }
      case SplitBehavior::kMergedWithNext: {
        if (!delim) return absl::OkStatus();
        const size_t begin = start_;
        start_ = part.begin;
        return Emit(begin, part.begin, true);
      }
      case SplitBehavior::kContiguous: {
        if (!run_active_) {
          run_active_ = true;
          start_ = part.begin;
          run_delim_ = delim;
          return absl::OkStatus();
        }
        if (delim == run_delim_) return absl::OkStatus();
        const size_t begin = start_;
        start_ = part.begin;
        run_delim_ = delim;
        return Emit(begin, part.begin, true);
      }
    }
    return absl::OkStatus();
  }

  // Blocked with [pos_, frontier) known to belong to a gap that goes on (a
  // regex step's text before the next match; nothing for Digits): hand on
  // the output piece that is sure to come, as far as it is known.
  absl::Status OnBlocked(size_t frontier) {
    const size_t known = std::max(pos_, frontier);
    const bool growing = known > pos_;
    const bool growing_delim = invert_;  // a gap, after Split's invert
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        return growing ? Emit(pos_, known, false) : absl::OkStatus();
      case SplitBehavior::kRemoved:
        return growing && !growing_delim ? Emit(pos_, known, false) : absl::OkStatus();
      case SplitBehavior::kMergedWithNext:
        if (growing && growing_delim && pos_ > start_) {
          // A delimiter begins at pos_: the pending piece ends there.
          SPAR_RETURN_IF_ERROR(Emit(start_, pos_, true));
          start_ = pos_;
        }
        return known > start_ ? Emit(start_, known, false) : absl::OkStatus();
      case SplitBehavior::kMergedWithPrevious:  // a delimiter ends the piece: it grows until then
        return known > start_ ? Emit(start_, known, false) : absl::OkStatus();
      case SplitBehavior::kContiguous:
        if (growing && (!run_active_ || growing_delim != run_delim_)) {
          // The gap starts a run of its own (ending the current one).
          if (run_active_) SPAR_RETURN_IF_ERROR(Emit(start_, pos_, true));
          run_active_ = true;
          start_ = pos_;
          run_delim_ = growing_delim;
        }
        return run_active_ ? Emit(start_, known, false) : absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // The piece is closed and every part is out: what is pending ends here.
  absl::Status Finish() {
    const size_t size = subject_.size();
    switch (behavior_) {
      case SplitBehavior::kMergedWithPrevious:
      case SplitBehavior::kMergedWithNext:
        return Emit(start_, size, true);
      case SplitBehavior::kContiguous:
        return run_active_ ? Emit(start_, size, true) : absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  // Hands [begin, end) of the subject on; `closed` false: a prefix of a
  // piece whose end comes later (in a later Emit with the same begin).
  absl::Status Emit(size_t begin, size_t end, bool closed) {
    if (end <= begin) return absl::OkStatus();
    const bool continuation = open_out_begin_ == begin;
    if (!continuation && open_out_begin_ != kNone) {
      return absl::InternalError("pre-tokenizer: a piece began before the previous one ended");
    }
    open_out_begin_ = closed ? kNone : begin;
    const absl::string_view piece = subject_.substr(begin, end - begin);
    if (next_ != nullptr) return next_->Feed(piece, closed, continuation);
    if (closed && !sink_->on_word(piece)) sink_->stopped = true;
    return absl::OkStatus();
  }

  const PreTokenizerStep& step_;
  StepSplitter* const next_;
  WordSink* const sink_;
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
  bool invert_ = false;
  bool prefix_space_ = false;

  // The current input piece (a view of the previous step's subject, or of
  // buffer_ with a prefix space).
  absl::string_view subject_;
  std::string buffer_;
  bool use_buffer_ = false;
  bool closed_ = false;
  // Parts: all of [0, pos_) is split into parts; searching resumes at
  // search_from_; a match found but not yet emitted; no match after.
  size_t pos_ = 0;
  size_t search_from_ = 0;
  size_t gap_known_ = 0;  // no match starts in [pos_, gap_known_)
  bool have_match_ = false;
  size_t match_begin_ = 0, match_end_ = 0;
  bool exhausted_ = false;
  // Behavior: where the pending output piece (or Contiguous run) starts.
  size_t start_ = 0;
  bool run_active_ = false;
  bool run_delim_ = false;
  // The begin of the output piece handed on as a prefix, kNone if none.
  size_t open_out_begin_ = kNone;
};

}  // namespace

absl::Status PreTokenizer::ForEachWord(absl::string_view text, size_t window,
                                       absl::FunctionRef<bool(absl::string_view word)> on_word) const {
  WordSink sink{on_word};
  // A ByteLevel step without regex and prefix space changes nothing.
  std::vector<const PreTokenizerStep*> active;
  for (const PreTokenizerStep& step : steps_) {
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.regex == nullptr && !step.add_prefix_space) continue;
    active.push_back(&step);
  }
  if (active.empty()) {
    if (!text.empty()) on_word(text);
    return absl::OkStatus();
  }
  std::vector<std::unique_ptr<StepSplitter>> splitters(active.size());
  for (size_t k = active.size(); k-- > 0;) {
    splitters[k] =
        std::make_unique<StepSplitter>(*active[k], k + 1 < active.size() ? splitters[k + 1].get() : nullptr, &sink);
  }
  size_t known = window == 0 ? text.size() : std::min(window, text.size());
  for (bool continuation = false;; continuation = true) {
    while (known < text.size() && (static_cast<uint8_t>(text[known]) & 0xC0) == 0x80) ++known;
    const bool closed = known >= text.size();
    SPAR_RETURN_IF_ERROR(splitters[0]->Feed(text.substr(0, known), closed, continuation));
    if (closed || sink.stopped) return absl::OkStatus();
    known = known > text.size() / 2 ? text.size() : 2 * known;
  }
}

}  // namespace spar
