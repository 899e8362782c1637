#include "text/chat_output_parser.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

size_t SkipSpace(absl::string_view s, size_t pos) {
  while (pos < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  return pos;
}

// The inside of one <tool_call> … </tool_call>; false when it does not parse.
bool ParseCall(absl::string_view inner, ToolCallText* call) {
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

ChatOutput ParseChatOutput(absl::string_view text, const ChatOutputSyntax& syntax, bool final) {
  ChatOutput out;
  // Tags whose partial tail is held back: what ends reasoning, and what the
  // content may still turn into.
  std::vector<absl::string_view> ends_reasoning = {kThinkClose}, body_tags;
  if (syntax.tool_calls) {
    ends_reasoning.push_back(kCallOpen);
    body_tags.push_back(kCallOpen);
  }
  if (syntax.reasoning) body_tags.push_back(kThinkClose);
  size_t pos = 0;
  bool in_reasoning = syntax.reasoning && syntax.starts_in_reasoning;
  if (syntax.reasoning && !in_reasoning) {
    // The output may open its own reasoning block.
    const size_t lead = SkipSpace(text, 0);
    const absl::string_view rest = text.substr(lead);
    if (absl::StartsWith(rest, kThinkOpen)) {
      in_reasoning = true;
      pos = lead + kThinkOpen.size();
    } else if (!final && absl::StartsWith(kThinkOpen, rest)) {
      return out;  // nothing but what may still become <think>
    }
  }
  if (in_reasoning) {
    const size_t close = text.find(kThinkClose, pos);
    const size_t call = syntax.tool_calls ? text.find(kCallOpen, pos) : absl::string_view::npos;
    const size_t end = std::min(close, call);
    if (end == absl::string_view::npos) {
      absl::string_view r = text.substr(pos);
      if (!final) r.remove_suffix(PartialTagTail(r, ends_reasoning));
      out.reasoning = std::string(r);
      return out;
    }
    out.reasoning = std::string(text.substr(pos, end - pos));
    pos = end == close ? close + kThinkClose.size() : call;
  }
  while (pos < text.size()) {
    const size_t open = syntax.tool_calls ? text.find(kCallOpen, pos) : absl::string_view::npos;
    // A </think> after reasoning ended (at a tool call) is not content.
    const size_t stray = syntax.reasoning ? text.find(kThinkClose, pos) : absl::string_view::npos;
    if (stray < open) {
      absl::StrAppend(&out.content, text.substr(pos, stray - pos));
      pos = stray + kThinkClose.size();
      continue;
    }
    if (open == absl::string_view::npos) {
      absl::string_view c = text.substr(pos);
      if (!final) c.remove_suffix(PartialTagTail(c, body_tags));
      absl::StrAppend(&out.content, c);
      break;
    }
    absl::StrAppend(&out.content, text.substr(pos, open - pos));
    const size_t close = text.find(kCallClose, open);
    if (close == absl::string_view::npos) {
      if (final) absl::StrAppend(&out.content, text.substr(open));  // never closed: kept as text
      break;
    }
    ToolCallText call;
    const size_t inner = open + kCallOpen.size();
    if (ParseCall(text.substr(inner, close - inner), &call)) {
      out.tool_calls.push_back(std::move(call));
    } else {
      absl::StrAppend(&out.content, text.substr(open, close + kCallClose.size() - open));
    }
    pos = close + kCallClose.size();
  }
  return out;
}

}  // namespace spar
