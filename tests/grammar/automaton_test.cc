// The byte automata: UTF-8 text, text up to a tag, JSON strings with
// lengths, bounded numbers (checked against exact decimal comparison over
// many numbers).
#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "grammar/byte_dfa.h"
#include "grammar/json_text.h"
#include "grammar/number_range.h"
#include "gtest/gtest.h"

namespace spar::grammar {
namespace {

TEST(ByteDfaTest, Utf8TextAcceptsWellFormedOnly) {
  const ByteDfa d = Utf8Text();
  EXPECT_TRUE(d.Accepts(""));
  EXPECT_TRUE(d.Accepts("plain ascii"));
  EXPECT_TRUE(d.Accepts("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"));  // é 中 😀
  EXPECT_FALSE(d.Accepts("\xc3"));                                 // cut
  EXPECT_FALSE(d.Accepts("\xc0\xaf"));                             // overlong
  EXPECT_FALSE(d.Accepts("\xed\xa0\x80"));                         // surrogate
  EXPECT_FALSE(d.Accepts("\xf4\x90\x80\x80"));                     // beyond U+10FFFF
  EXPECT_FALSE(Utf8Text("\n").Accepts("a\nb"));
}

TEST(ByteDfaTest, TextUntilEndsAtTheFirstTerminatorAndRefusesForbidden) {
  const ByteDfa d = TextUntil("</think>", {"<tool_call>"});
  EXPECT_TRUE(d.Accepts("</think>"));
  EXPECT_TRUE(d.Accepts("some <b>reasoning</b> here</think>"));
  EXPECT_TRUE(d.Accepts("<</think>"));
  EXPECT_FALSE(d.Accepts("a</think>b"));        // nothing after the terminator
  EXPECT_FALSE(d.Accepts("a <tool_call> b</think>"));
  EXPECT_FALSE(d.Accepts("no terminator"));
  EXPECT_FALSE(d.Accepts("\xff</think>"));
}

TEST(ByteDfaTest, WithoutSubstringsAndIntersect) {
  const ByteDfa d = WithoutSubstrings({"</", "ab"});
  EXPECT_TRUE(d.Accepts("<a/b"));
  EXPECT_FALSE(d.Accepts("x</y"));
  EXPECT_FALSE(d.Accepts("cab"));
  const ByteDfa both = Intersect(d, Utf8Text());
  EXPECT_TRUE(both.Accepts("é<a"));
  EXPECT_FALSE(both.Accepts("\xc3"));
}

TEST(JsonTextTest, StringsEscapesAndLengths) {
  const ByteDfa any = JsonStringDfa(StringShape());
  for (const char* ok : {R"("")", R"("a\"b")", R"("\u00e9\n\\")", "\"\xe4\xb8\xad\"", R"("<\/x>")"}) {
    EXPECT_TRUE(any.Accepts(ok)) << ok;
  }
  for (const char* bad : {R"(")", R"("a)", "\"a\nb\"", R"("\x")", R"("\ud800")", R"("\u12")", "\"\xc3\""}) {
    EXPECT_FALSE(any.Accepts(bad)) << bad;
  }
  StringShape tag;
  tag.forbidden = {"</"};
  EXPECT_TRUE(JsonStringDfa(tag).Accepts(R"("a<b <\/c>")"));
  EXPECT_FALSE(JsonStringDfa(tag).Accepts(R"("</arg_value>")"));
  StringShape len;
  len.min_chars = 2;
  len.max_chars = 3;
  const ByteDfa bounded = JsonStringDfa(len);
  EXPECT_FALSE(bounded.Accepts(R"("a")"));
  EXPECT_TRUE(bounded.Accepts(R"("ab")"));
  EXPECT_TRUE(bounded.Accepts("\"\\u00e9\xf0\x9f\x98\x80\\n\""));  // three code points
  EXPECT_FALSE(bounded.Accepts(R"("abcd")"));
}

TEST(JsonTextTest, RawTextCountsCodePointsAndAvoidsPatterns) {
  const ByteDfa d = RawTextDfa(1, 2, {"</arg_value>"});
  EXPECT_FALSE(d.Accepts(""));
  EXPECT_TRUE(d.Accepts("\xc3\xa9x"));
  EXPECT_FALSE(d.Accepts("abc"));
  EXPECT_TRUE(RawTextDfa(0, -1, {"</arg_value>"}).Accepts("a </arg_valu b"));
  EXPECT_FALSE(RawTextDfa(0, -1, {"</arg_value>"}).Accepts("a</arg_value>"));
}

// Exact comparison of two decimal strings via long double is enough for
// the test's numbers (at most 15 significant digits).
long double Value(const std::string& s) { return std::stold(s); }

TEST(NumberRangeTest, MatchesDecimalComparison) {
  struct Case {
    bool integer;
    const char* min;
    const char* max;
    bool excl_min, excl_max;
  };
  const Case cases[] = {{true, "0", "100", false, false},   {true, "-5", "5", true, true},
                        {false, "0.5", "2.25", false, true}, {false, "-1.5", nullptr, true, false},
                        {false, nullptr, "-0.001", false, false}, {true, "3", "3", false, false},
                        {false, "0", "0", false, false},     {true, "10", "1", false, false},
                        {false, "-100", "-99.5", false, false}};
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    NumberShape shape;
    shape.integer = c.integer;
    if (c.min) shape.min = *DecimalOf(nlohmann::ordered_json::parse(c.min));
    if (c.max) shape.max = *DecimalOf(nlohmann::ordered_json::parse(c.max));
    shape.exclusive_min = c.excl_min;
    shape.exclusive_max = c.excl_max;
    const ByteDfa d = JsonNumberDfa(shape);
    std::vector<std::string> probes = {"0", "-0", "1", "-1", "3", "5", "-5", "100", "101", "0.5", "0.50", "2.25",
                                       "2.2499", "-1.5", "-1.4", "-0.001", "-0.0011", "-99.5", "-99.50", "-100",
                                       "00", "01", "1.", ".5", "-", "1e2", "2.250"};
    for (int i = 0; i < 400; ++i) {
      std::string s = rng() % 2 ? "-" : "";
      s += std::to_string(rng() % 120);
      if (!c.integer && rng() % 2) s += "." + std::to_string(rng() % 1000);
      probes.push_back(s);
    }
    for (const std::string& s : probes) {
      const bool syntax = [&] {
        size_t p = s[0] == '-' ? 1 : 0;
        if (p >= s.size() || !isdigit(s[p])) return false;
        if (s[p] == '0' && p + 1 < s.size() && isdigit(s[p + 1])) return false;
        const size_t dot = s.find('.');
        if (s.find_first_not_of("-0123456789.") != std::string::npos) return false;
        if (dot == std::string::npos) return true;
        return !c.integer && dot + 1 < s.size();
      }();
      bool want = syntax;
      if (want && c.min) want = c.excl_min ? Value(s) > Value(c.min) : Value(s) >= Value(c.min);
      if (want && c.max) want = c.excl_max ? Value(s) < Value(c.max) : Value(s) <= Value(c.max);
      EXPECT_EQ(d.Accepts(s), want) << s << " in [" << (c.min ? c.min : "-inf") << ", " << (c.max ? c.max : "inf")
                                    << "] integer=" << c.integer;
    }
  }
}

