#include "text/tokenizer.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tiny_tokenizer.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/text/test_tokenizers.h"

namespace spar {
namespace {

using ::spar::testing_text::ByteFallbackJson;
using ::spar::testing_text::FlagsJson;
using ::spar::testing_text::Load;
using ::spar::testing_text::TinyJson;

std::vector<int32_t> Enc(const Tokenizer& t, absl::string_view s, bool allow_special = true) {
  auto ids = t.Encode(s, allow_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string Dec(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
  auto s = t.Decode(ids, skip);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

int32_t Id(const Tokenizer& t, absl::string_view token) {
  auto id = t.TokenToId(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(TokenizerTest, TinyTokenizerEncodesWithMergesAndSpecials) {
  auto tok = Load(TinyJson());
  ASSERT_NE(tok, nullptr);
  const TinyTokenizerSpec spec = TinyTokenizerLayout();
  EXPECT_EQ(tok->vocab_size(), spec.num_tokens);
  // "Ġthe" is merged ("Ġt" + "he"), "in"+"g" -> "ing".
  EXPECT_EQ(Enc(*tok, " the"), std::vector<int32_t>{Id(*tok, "Ġthe")});
  EXPECT_EQ(Enc(*tok, "ing"), std::vector<int32_t>{Id(*tok, "ing")});
  const std::vector<int32_t> ids = Enc(*tok, "[gMASK]<sop><|user|>\nthe king");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], Id(*tok, "[gMASK]"));
  EXPECT_EQ(ids[1], Id(*tok, "<sop>"));
  EXPECT_EQ(ids[2], spec.user_id);
  EXPECT_EQ(Dec(*tok, ids), "[gMASK]<sop><|user|>\nthe king");
  EXPECT_EQ(Dec(*tok, ids, /*skip=*/true), "\nthe king");
  EXPECT_TRUE(tok->IsSpecial(spec.eos_id));
  EXPECT_FALSE(tok->IsSpecial(Id(*tok, "Ġthe")));
}

TEST(TokenizerTest, EmptyInput) {
  auto tok = Load(TinyJson());
  EXPECT_TRUE(Enc(*tok, "").empty());
  EXPECT_EQ(Dec(*tok, {}), "");
}

TEST(TokenizerTest, AddedTokensAdjacentToText) {
  auto tok = Load(TinyJson());
  const int32_t eos = Id(*tok, "<|endoftext|>");
  const std::vector<int32_t> ids = Enc(*tok, "he<|endoftext|>he");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], Id(*tok, "he"));
  EXPECT_EQ(ids[1], eos);
  EXPECT_EQ(ids[2], Id(*tok, "he"));
  // A partial special token is plain text.
  for (int32_t id : Enc(*tok, "<|endoftext|")) EXPECT_NE(id, eos);
  // Two in a row, and surrounded by spaces (no stripping by default).
  EXPECT_EQ(Enc(*tok, "<|endoftext|><|endoftext|>"), (std::vector<int32_t>{eos, eos}));
  const std::vector<int32_t> spaced = Enc(*tok, " <|endoftext|> ");
  ASSERT_EQ(spaced.size(), 3u);
  EXPECT_EQ(spaced[1], eos);
  EXPECT_EQ(Dec(*tok, spaced), " <|endoftext|> ");
}

TEST(TokenizerTest, AllowSpecialFalseEncodesSpecialTokensAsText) {
  auto tok = Load(FlagsJson());
  const int32_t eos = Id(*tok, "<|endoftext|>");
  const std::vector<int32_t> ids = Enc(*tok, "x<|endoftext|>y plain_added", /*allow_special=*/false);
  for (int32_t id : ids) EXPECT_NE(id, eos);
  // Non-special added tokens are still matched.
  EXPECT_EQ(ids.back(), 1005);
  EXPECT_EQ(Dec(*tok, ids), "x<|endoftext|>y plain_added");
}

TEST(TokenizerTest, LeftmostLongestMatch) {
  auto tok = Load(FlagsJson());
  EXPECT_EQ(Enc(*tok, "<a><b>"), std::vector<int32_t>{1004});
  EXPECT_EQ(Enc(*tok, "<a>"), std::vector<int32_t>{1003});
  const std::vector<int32_t> ids = Enc(*tok, "<a><a><b>");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1003);
  EXPECT_EQ(ids[1], 1004);
}

TEST(TokenizerTest, LStripAndRStrip) {
  auto tok = Load(FlagsJson());
  // lstrip swallows the whitespace before the token.
  const std::vector<int32_t> l = Enc(*tok, "he  \t<lstrip>he");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], Id(*tok, "he"));
  EXPECT_EQ(l[1], 1000);
  // rstrip swallows the whitespace after it.
  const std::vector<int32_t> r = Enc(*tok, "he<rstrip> \n he");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1], 1001);
  EXPECT_EQ(r[2], Id(*tok, "he"));
  // Stripped whitespace is gone for good: decode shows only the token.
  EXPECT_EQ(Dec(*tok, r), "he<rstrip>he");
}

