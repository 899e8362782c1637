// JSON numbers as byte automata, optionally within bounds (JSON Schema's
// minimum / maximum / exclusiveMinimum / exclusiveMaximum). A number
// written in decimal compares with a constant digit by digit, so a
// bounded number is a regular language: the automaton tracks how the
// digits so far compare with each bound (shorter integer parts are smaller,
// equal lengths compare lexicographically, fractions compare padded with
// zeros, and the sign flips the order; -0 equals 0).
//
// Digits are limited so that what is generated survives the round trip
// through an IEEE double exactly (what JSON parsers and validators compare):
// at most 15 significant digits when bounded (integer part + fraction) and
// no exponent; unbounded numbers get up to 15 integer digits, 15 fraction
// digits and a two-digit exponent.
#ifndef SPAR_GRAMMAR_NUMBER_RANGE_H_
#define SPAR_GRAMMAR_NUMBER_RANGE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "grammar/byte_dfa.h"
#include "nlohmann/json.hpp"

namespace spar::grammar {

// An exact decimal: sign, integer digits without leading zeros ("0" for a
// zero integer part), fraction digits without trailing zeros. Zero is
// never negative.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
};

// The value of a JSON number as written by the JSON library (shortest
// round-trip form for doubles); INVALID_ARGUMENT for non-numbers and
// non-finite values.
absl::StatusOr<Decimal> DecimalOf(const nlohmann::ordered_json& number);

struct NumberShape {
  bool integer = false;
  std::optional<Decimal> min, max;
  bool exclusive_min = false, exclusive_max = false;
};

// The automaton of numbers of `shape` (it accepts nothing when the bounds
// leave no value).
ByteDfa JsonNumberDfa(const NumberShape& shape);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_NUMBER_RANGE_H_
