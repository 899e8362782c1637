#include "text/detokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/text/test_tokenizers.h"
#include "text/utf8.h"

namespace spar {
namespace {

using ::spar::testing_text::ByteFallbackJson;
using ::spar::testing_text::FlagsJson;
using ::spar::testing_text::Load;
using ::spar::testing_text::TinyJson;

// Streams `ids` and checks the two guarantees: every delta is whole UTF-8,
// and the deltas add up to Decode.
void CheckStream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detok(&tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    auto delta = detok.Add(id);
    ASSERT_TRUE(delta.ok()) << delta.status();
    EXPECT_TRUE(IsValidUtf8(*delta)) << absl::CHexEscape(*delta);
    streamed += *delta;
  }
  const std::string tail = detok.Finish();
  EXPECT_TRUE(IsValidUtf8(tail));
  streamed += tail;
  EXPECT_EQ(detok.pending_bytes(), 0u);
  auto want = tok.Decode(ids, skip_special);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(streamed, *want);
}

TEST(DetokenizerTest, HoldsBackPartialCharacters) {
  auto tok = Load(TinyJson());
  // 😀 is F0 9F 98 80: four byte-level tokens.
  const std::string emoji = "\xF0\x9F\x98\x80";
  auto ids = tok->Encode(emoji);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 4u);
  IncrementalDetokenizer detok(tok.get(), false);
  for (int k = 0; k < 3; ++k) {
    auto d = detok.Add((*ids)[k]);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, "");
  }
  EXPECT_EQ(detok.pending_bytes(), 3u);
  auto last = detok.Add((*ids)[3]);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, emoji);
  EXPECT_EQ(detok.Finish(), "");
}

TEST(DetokenizerTest, IncompleteTailBecomesReplacementAtFinishOrSpecialToken) {
  auto tok = Load(TinyJson());
  auto ids = tok->Encode("\xE4\xBD\xA0");  // 你, three byte tokens
  ASSERT_TRUE(ids.ok());
  const int32_t eos = *tok->TokenToId("<|endoftext|>");
  std::vector<int32_t> cut = {(*ids)[0], (*ids)[1], eos, (*ids)[2]};
  CheckStream(*tok, cut, false);
  CheckStream(*tok, cut, true);
  IncrementalDetokenizer detok(tok.get(), false);
  ASSERT_TRUE(detok.Add((*ids)[0]).ok());
  EXPECT_EQ(detok.Finish(), "\xEF\xBF\xBD");
}

TEST(DetokenizerTest, OutOfRangeIdIsAnErrorAndKeepsState) {
  auto tok = Load(TinyJson());
  IncrementalDetokenizer detok(tok.get(), false);
  auto ids = tok->Encode("\xE4\xBD\xA0");
  ASSERT_TRUE(detok.Add((*ids)[0]).ok());
  auto bad = detok.Add(1 << 30);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(std::to_string(1 << 30)), std::string::npos);
  ASSERT_TRUE(detok.Add((*ids)[1]).ok());
  auto d = detok.Add((*ids)[2]);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "\xE4\xBD\xA0");
}

TEST(DetokenizerTest, RandomSequencesMatchDecode) {
  std::mt19937 rng(1234);
  for (auto json : {TinyJson(), FlagsJson(), ByteFallbackJson()}) {
    auto tok = Load(json);
    ASSERT_NE(tok, nullptr);
    // Valid ids only (the flags tokenizer has a hole below 1000).
    std::vector<int32_t> valid;
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      if (tok->Piece(id).ok()) valid.push_back(id);
    }
    // Encodings of text with multi-byte characters, cut and shuffled.
    const std::vector<int32_t> text_ids =
        *tok->Encode("héllo 你好 😀👩‍💻 ünïcödé <|endoftext|> 日本語 🇯🇵 the end");
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids;
      const int n = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) {
        if (rng() % 3 == 0) {
          ids.push_back(valid[rng() % valid.size()]);
        } else {
          ids.push_back(text_ids[rng() % text_ids.size()]);
        }
      }
      CheckStream(*tok, ids, false);
      CheckStream(*tok, ids, true);
    }
    CheckStream(*tok, text_ids, false);
  }
}

TEST(DetokenizerTest, ByteFallbackRunsAreHeldUntilTheyEnd) {
  auto tok = Load(ByteFallbackJson());
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("a😀b");
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(tok.get(), false);
  std::string out;
  for (int32_t id : *ids) {
    auto d = detok.Add(id);
    ASSERT_TRUE(d.ok());
    out += *d;
  }
  out += detok.Finish();
  EXPECT_EQ(out, "a😀b");
}

}  // namespace
}  // namespace spar
