#include "text/chat_output_parser.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/dsml_tool_calls.h"

namespace spar {
namespace {

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kCallOpen = "<tool_call>";
constexpr absl::string_view kCallClose = "</tool_call>";
constexpr absl::string_view kKeyOpen = "<arg_key>";
constexpr absl::string_view kKeyClose = "</arg_key>";
constexpr absl::string_view kValueOpen = "<arg_value>";
constexpr absl::string_view kValueClose = "</arg_value>";

// Length of the longest suffix of `text` that is a proper prefix of one of
// `tags`: text that may still turn into a tag.
size_t PartialTagTail(absl::string_view text, const std::vector<absl::string_view>& tags) {
  size_t best = 0;
  for (absl::string_view tag : tags) {
    for (size_t n = std::min(text.size(), tag.size() - 1); n > best; --n) {
      if (absl::EndsWith(text, tag.substr(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

size_t SkipSpace(absl::string_view s, size_t pos) {
  while (pos < s.size() && IsSpace(s[pos])) ++pos;
  return pos;
}

// The inside of one <tool_call> … </tool_call>; false when it does not parse.
bool ParseGlmCall(absl::string_view inner, ToolCallText* call) {
  const size_t first_key = inner.find(kKeyOpen);
  call->name = std::string(absl::StripAsciiWhitespace(inner.substr(0, first_key)));
  if (call->name.empty()) return false;
  size_t pos = first_key == absl::string_view::npos ? inner.size() : first_key;
  while ((pos = SkipSpace(inner, pos)) < inner.size()) {
    if (!absl::StartsWith(inner.substr(pos), kKeyOpen)) return false;
    const size_t key_end = inner.find(kKeyClose, pos);
    if (key_end == absl::string_view::npos) return false;
    std::string key(absl::StripAsciiWhitespace(inner.substr(pos + kKeyOpen.size(), key_end - pos - kKeyOpen.size())));
    pos = SkipSpace(inner, key_end + kKeyClose.size());
    if (key.empty() || !absl::StartsWith(inner.substr(pos), kValueOpen)) return false;
    const size_t value_begin = pos + kValueOpen.size();
    const size_t value_end = inner.find(kValueClose, value_begin);
    if (value_end == absl::string_view::npos) return false;
    call->args.emplace_back(std::move(key), std::string(inner.substr(value_begin, value_end - value_begin)));
    pos = value_end + kValueClose.size();
  }
  return true;
}

}  // namespace

ChatOutputParser::ChatOutputParser(ChatOutputSyntax syntax)
    : syntax_(syntax),
      space_before_block_(syntax.tool_calls && syntax.format == ToolCallFormat::kDsml),
      phase_(!syntax.reasoning ? Phase::kBody : syntax.starts_in_reasoning ? Phase::kReasoning : Phase::kStart),
      call_open_(absl::string_view::npos) {
  static const auto* const kNone = new std::vector<std::string>();
  static const auto* const kGlmOpen = new std::vector<std::string>{std::string(kCallOpen)};
  static const auto* const kGlmClose = new std::vector<std::string>{std::string(kCallClose)};
  const bool dsml = syntax.format == ToolCallFormat::kDsml;
  openers_ = !syntax.tool_calls ? kNone : dsml ? &DsmlBlockOpeners() : kGlmOpen;
  closers_ = !syntax.tool_calls ? kNone : dsml ? &DsmlBlockClosers() : kGlmClose;
  ends_reasoning_.push_back(kThinkClose);
  for (const std::string& o : *openers_) {
    ends_reasoning_.push_back(o);
    body_tags_.push_back(o);
  }
  if (syntax.reasoning) body_tags_.push_back(kThinkClose);
}

size_t ChatOutputParser::FindOpener(absl::string_view text, size_t from, size_t* which) const {
  size_t best = absl::string_view::npos;
  for (size_t i = 0; i < openers_->size(); ++i) {
    const size_t at = text.find((*openers_)[i], from);
    if (at < best) {
      best = at;
      *which = i;
    }
  }
  return best;
}

bool ChatOutputParser::ParseBlock(absl::string_view inner) {
  if (syntax_.format == ToolCallFormat::kDsml) return ParseDsmlCalls(inner, DsmlPrefixes()[opener_], &out_.tool_calls);
  ToolCallText call;
  if (!ParseGlmCall(inner, &call)) return false;
  out_.tool_calls.push_back(std::move(call));
  return true;
}

void ChatOutputParser::Feed(absl::string_view text, bool final) {
  constexpr size_t npos = absl::string_view::npos;
  // Text is committed to out_ only up to where no tag can start any more
  // (a partial tag tail is held back), so later searches begin at pos_.
  for (;;) {
    switch (phase_) {
      case Phase::kStart: {
        // The output may open its own reasoning block.
        const size_t lead = SkipSpace(text, 0);
        const absl::string_view rest = text.substr(lead);
        if (absl::StartsWith(rest, kThinkOpen)) {
          phase_ = Phase::kReasoning;
          pos_ = lead + kThinkOpen.size();
          continue;
        }
        if (!final && absl::StartsWith(kThinkOpen, rest)) return;  // may still become <think>
        phase_ = Phase::kBody;
        continue;
      }
      case Phase::kReasoning: {
        size_t which = 0;
        const size_t close = text.find(kThinkClose, pos_);
        const size_t call = FindOpener(text, pos_, &which);
        const size_t end = std::min(close, call);
        if (end == npos) {
          const size_t upto = final ? text.size() : text.size() - PartialTagTail(text.substr(pos_), ends_reasoning_);
          absl::StrAppend(&out_.reasoning, text.substr(pos_, upto - pos_));
          pos_ = upto;
          return;
        }
        absl::StrAppend(&out_.reasoning, text.substr(pos_, end - pos_));
        pos_ = end == close ? close + kThinkClose.size() : call;
        phase_ = Phase::kBody;
        continue;
      }
      case Phase::kBody: {
        if (call_open_ != npos) {
          const std::string& closer = (*closers_)[opener_];
          const size_t close = text.find(closer, close_from_);
          if (close == npos) {
            if (final) {  // never closed: kept as text
              absl::StrAppend(&out_.content, text.substr(call_text_));
              pos_ = text.size();
              call_open_ = npos;
            } else {
              // A closer that is still arriving starts in the last bytes.
              close_from_ = std::max(close_from_, text.size() - std::min(text.size(), closer.size() - 1));
            }
            return;
          }
          const size_t inner = call_open_ + (*openers_)[opener_].size();
          if (!ParseBlock(text.substr(inner, close - inner))) {
            absl::StrAppend(&out_.content, text.substr(call_text_, close + closer.size() - call_text_));
          }
          pos_ = close + closer.size();
          call_open_ = npos;
          continue;
        }
        if (pos_ >= text.size()) return;
        size_t which = 0;
        const size_t open = FindOpener(text, pos_, &which);
        // A </think> after reasoning ended (at a tool call) is not content.
        const size_t stray = syntax_.reasoning ? text.find(kThinkClose, pos_) : npos;
        if (stray < open) {
          absl::StrAppend(&out_.content, text.substr(pos_, stray - pos_));
          pos_ = stray + kThinkClose.size();
          continue;
        }
        if (open == npos) {
          size_t upto = final ? text.size() : text.size() - PartialTagTail(text.substr(pos_), body_tags_);
          if (space_before_block_ && !final) {
            // Trailing whitespace may precede a block: hold it back. Only
            // the bytes past ws_known_ are new (text[pos_, ws_known_) is
            // whitespace), so a long run is scanned once.
            const size_t known = std::max(pos_, ws_known_);
            size_t last = upto;
            while (last > known && IsSpace(text[last - 1])) --last;
            ws_known_ = std::max(ws_known_, upto);
            upto = last == known ? pos_ : last;
          }
          absl::StrAppend(&out_.content, text.substr(pos_, upto - pos_));
          pos_ = upto;
          return;
        }
        size_t block = open;
        if (space_before_block_) {
          while (block > pos_ && IsSpace(text[block - 1])) --block;
        }
        absl::StrAppend(&out_.content, text.substr(pos_, block - pos_));
        call_text_ = block;
        pos_ = open;
        call_open_ = open;
        opener_ = which;
        close_from_ = open + (*openers_)[which].size();
        continue;
      }
    }
  }
}

ChatOutput ParseChatOutput(absl::string_view text, const ChatOutputSyntax& syntax, bool final) {
  ChatOutputParser parser(syntax);
  parser.Feed(text, final);
  return parser.output();
}

}  // namespace spar
