// Encode with EncodeOptions::max_tokens: the first max_tokens + 1 ids of the
// full encoding, and the rest of the text is never tokenized.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/text/test_tokenizers.h"
#include "text/tokenizer.h"

namespace spar {
namespace {

using testing_text::ByteFallbackJson;
using testing_text::FlagsJson;
using testing_text::Load;
using testing_text::TinyJson;

std::vector<int32_t> Full(const Tokenizer& tok, absl::string_view text, bool allow_special) {
  auto ids = tok.Encode(text, allow_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::vector<int32_t> Limited(const Tokenizer& tok, absl::string_view text, size_t max_tokens, bool allow_special) {
  auto ids = tok.Encode(text, EncodeOptions{.allow_special = allow_special, .max_tokens = max_tokens});
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string RandomText(std::mt19937& rng) {
  // Words, whitespace (which lstrip/rstrip tokens swallow), digits, CJK,
  // the flags tokenizer's added tokens whole and cut, invalid bytes.
  static const char* kAtoms[] = {"the", " king", "ing", " ", "  ", "\n", "\t", "12", "345", "你好", "é", "abc",
                                 "hi", "<lstrip>", "<rstrip>", "<word>", "x<word>", "<a>", "<a><b>", "<a><",
                                 "plain_added", "<s>", "<unk>", "[gMASK]", "<|user|>", "\xff", "\xe4\xbd", "!?"};
  std::uniform_int_distribution<int> len(0, 30), atom(0, std::size(kAtoms) - 1);
  std::string s;
  for (int k = len(rng); k > 0; --k) s += kAtoms[atom(rng)];
  return s;
}

TEST(EncodeLimitTest, EqualsThePrefixOfTheFullEncoding) {
  std::mt19937 rng(7);
  const std::unique_ptr<Tokenizer> tokenizers[] = {Load(TinyJson()), Load(FlagsJson()), Load(ByteFallbackJson())};
  int checked = 0;
  for (const auto& tok : tokenizers) {
    ASSERT_NE(tok, nullptr);
    for (int iter = 0; iter < 300; ++iter) {
      const std::string text = RandomText(rng);
      for (bool allow_special : {true, false}) {
        const std::vector<int32_t> full = Full(*tok, text, allow_special);
        for (size_t limit = 0; limit <= full.size() + 1; ++limit) {
          const std::vector<int32_t> want(full.begin(), full.begin() + std::min(full.size(), limit + 1));
          ASSERT_EQ(Limited(*tok, text, limit, allow_special), want) << "limit " << limit << " text: " << text;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(EncodeLimitTest, UnlimitedEqualsEncode) {
  auto tok = Load(FlagsJson());
  ASSERT_NE(tok, nullptr);
  const std::string text = "[gMASK]<sop><|user|>\nthe king <lstrip> 12345";
  EXPECT_EQ(*tok->Encode(text, EncodeOptions{}), Full(*tok, text, true));
  EXPECT_EQ(*tok->Encode(text, EncodeOptions{.allow_special = false}), Full(*tok, text, false));
}

// A long prompt over the limit costs what its first tokens cost. Checked by
// counts that cannot hold if the rest were tokenized: only the first words
// go through BPE (the word cache sees no others), the result stays sized by
// the limit, and a far-away stretch that would make the split regex fail
// is never reached.
TEST(EncodeLimitTest, LongTextStopsAtTheLimit) {
  nlohmann::ordered_json j = TinyJson();
  // The tiny tokenizer's split plus a branch that backtracks exponentially
  // on a long run of 'a' (PCRE2 then fails the match at its limit).
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", nlohmann::ordered_json::array(
                            {{{"type", "Split"},
                              {"pattern", {{"Regex", "(?:a|a)+b|\\s?[^\\sa]+|\\s+|a"}}},
                              {"behavior", "Isolated"},
                              {"invert", false}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  const std::string poison = " " + std::string(64, 'a');
  {
    auto tok = Load(j);
    ASSERT_NE(tok, nullptr);
    auto failed = tok->Encode(poison);
    ASSERT_FALSE(failed.ok()) << "the poison must make a full encode fail";
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
  }
  // ~20 MB of distinct words (letters other than 'a'), then the poison.
  std::string text;
  text.reserve(21 << 20);
  for (uint64_t w = 0; text.size() < (20u << 20); ++w) {
    text += ' ';
    for (uint64_t x = w;; x /= 25) {
      text += static_cast<char>('b' + x % 25);
      if (x < 25) break;
    }
  }
  text += poison;
  auto tok = Load(j);  // a fresh word cache
  ASSERT_NE(tok, nullptr);
  const size_t limit = 5000;
  auto ids = tok->Encode(text, EncodeOptions{.max_tokens = limit});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), limit + 1);
  EXPECT_LE(tok->cache_size(), limit + 1) << "words past the limit went through BPE";
  EXPECT_LE(ids->capacity(), 2 * (limit + 1)) << "the result was sized by the text";
  // The ids are those of the full encoding: the first 200 KB (cut at a
  // space) tokenize to the same first ids.
  const std::vector<int32_t> head = Full(*tok, text.substr(0, text.find(' ', 200 << 10)), true);
  ASSERT_GT(head.size(), limit + 1);
  EXPECT_EQ(*ids, std::vector<int32_t>(head.begin(), head.begin() + limit + 1));
}

}  // namespace
}  // namespace spar
