// Helpers of the grammar tests: compile a grammar, run a matcher over
// text, a small synthetic vocabulary, and the brute-force mask that
// FillTokenMask must equal.
#ifndef SPAR_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define SPAR_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocab.h"
#include "gtest/gtest.h"

namespace spar::grammar::testing {

inline std::shared_ptr<const CompiledGrammar> MustCompile(const Grammar& g) {
  auto c = CompiledGrammar::Compile(g);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// Whether the whole `text` is a complete sentence.
inline bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.Advance(text) && m.accepting();
}

// Whether `text` is a prefix of some sentence.
inline bool IsPrefix(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.Advance(text);
}

// Every byte as a token, JSON's punctuation combined, common fragments and
// random strings over a JSON-ish alphabet (ids past them stay empty, like a
// model's padding).
inline std::shared_ptr<const TokenVocab> TestVocab(int random_tokens, uint32_t seed) {
  std::vector<std::optional<std::string>> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"\",", "\":", "\"}", "\"]", "{\"", "[\"", "\": \"", "\", \"", "},", "}}", "]]", "],", "true",
                        "false", "null", "12", "345", "0.", ".5", "e+", "-1", "\\n", "\\u00", "  ", "\n  ", "<think>",
                        "</think>", "<tool_call>", "</tool_call>", "</", "é", "\xe4\xb8", "\xad", "😀"}) {
    pieces.push_back(std::string(s));
  }
  const std::string alphabet = "abc{}[]\",:0123456789.-+eE \n\\/<>tfnrul";
  std::mt19937 rng(seed);
  for (int i = 0; i < random_tokens; ++i) {
    const int len = 1 + static_cast<int>(rng() % 6);
    std::string s;
    for (int j = 0; j < len; ++j) s.push_back(alphabet[rng() % alphabet.size()]);
    pieces.push_back(s);
  }
  pieces.push_back(std::nullopt);
  pieces.push_back(std::nullopt);
  return TokenVocab::FromPieces(std::move(pieces));
}

}  // namespace spar::grammar::testing

#endif  // SPAR_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
