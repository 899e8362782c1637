#include "grammar/number_range.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"

namespace spar::grammar {
namespace {

enum Rel : int { kLess = 0, kEqual = 1, kGreater = 2 };

int Compare(char a, char b) { return a < b ? kLess : a > b ? kGreater : kEqual; }
int Reverse(int r) { return 2 - r; }

// Digits of a (mantissa, exponent) pair as a normalized decimal.
Decimal Normalize(bool negative, std::string digits, int64_t point) {
  // `digits` with the decimal point after `point` digits (may be <= 0 or
  // past the end).
  Decimal d;
  std::string int_part, frac_part;
  if (point <= 0) {
    int_part = "0";
    frac_part = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= static_cast<int64_t>(digits.size())) {
    int_part = digits + std::string(static_cast<size_t>(point - digits.size()), '0');
  } else {
    int_part = digits.substr(0, point);
    frac_part = digits.substr(point);
  }
  const size_t nz = int_part.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : int_part.substr(nz);
  while (!frac_part.empty() && frac_part.back() == '0') frac_part.pop_back();
  d.frac_digits = frac_part;
  d.negative = negative && !d.is_zero();
  return d;
}

// Per bound: how the digits so far compare with it.
struct Cmp {
  int lex = kEqual;   // integer digits so far vs the bound's leading digits
  int int_rel = -1;   // once the integer part ended: its comparison
  int frac = kEqual;  // fraction digits so far vs the bound's (padded)
  auto key() const { return std::array<int, 3>{lex, int_rel, frac}; }
};

enum Phase : int { kStart, kMinus, kIntZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

struct State {
  int phase = kStart;
  bool negative = false;
  bool zero = true;  // every digit so far is 0
  int int_len = 0, frac_len = 0, exp_len = 0;
  Cmp lo, hi;
  auto key() const {
    return std::make_tuple(phase, negative, zero, int_len, frac_len, exp_len, lo.key(), hi.key());
  }
};

struct Limits {
  int int_digits, frac_digits;
  bool exponent;
};

void IntDigit(const std::optional<Decimal>& b, int index, char c, Cmp* cmp) {
  if (!b || cmp->lex != kEqual || index >= static_cast<int>(b->int_digits.size())) return;
  cmp->lex = Compare(c, b->int_digits[index]);
}

void EndInt(const std::optional<Decimal>& b, int int_len, Cmp* cmp) {
  if (!b) return;
  const int n = static_cast<int>(b->int_digits.size());
  cmp->int_rel = int_len < n ? kLess : int_len > n ? kGreater : cmp->lex;
}

void FracDigit(const std::optional<Decimal>& b, int index, char c, Cmp* cmp) {
  if (!b || cmp->int_rel != kEqual || cmp->frac != kEqual) return;
  const char bd = index < static_cast<int>(b->frac_digits.size()) ? b->frac_digits[index] : '0';
  cmp->frac = Compare(c, bd);
}

// |x| vs |bound| at the end of the number.
int Magnitude(const Decimal& b, const State& s, Cmp cmp) {
  if (cmp.int_rel < 0) EndInt(b, s.int_len, &cmp);
  if (cmp.int_rel != kEqual) return cmp.int_rel;
  if (cmp.frac != kEqual) return cmp.frac;
  return s.frac_len < static_cast<int>(b.frac_digits.size()) ? kLess : kEqual;
}

int Relation(const Decimal& b, const State& s, const Cmp& cmp) {
  if (s.zero) return b.is_zero() ? kEqual : b.negative ? kGreater : kLess;
  const int m = Magnitude(b, s, cmp);
  if (!s.negative && !b.negative) return m;
  if (s.negative && b.negative) return Reverse(m);
  return s.negative ? kLess : kGreater;
}

}  // namespace

absl::StatusOr<Decimal> DecimalOf(const nlohmann::ordered_json& number) {
  if (!number.is_number()) return absl::InvalidArgumentError("must be a number");
  if (number.is_number_float() && !std::isfinite(number.get<double>())) {
    return absl::InvalidArgumentError("must be a finite number");
  }
  std::string text = number.dump();
  bool negative = false;
  size_t pos = 0;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    pos = 1;
  }
  std::string digits;
  int64_t point = -1;
  int64_t exponent = 0;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c >= '0' && c <= '9') {
      digits.push_back(c);
    } else if (c == '.') {
      point = static_cast<int64_t>(digits.size());
    } else if (c == 'e' || c == 'E') {
      exponent = std::strtoll(text.c_str() + pos + 1, nullptr, 10);
      break;
    }
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  return Normalize(negative, digits, point + exponent);
}

