#include "text/utf8.h"

#include "gtest/gtest.h"

namespace spar {
namespace {

TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(SanitizeUtf8("abc"), "abc");
  EXPECT_EQ(SanitizeUtf8("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
  // Truncated 3-byte sequence followed by ASCII: one U+FFFD for the pair.
  EXPECT_EQ(SanitizeUtf8("\xE4\xBD" "A"), "\xEF\xBF\xBD" "A");
  // Surrogate code point (CESU): each byte is its own ill-formed subpart.
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Overlong encoding and bytes that never start a character.
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xFF"), "\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4\xBD"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xED\xA0"), 0u);  // can never complete
  EXPECT_EQ(IncompleteUtf8Tail("\xBF"), 0u);
}

TEST(Utf8Test, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {0x41u, 0xE9u, 0x4F60u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, &s);
    char32_t back = 0;
    EXPECT_EQ(DecodeUtf8At(s, 0, &back), s.size());
    EXPECT_EQ(back, cp);
    EXPECT_TRUE(IsValidUtf8(s));
  }
}

}  // namespace
}  // namespace spar
