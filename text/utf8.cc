#include "text/utf8.h"

namespace spar {
namespace {

// Allowed range of the second byte of a sequence, from the lead byte
// (Unicode Table 3-7). Later continuation bytes are always 80..BF.
struct LeadInfo {
  int length;  // 0: never a lead byte
  uint8_t lo;
  uint8_t hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t Utf8UnitLength(absl::string_view s, size_t pos, bool* valid) {
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  const LeadInfo info = Lead(b0);
  if (info.length == 1) {
    *valid = true;
    return 1;
  }
  if (info.length == 0) {
    *valid = false;
    return 1;
  }
  size_t n = 1;
  for (int k = 1; k < info.length; ++k) {
    if (pos + n >= s.size()) {
      *valid = false;
      return n;
    }
    const uint8_t b = static_cast<uint8_t>(s[pos + n]);
    const uint8_t lo = k == 1 ? info.lo : 0x80;
    const uint8_t hi = k == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) {
      *valid = false;
      return n;
    }
    ++n;
  }
  *valid = true;
  return n;
}

size_t DecodeUtf8At(absl::string_view s, size_t pos, char32_t* cp) {
  bool valid = false;
  const size_t n = Utf8UnitLength(s, pos, &valid);
  if (!valid) return 0;
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  char32_t c;
  switch (n) {
    case 1:
      c = b0;
      break;
    case 2:
      c = b0 & 0x1F;
      break;
    case 3:
      c = b0 & 0x0F;
      break;
    default:
      c = b0 & 0x07;
      break;
  }
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  *cp = c;
  return n;
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs dominate real text; skip them eight bytes at a time would be
    // faster still, but this loop is not on a hot path.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool valid = false;
    i += Utf8UnitLength(s, i, &valid);
    if (!valid) return false;
  }
  return true;
}

void AppendSanitizedUtf8(absl::string_view s, std::string* out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;
    while (run < s.size() && static_cast<uint8_t>(s[run]) < 0x80) ++run;
    out->append(s.data() + i, run - i);
    i = run;
    if (i >= s.size()) break;
    bool valid = false;
    const size_t n = Utf8UnitLength(s, i, &valid);
    if (valid) {
      out->append(s.data() + i, n);
    } else {
      AppendUtf8(kReplacementChar, out);
    }
    i += n;
  }
}

std::string SanitizeUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendSanitizedUtf8(s, &out);
  return out;
}

size_t IncompleteUtf8Tail(absl::string_view s) {
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const size_t p = n - k;
    const LeadInfo info = Lead(static_cast<uint8_t>(s[p]));
    if (info.length <= 1) {
      // An ASCII byte or a continuation byte: if it is a continuation, keep
      // looking further back for its lead; otherwise nothing is pending.
      const uint8_t b = static_cast<uint8_t>(s[p]);
      if (b >= 0x80 && b <= 0xBF) continue;
      return 0;
    }
    if (static_cast<size_t>(info.length) <= k) return 0;  // complete (or invalid)
    // Every byte after the lead must still fit the well-formed pattern.
    for (size_t j = 1; j < k; ++j) {
      const uint8_t b = static_cast<uint8_t>(s[p + j]);
      const uint8_t lo = j == 1 ? info.lo : 0x80;
      const uint8_t hi = j == 1 ? info.hi : 0xBF;
      if (b < lo || b > hi) return 0;
    }
    return k;
  }
  return 0;
}

}  // namespace spar