ByteDfa JsonNumberDfa(const NumberShape& shape) {
  const bool bounded = shape.min.has_value() || shape.max.has_value();
  Limits lim;
  if (bounded) {
    // 15 significant digits, with room for the bounds' integer parts.
    int needed = 0;
    for (const auto& b : {shape.min, shape.max}) {
      if (b) needed = std::max<int>(needed, static_cast<int>(b->int_digits.size()));
    }
    lim.int_digits = std::min(17, std::max(shape.integer ? 15 : 9, needed));
    lim.frac_digits = shape.integer ? 0 : std::max(0, 15 - lim.int_digits);
    lim.exponent = false;
  } else {
    lim.int_digits = 15;
    lim.frac_digits = shape.integer ? 0 : 15;
    lim.exponent = !shape.integer;
  }
  auto accepts = [&](const State& s) {
    if (s.phase != kIntZero && s.phase != kInt && s.phase != kFrac && s.phase != kExpDigits) return false;
    if (shape.min) {
      const int r = Relation(*shape.min, s, s.lo);
      if (!(r == kGreater || (r == kEqual && !shape.exclusive_min))) return false;
    }
    if (shape.max) {
      const int r = Relation(*shape.max, s, s.hi);
      if (!(r == kLess || (r == kEqual && !shape.exclusive_max))) return false;
    }
    return true;
  };
  auto step = [&](const State& s, int c, State* t) -> bool {
    *t = s;
    const bool digit = c >= '0' && c <= '9';
    auto int_digit = [&] {
      if (s.int_len >= lim.int_digits) return false;
      IntDigit(shape.min, s.int_len, static_cast<char>(c), &t->lo);
      IntDigit(shape.max, s.int_len, static_cast<char>(c), &t->hi);
      t->int_len = s.int_len + 1;
      if (c != '0') t->zero = false;
      return true;
    };
    auto end_int = [&] {
      EndInt(shape.min, s.int_len, &t->lo);
      EndInt(shape.max, s.int_len, &t->hi);
    };
    switch (s.phase) {
      case kStart:
        if (c == '-') {
          t->phase = kMinus;
          t->negative = true;
          return true;
        }
        [[fallthrough]];
      case kMinus:
        if (!digit) return false;
        t->phase = c == '0' ? kIntZero : kInt;
        return int_digit();
      case kInt:
        if (digit) return int_digit();
        [[fallthrough]];
      case kIntZero:
        if (c == '.' && lim.frac_digits > 0) {
          end_int();
          t->phase = kDot;
          t->int_len = 0;  // decided: only the comparisons matter from here
          return true;
        }
        if ((c == 'e' || c == 'E') && lim.exponent) {
          t->phase = kExp;
          t->int_len = t->frac_len = 0;
          return true;
        }
        return false;
      case kDot:
      case kFrac:
        if (digit && s.frac_len < lim.frac_digits) {
          FracDigit(shape.min, s.frac_len, static_cast<char>(c), &t->lo);
          FracDigit(shape.max, s.frac_len, static_cast<char>(c), &t->hi);
          t->frac_len = s.frac_len + 1;
          t->phase = kFrac;
          if (c != '0') t->zero = false;
          return true;
        }
        if (s.phase == kFrac && (c == 'e' || c == 'E') && lim.exponent) {
          t->phase = kExp;
          t->int_len = t->frac_len = 0;
          return true;
        }
        return false;
      case kExp:
        if (c == '+' || c == '-') {
          t->phase = kExpSign;
          return true;
        }
        [[fallthrough]];
      case kExpSign:
      case kExpDigits:
        if (!digit || s.exp_len >= 2) return false;
        t->phase = kExpDigits;
        t->exp_len = s.exp_len + 1;
        return true;
    }
    return false;
  };

  ByteDfa d;
  std::map<decltype(State().key()), int32_t> ids;
  std::deque<State> work;
  auto id_of = [&](const State& s) {
    auto [it, fresh] = ids.emplace(s.key(), 0);
    if (fresh) {
      it->second = d.AddState(accepts(s));
      work.push_back(s);
    }
    return it->second;
  };
  d.start = id_of(State());
  while (!work.empty()) {
    const State s = work.front();
    work.pop_front();
    const int32_t from = ids.at(s.key());
    for (int c = 0; c < 256; ++c) {
      State t;
      if (!step(s, c, &t)) continue;
      const int32_t to = id_of(t);
      d.next[from][c] = to;
    }
  }
  return Trim(d);
}

}  // namespace spar::grammar