TEST(TokenizerTest, SingleWord) {
  auto tok = Load(FlagsJson());
  const std::vector<int32_t> alone = Enc(*tok, "he <word> he");
  EXPECT_NE(std::find(alone.begin(), alone.end(), 1002), alone.end());
  const std::vector<int32_t> glued = Enc(*tok, "he<word>he");
  EXPECT_EQ(std::find(glued.begin(), glued.end(), 1002), glued.end());
}

TEST(TokenizerTest, MergeEncodingsAgree) {
  nlohmann::ordered_json pairs = TinyJson();
  nlohmann::ordered_json strings = TinyJson();
  auto& m = strings["model"]["merges"];
  for (auto& entry : m) entry = entry[0].get<std::string>() + " " + entry[1].get<std::string>();
  auto a = Load(pairs);
  auto b = Load(strings);
  const std::string text = "the quick brown fox is testing the string merges of it";
  EXPECT_EQ(Enc(*a, text), Enc(*b, text));
}

TEST(TokenizerTest, IgnoreMergesUsesWholeWordFromVocabulary) {
  nlohmann::ordered_json j = TinyJson();
  // A vocabulary entry no merge sequence can produce.
  j["model"]["vocab"]["Ġthing"] = 900;
  j["model"]["ignore_merges"] = true;
  auto tok = Load(j);
  EXPECT_EQ(Enc(*tok, " thing"), std::vector<int32_t>{900});
  j["model"]["ignore_merges"] = false;
  auto merged = Load(j);
  EXPECT_NE(Enc(*merged, " thing"), std::vector<int32_t>{900});
}

TEST(TokenizerTest, InvalidUtf8IsReadAsReplacementCharacters) {
  auto tok = Load(TinyJson());
  const std::string bad = "ok\xE4\xBD then \xFF end \xED\xA0\x80";
  const std::string lossy = "ok\xEF\xBF\xBD then \xEF\xBF\xBD end \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";
  EXPECT_EQ(Enc(*tok, bad), Enc(*tok, lossy));
  EXPECT_EQ(Dec(*tok, Enc(*tok, bad)), lossy);
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeIdsByName) {
  auto tok = Load(FlagsJson());
  auto neg = tok->Decode({1, -7});
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("-7"), std::string::npos) << neg.status();
  auto big = tok->Decode({123456});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("123456"), std::string::npos) << big.status();
  // Inside the id space but assigned to no token.
  auto hole = tok->Decode({999});
  ASSERT_FALSE(hole.ok());
  EXPECT_NE(hole.status().message().find("999"), std::string::npos) << hole.status();
}

