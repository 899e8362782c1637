// Small tokenizer.json documents for unit tests: make-tiny's byte-level BPE
// (engine/tiny_tokenizer.cc) with extra added tokens, and a SentencePiece-
// style character BPE with <0xNN> byte fallback.
#ifndef SPAR_TESTS_TEXT_TEST_TOKENIZERS_H_
#define SPAR_TESTS_TEXT_TEST_TOKENIZERS_H_

#include <memory>
#include <string>

#include "engine/tiny_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

namespace spar {
namespace testing_text {

inline nlohmann::ordered_json TinyJson() { return nlohmann::ordered_json::parse(TinyTokenizerJson()); }

inline nlohmann::ordered_json AddedToken(int id, const std::string& content, bool special, bool lstrip = false,
                                         bool rstrip = false, bool single_word = false, bool normalized = false) {
  return {{"id", id},         {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
}

// make-tiny's tokenizer plus added tokens exercising every flag. Ids from
// 1000 on leave a hole in the id space (ids between the tiny vocabulary and
// 1000 decode to an error).
inline nlohmann::ordered_json FlagsJson() {
  nlohmann::ordered_json j = TinyJson();
  auto& added = j["added_tokens"];
  added.push_back(AddedToken(1000, "<lstrip>", true, /*lstrip=*/true));
  added.push_back(AddedToken(1001, "<rstrip>", true, false, /*rstrip=*/true));
  added.push_back(AddedToken(1002, "<word>", false, false, false, /*single_word=*/true));
  added.push_back(AddedToken(1003, "<a>", true));
  added.push_back(AddedToken(1004, "<a><b>", true));
  added.push_back(AddedToken(1005, "plain_added", false));
  return j;
}

inline std::unique_ptr<Tokenizer> Load(const nlohmann::ordered_json& j) {
  auto tok = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// Llama-2 style: characters as symbols, "▁" for spaces, <0xNN> fallback,
// decoder Replace + ByteFallback + Fuse + Strip.
inline nlohmann::ordered_json ByteFallbackJson() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  int id = 0;
  vocab["<unk>"] = id++;
  vocab["<s>"] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const char* s : {"▁", "a", "b", "c", "h", "i", "é", "你", "▁h", "▁hi", "ab", "abc"}) vocab[s] = id++;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array({"▁ h", "▁h i", "a b", "ab c"});
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::ordered_json::array({AddedToken(0, "<unk>", true), AddedToken(1, "<s>", true)})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         nlohmann::ordered_json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", nlohmann::ordered_json::array(
                         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

}  // namespace testing_text
}  // namespace spar

#endif  // SPAR_TESTS_TEXT_TEST_TOKENIZERS_H_