TEST(NumberRangeTest, UnboundedSyntaxAndDigitLimits) {
  const ByteDfa d = JsonNumberDfa(NumberShape());
  for (const char* ok : {"0", "-0", "12", "1.5", "-0.25e+12", "3E-4", "123456789012345"}) EXPECT_TRUE(d.Accepts(ok)) << ok;
  for (const char* bad : {"", "-", "01", "1.", ".1", "1e", "1e+", "1e123", "1234567890123456", "+1"}) {
    EXPECT_FALSE(d.Accepts(bad)) << bad;
  }
  NumberShape integer;
  integer.integer = true;
  EXPECT_FALSE(JsonNumberDfa(integer).Accepts("1.0"));
  EXPECT_FALSE(JsonNumberDfa(integer).Accepts("1e2"));
}

TEST(NumberRangeTest, DecimalOfNormalizes) {
  auto d = *DecimalOf(nlohmann::ordered_json::parse("-0.0"));
  EXPECT_TRUE(d.is_zero());
  EXPECT_FALSE(d.negative);
  d = *DecimalOf(nlohmann::ordered_json::parse("1.5e3"));
  EXPECT_EQ(d.int_digits, "1500");
  EXPECT_EQ(d.frac_digits, "");
  d = *DecimalOf(nlohmann::ordered_json::parse("-2.5e-3"));
  EXPECT_TRUE(d.negative);
  EXPECT_EQ(d.int_digits, "0");
  EXPECT_EQ(d.frac_digits, "0025");
  EXPECT_FALSE(DecimalOf(nlohmann::ordered_json("x")).ok());
}

}  // namespace
}  // namespace spar::grammar