TEST(TokenizerTest, ByteFallbackAndSentencePieceDecoder) {
  auto tok = Load(ByteFallbackJson());
  ASSERT_NE(tok, nullptr);
  // "▁hi" merges; "é" and "你" are in the vocabulary; "😀" is not, so it
  // falls back to its four bytes.
  const std::vector<int32_t> ids = Enc(*tok, "hi é 😀abc");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], Id(*tok, "▁hi"));
  int fallback = 0;
  for (int32_t id : ids) {
    auto p = tok->Piece(id);
    ASSERT_TRUE(p.ok());
    fallback += p->kind == TokenPiece::Kind::kFallbackByte;
  }
  EXPECT_EQ(fallback, 4);
  EXPECT_EQ(ids.back(), Id(*tok, "abc"));
  // Strip removes the space the normalizer prepended.
  EXPECT_EQ(Dec(*tok, ids), "hi é 😀abc");
  // An invalid run of byte tokens decodes to one U+FFFD per byte.
  EXPECT_EQ(Dec(*tok, {Id(*tok, "<0xF0>"), Id(*tok, "<0x9F>"), Id(*tok, "a")}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
}

TEST(TokenizerTest, NfcNormalizer) {
  nlohmann::ordered_json j = TinyJson();
  j["normalizer"] = {{"type", "NFC"}};
  auto tok = Load(j);
  EXPECT_EQ(Enc(*tok, "caf\x65\xCC\x81"), Enc(*tok, "caf\xC3\xA9"));
}

TEST(TokenizerTest, DigitsPreTokenizer) {
  nlohmann::ordered_json j = TinyJson();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", nlohmann::ordered_json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                                                         {{"type", "ByteLevel"},
                                                                          {"add_prefix_space", false},
                                                                          {"use_regex", true}}})}};
  auto tok = Load(j);
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = Enc(*tok, "a123");
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(Dec(*tok, ids), "a123");
}

TEST(TokenizerTest, UnsupportedPartsFailLoadingWithClearErrors) {
  {
    nlohmann::ordered_json j = TinyJson();
    j["normalizer"] = {{"type", "BertNormalizer"}};
    auto tok = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("BertNormalizer"), std::string::npos) << tok.status();
  }
  {
    nlohmann::ordered_json j = TinyJson();
    j["pre_tokenizer"] = {{"type", "Metaspace"}};
    auto tok = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("Metaspace"), std::string::npos) << tok.status();
  }
  {
    nlohmann::ordered_json j = TinyJson();
    j["model"]["type"] = "WordPiece";
    EXPECT_FALSE(Tokenizer::FromJson(j.dump()).ok());
  }
  {
    nlohmann::ordered_json j = TinyJson();
    j["model"]["merges"].push_back({"zz", "qq"});
    auto tok = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("merges"), std::string::npos) << tok.status();
  }
  EXPECT_FALSE(Tokenizer::FromJson("{not json").ok());
  EXPECT_FALSE(Tokenizer::FromFile("/nonexistent/tokenizer.json").ok());
  {
    nlohmann::ordered_json j = TinyJson();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    auto tok = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("regex"), std::string::npos) << tok.status();
  }
}

TEST(TokenizerTest, VeryLongInputRoundTrips) {
  auto tok = Load(TinyJson());
  std::string text;
  while (text.size() < (1 << 20)) text += "the string of it is interesting 你好 😀 12345\n\t  ";
  const std::vector<int32_t> ids = Enc(*tok, text);
  EXPECT_GT(ids.size(), 100000u);
  EXPECT_EQ(Dec(*tok, ids), text);
}

// Inputs that make naive regex engines or BPE loops super-linear. Each is
// 1 MB; a linear implementation takes well under a second, a quadratic one
// would take minutes.
TEST(TokenizerTest, PathologicalInputsStayLinear) {
  auto tok = Load(TinyJson());
  const size_t n = 1 << 20;
  const std::vector<std::string> inputs = {
      std::string(n, ' '),
      std::string(n, 'a'),
      std::string(n, '\n'),
      std::string(n, '1'),
      std::string(n, '!'),
      [&] {
        std::string s;
        while (s.size() < n) s += " \n";
        return s;
      }(),
      [&] {
        std::string s;
        while (s.size() < n) s += "'s";
        return s;
      }(),
      [&] {
        std::string s;
        while (s.size() < n) s += "\xE4\xBD\xA0";
        return s;
      }(),
      [&] {
        std::string s(n / 2, ' ');
        s += "x";
        s += std::string(n / 2, '\t');
        return s;
      }(),
  };
  for (const std::string& in : inputs) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = Enc(*tok, in);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0) << "input starting with " << absl::CHexEscape(in.substr(0, 8));
    EXPECT_EQ(Dec(*tok, ids), in);
  }
}

TEST(TokenizerTest, ConcurrentEncodeIsConsistent) {
  auto tok = Load(TinyJson());
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(absl::StrCat("the ", i, " string of ", i * 7, " it is on ", i % 13));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(Enc(*tok, t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = tok->Encode(texts[i]);
          if (!ids.ok() || *ids != want[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(tok->cache_size(), 0u);
}

}  // namespace
}  // namespace spar
