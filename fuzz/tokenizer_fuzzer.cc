// Fuzzes tokenizer encode/decode and the streaming detokenizer (text/):
// prompts, stop strings and generated ids all reach them from clients.
//
// Input: byte 0 picks one of three tokenizers (bit 0-1) and a mode (bit 2);
// the rest is text (mode 0) or little-endian u16 token ids (mode 1), ids
// running past the vocabulary on purpose.
//   0  make-tiny's byte-level BPE (GLM-style split regex), no normalizer
//   1  the same with added tokens using every flag and a hole in the id space
//   2  a SentencePiece-style BPE: NFC, Prepend/Replace, <0xNN> byte fallback,
//      decoder Replace + ByteFallback + Fuse + Strip
// Properties (text/tokenizer.h, text/detokenizer.h):
//   * Encode never fails and returns ids inside the id space;
//   * Encode with EncodeOptions::max_tokens returns the first max_tokens + 1
//     ids of the full encoding;
//   * tokenizer 0 is lossless: Decode(Encode(s)) == SanitizeUtf8(s);
//   * Decode fails exactly when an id is outside the vocabulary, and then
//     the detokenizer's Add fails on that id too, leaving its state alone;
//   * the detokenizer's deltas are valid UTF-8 and concatenate (with
//     Finish) to Decode(ids), with and without skip_special.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tiny_tokenizer.h"
#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"
#include "text/detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using json = nlohmann::ordered_json;

json Added(int id, const std::string& content, bool special, bool lstrip, bool rstrip, bool single_word,
           bool normalized) {
  return {{"id", id},         {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
}

json FlagsTokenizer() {
  json j = json::parse(spar::TinyTokenizerJson());
  auto& added = j["added_tokens"];
  added.push_back(Added(1000, "<lstrip>", true, true, false, false, false));
  added.push_back(Added(1001, "<rstrip>", true, false, true, false, false));
  added.push_back(Added(1002, "<word>", false, false, false, true, false));
  added.push_back(Added(1003, "<a>", true, false, false, false, false));
  added.push_back(Added(1004, "<a><b>", true, false, false, false, false));
  added.push_back(Added(1005, "plain", false, false, false, false, true));
  return j;
}

json ByteFallbackTokenizer() {
  json vocab = json::object();
  int id = 0;
  vocab["<unk>"] = id++;
  vocab["<s>"] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const char* s : {"▁", "a", "b", "c", "h", "i", "é", "你", "▁h", "▁hi", "ab", "abc"}) vocab[s] = id++;
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({Added(0, "<unk>", true, false, false, false, false),
                                    Added(1, "<s>", true, false, false, false, false)})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "NFC"}},
                                     {{"type", "Prepend"}, {"prepend", "▁"}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", json::array({"▁ h", "▁h i", "a b", "ab c"})}}},
  };
}

const std::vector<std::unique_ptr<spar::Tokenizer>>& Tokenizers() {
  static const auto* tokenizers = [] {
    auto* list = new std::vector<std::unique_ptr<spar::Tokenizer>>();
    for (const std::string& text :
         {spar::TinyTokenizerJson(), FlagsTokenizer().dump(), ByteFallbackTokenizer().dump()}) {
      auto t = spar::Tokenizer::FromJson(text);
      if (!t.ok()) {
        std::fprintf(stderr, "fuzz tokenizer does not load: %s\n", std::string(t.status().message()).c_str());
        std::abort();
      }
      list->push_back(std::move(*t));
    }
    return list;
  }();
  return *tokenizers;
}

// Streams `ids` through a detokenizer; checks it against Decode.
void CheckDetokenizer(const spar::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  auto decoded = tok.Decode(ids, skip_special);
  spar::IncrementalDetokenizer detok(&tok, skip_special);
  std::string streamed;
  bool failed = false;
  for (int32_t id : ids) {
    const size_t pending = detok.pending_bytes();
    auto delta = detok.Add(id);
    if (!delta.ok()) {
      SPAR_FUZZ_CHECK(id < 0 || id >= tok.vocab_size() || !tok.Piece(id).ok());
      SPAR_FUZZ_CHECK(detok.pending_bytes() == pending);  // state unchanged
      failed = true;
      continue;
    }
    SPAR_FUZZ_CHECK(spar::IsValidUtf8(*delta));
    streamed += *delta;
  }
  const std::string tail = detok.Finish();
  SPAR_FUZZ_CHECK(spar::IsValidUtf8(tail));
  streamed += tail;
  SPAR_FUZZ_CHECK(detok.pending_bytes() == 0);
  SPAR_FUZZ_CHECK(decoded.ok() == !failed);
  if (decoded.ok()) {
    if (streamed != *decoded) {
      std::fprintf(stderr, "streamed \"%s\" != decoded \"%s\"\n", streamed.c_str(), decoded->c_str());
    }
    SPAR_FUZZ_CHECK(streamed == *decoded);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] & 3;
  if (which == 3) return 0;
  const bool ids_mode = (data[0] >> 2) & 1;
  const spar::Tokenizer& tok = *Tokenizers()[which];
  const absl::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids;
  if (ids_mode) {
    const uint32_t range = static_cast<uint32_t>(tok.vocab_size()) + 8;
    for (size_t i = 0; i + 1 < rest.size(); i += 2) {
      const uint32_t v = static_cast<uint8_t>(rest[i]) | (static_cast<uint8_t>(rest[i + 1]) << 8);
      ids.push_back(static_cast<int32_t>(v % range));
    }
  } else {
    for (bool allow_special : {true, false}) {
      auto encoded = tok.Encode(rest, allow_special);
      SPAR_FUZZ_CHECK(encoded.ok());  // "Encode never fails on input bytes"
      for (int32_t id : *encoded) SPAR_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
      // A limit returns the first limit + 1 ids of the full encoding; the
      // limit comes from the input's length, so every corpus entry tries
      // another one.
      const size_t limit = rest.size() % (encoded->size() + 2);
      auto limited = tok.Encode(rest, spar::EncodeOptions{.allow_special = allow_special, .max_tokens = limit});
      SPAR_FUZZ_CHECK(limited.ok());
      SPAR_FUZZ_CHECK(*limited == std::vector<int32_t>(encoded->begin(),
                                                       encoded->begin() + std::min(encoded->size(), limit + 1)));
      if (which == 0) {
        auto back = tok.Decode(*encoded);
        SPAR_FUZZ_CHECK(back.ok());
        SPAR_FUZZ_CHECK(*back == spar::SanitizeUtf8(rest));
      }
      if (allow_special) ids = std::move(*encoded);
    }
  }
  CheckDetokenizer(tok, ids, /*skip_special=*/false);
  CheckDetokenizer(tok, ids, /*skip_special=*/true);
  return 0;
}
