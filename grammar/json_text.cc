#include "grammar/json_text.h"

#include <deque>
#include <map>
#include <utility>

namespace spar::grammar {
namespace {

// Where a UTF-8 sequence stands: at a boundary or waiting for
// continuation bytes (with the restricted second byte of E0/ED/F0/F4).
enum Utf8 : int { kAtBoundary, kCont1, kCont2, kCont3, kAfterE0, kAfterED, kAfterF0, kAfterF4 };

// A lead byte's next UTF-8 state, or -1 when it cannot start a character.
int Utf8Lead(int c) {
  if (c >= 0xC2 && c <= 0xDF) return kCont1;
  if (c == 0xE0) return kAfterE0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return kCont2;
  if (c == 0xED) return kAfterED;
  if (c == 0xF0) return kAfterF0;
  if (c >= 0xF1 && c <= 0xF3) return kCont3;
  if (c == 0xF4) return kAfterF4;
  return -1;
}

// A continuation byte's next state (kAtBoundary: the character is done),
// or -1.
int Utf8Cont(int state, int c) {
  const bool cont = c >= 0x80 && c <= 0xBF;
  switch (state) {
    case kCont1: return cont ? kAtBoundary : -1;
    case kCont2: return cont ? kCont1 : -1;
    case kCont3: return cont ? kCont2 : -1;
    case kAfterE0: return c >= 0xA0 && c <= 0xBF ? kCont1 : -1;
    case kAfterED: return c >= 0x80 && c <= 0x9F ? kCont1 : -1;
    case kAfterF0: return c >= 0x90 && c <= 0xBF ? kCont2 : -1;
    case kAfterF4: return c >= 0x80 && c <= 0x8F ? kCont2 : -1;
    default: return -1;
  }
}

bool IsHex(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Breadth-first construction over (sub-state, count) pairs; `step` gives
// the successor of a pair on a byte, or sub < 0 for none.
template <typename Step, typename Final>
ByteDfa BuildCounted(std::pair<int, int> start, Step step, Final is_final) {
  ByteDfa d;
  std::map<std::pair<int, int>, int32_t> ids;
  std::deque<std::pair<int, int>> work;
  auto id_of = [&](std::pair<int, int> s) {
    auto [it, fresh] = ids.emplace(s, 0);
    if (fresh) {
      it->second = d.AddState(is_final(s));
      work.push_back(s);
    }
    return it->second;
  };
  d.start = id_of(start);
  while (!work.empty()) {
    const auto s = work.front();
    work.pop_front();
    const int32_t from = ids.at(s);
    for (int c = 0; c < 256; ++c) {
      const std::pair<int, int> t = step(s, c);
      if (t.first < 0) continue;
      const int32_t to = id_of(t);
      d.next[from][c] = to;
    }
  }
  return Trim(d);
}

}  // namespace

ByteDfa JsonStringDfa(const StringShape& shape) {
  // Sub-states after the opening quote; the UTF-8 ones are offset.
  enum : int { kOpen = 100, kBody, kEscape, kHex1, kHex2, kHex2Low, kHex3, kHex4, kDone };
  const int min = shape.min_chars, max = shape.max_chars;
  // With no upper bound, counts past the minimum are all alike.
  auto done_char = [&](int count) { return max < 0 ? std::min(count + 1, min) : count + 1; };
  auto room = [&](int count) { return max < 0 || count < max; };
  auto step = [&](std::pair<int, int> s, int c) -> std::pair<int, int> {
    const auto [sub, count] = s;
    switch (sub) {
      case kOpen:
        return c == '"' ? std::make_pair(static_cast<int>(kBody), 0) : std::make_pair(-1, 0);
      case kBody: {
        if (c == '"') return count >= min ? std::make_pair(static_cast<int>(kDone), count) : std::make_pair(-1, 0);
        if (!room(count)) return {-1, 0};
        if (c == '\\') return {kEscape, count};
        if (c < 0x20) return {-1, 0};
        if (c < 0x80) {
          return {kBody, done_char(count)};
        }
        const int u = Utf8Lead(c);
        return u < 0 ? std::make_pair(-1, 0) : std::make_pair(u, count);
      }
      case kEscape:
        if (c == 'u') return {kHex1, count};
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
          return {kBody, done_char(count)};
        }
        return {-1, 0};
      case kHex1:  // no surrogate halves: D8-DF is refused at the second digit
        if (!IsHex(c)) return {-1, 0};
        return {c == 'd' || c == 'D' ? kHex2Low : kHex2, count};
      case kHex2Low:
        return c >= '0' && c <= '7' ? std::make_pair(static_cast<int>(kHex3), count) : std::make_pair(-1, 0);
      case kHex2:
        return IsHex(c) ? std::make_pair(static_cast<int>(kHex3), count) : std::make_pair(-1, 0);
      case kHex3:
        return IsHex(c) ? std::make_pair(static_cast<int>(kHex4), count) : std::make_pair(-1, 0);
      case kHex4:
        return IsHex(c) ? std::make_pair(static_cast<int>(kBody), done_char(count)) : std::make_pair(-1, 0);
      case kDone:
        return {-1, 0};
      default: {  // inside a UTF-8 character
        const int u = Utf8Cont(sub, c);
        if (u < 0) return {-1, 0};
        if (u == kAtBoundary) return {kBody, done_char(count)};
        return {u, count};
      }
    }
  };
  ByteDfa d = BuildCounted({kOpen, 0}, step, [](std::pair<int, int> s) { return s.first == kDone; });
  if (shape.forbidden.empty()) return d;
  return Intersect(d, WithoutSubstrings(shape.forbidden));
}

ByteDfa RawTextDfa(int min_chars, int max_chars, const std::vector<std::string>& forbidden) {
  auto step = [&](std::pair<int, int> s, int c) -> std::pair<int, int> {
    const int sub = s.first, count = s.second;  // (clang 14 cannot capture structured bindings)
    auto done = [&] { return max_chars < 0 ? std::min(count + 1, min_chars) : count + 1; };
    if (sub == kAtBoundary) {
      if (max_chars >= 0 && count >= max_chars) return {-1, 0};
      if (c < 0x80) return {kAtBoundary, done()};
      const int u = Utf8Lead(c);
      return u < 0 ? std::make_pair(-1, 0) : std::make_pair(u, count);
    }
    const int u = Utf8Cont(sub, c);
    if (u < 0) return {-1, 0};
    return u == kAtBoundary ? std::make_pair(static_cast<int>(kAtBoundary), done()) : std::make_pair(u, count);
  };
  ByteDfa counted = BuildCounted({kAtBoundary, 0}, step,
                                 [&](std::pair<int, int> s) { return s.first == kAtBoundary && s.second >= min_chars; });
  if (forbidden.empty()) return counted;
  return Intersect(counted, WithoutSubstrings(forbidden));
}

}  // namespace spar::grammar
