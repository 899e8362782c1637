// spar's tokenizer, detokenizer and chat templates against implementations
// nobody on this team wrote: Hugging Face tokenizers (native Node binding)
// and @huggingface/jinja. tests/npm/reference.js writes their outputs; the
// path arrives in SPAR_TEXT_REFERENCE (set by ctest, see CMakeLists.txt).
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/sanitizers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace spar {
namespace {

using json = nlohmann::ordered_json;

const json& Reference() {
  static const json* ref = [] {
    const char* path = std::getenv("SPAR_TEXT_REFERENCE");
    auto* j = new json();
    if (path == nullptr) return j;
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    *j = json::parse(text.begin(), text.end(), nullptr, false);
    return j;
  }();
  return *ref;
}

// No silent skips: without the reference file the test fails.
bool HaveReference() {
  const char* path = std::getenv("SPAR_TEXT_REFERENCE");
  if (path == nullptr) {
    ADD_FAILURE() << "SPAR_TEXT_REFERENCE is not set; run through ctest (fixture text_reference)";
    return false;
  }
  if (Reference().is_discarded() || !Reference().contains("tokens")) {
    ADD_FAILURE() << "cannot read reference file " << path;
    return false;
  }
  return true;
}

std::string Hex(absl::string_view s) { return absl::BytesToHexString(s); }

// The neighbourhood of the first difference, escaped.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 80 ? i - 80 : 0;
  return absl::StrCat("first difference at byte ", i, "\n  want: ...", absl::CHexEscape(want.substr(from, 200)),
                      "\n  got:  ...", absl::CHexEscape(got.substr(from, 200)));
}

class TokenParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenParityTest, IdsDecodeAndStreamingMatchHuggingFace) {
  if (!HaveReference()) return;
  const json& ref = Reference()["tokens"][GetParam()];
  ASSERT_TRUE(ref.is_object()) << GetParam();
  auto tok_or = Tokenizer::FromFile(ref["tokenizer_json"].get<std::string>());
  ASSERT_TRUE(tok_or.ok()) << tok_or.status();
  const Tokenizer& tok = **tok_or;
  int total = 0, id_match = 0, decode_match = 0, roundtrip = 0, stream_match = 0;
  std::vector<std::string> failures;
  for (const json& c : ref["cases"]) {
    ++total;
    const std::string input = absl::HexStringToBytes(c["input_hex"].get<std::string>());
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    auto ids = tok.Encode(input);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids == want) {
      ++id_match;
    } else if (failures.size() < 10) {
      std::ostringstream msg;
      msg << "input " << Hex(input) << " (\"" << absl::CHexEscape(input.substr(0, 200)) << "\")\n  want";
      for (int32_t id : want) msg << " " << id;
      msg << "\n  got ";
      for (int32_t id : *ids) msg << " " << id;
      failures.push_back(msg.str());
    }
    // Decode HF's ids both ways and compare with HF's decode.
    auto dec = tok.Decode(want, false);
    auto dec_skip = tok.Decode(want, true);
    ASSERT_TRUE(dec.ok() && dec_skip.ok());
    if (*dec == c["decoded"].get<std::string>() && *dec_skip == c["decoded_skip_special"].get<std::string>()) {
      ++decode_match;
    } else if (failures.size() < 20) {
      failures.push_back(absl::StrCat("decode of ", Hex(input), ": got \"", absl::CHexEscape(*dec), "\" want \"",
                                      absl::CHexEscape(c["decoded"].get<std::string>()), "\""));
    }
    // decode(encode(x)) == x, where x is the text HF saw (lossy UTF-8).
    auto back = tok.Decode(*ids);
    if (back.ok() && *back == c["decoded"].get<std::string>()) ++roundtrip;
    // Streaming deltas concatenate to Decode.
    IncrementalDetokenizer detok(&tok, false);
    std::string streamed;
    for (int32_t id : want) {
      auto delta = detok.Add(id);
      ASSERT_TRUE(delta.ok());
      streamed += *delta;
    }
    streamed += detok.Finish();
    if (streamed == *dec) ++stream_match;
  }
  for (const std::string& f : failures) ADD_FAILURE() << f;
  std::printf("[%s] %d strings: ids equal %d, decode equal %d, decode(encode(x))==x %d, stream==decode %d\n",
              GetParam().c_str(), total, id_match, decode_match, roundtrip, stream_match);
  EXPECT_GE(total, 2000);
  EXPECT_EQ(id_match, total);
  EXPECT_EQ(decode_match, total);
  EXPECT_EQ(roundtrip, total);
  EXPECT_EQ(stream_match, total);
}

// Encode with a token limit returns the first max_tokens + 1 of the ids HF
// produces (all of them when they fit), on every corpus string for several
// limits, and on the corpus concatenated past several pre-tokenization
// windows (64 KiB, doubling) compared with spar's full encoding.
TEST_P(TokenParityTest, LimitedEncodeIsThePrefix) {
  if (!HaveReference()) return;
  const json& ref = Reference()["tokens"][GetParam()];
  auto tok_or = Tokenizer::FromFile(ref["tokenizer_json"].get<std::string>());
  ASSERT_TRUE(tok_or.ok()) << tok_or.status();
  const Tokenizer& tok = **tok_or;
  auto prefix = [](const std::vector<int32_t>& ids, size_t limit) {
    return std::vector<int32_t>(ids.begin(), ids.begin() + std::min(ids.size(), limit + 1));
  };
  int checked = 0;
  std::string text;
  for (const json& c : ref["cases"]) {
    const std::string input = absl::HexStringToBytes(c["input_hex"].get<std::string>());
    text += input;
    text += "\n";
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    for (size_t limit : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, want.size() / 2, want.size()}) {
      auto ids = tok.Encode(input, EncodeOptions{.max_tokens = limit});
      ASSERT_TRUE(ids.ok()) << ids.status();
      ASSERT_EQ(*ids, prefix(want, limit)) << "limit " << limit << " input " << Hex(input);
      ++checked;
    }
  }
  while (text.size() < (1u << 20)) text += text;
  auto full = tok.Encode(text);
  ASSERT_TRUE(full.ok()) << full.status();
  for (size_t limit : {size_t{100}, size_t{20000}, size_t{90000}, full->size() - 1, full->size()}) {
    auto ids = tok.Encode(text, EncodeOptions{.max_tokens = limit});
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(*ids, prefix(*full, limit)) << "limit " << limit << " on " << text.size() << " bytes";
    ++checked;
  }
  std::printf("[%s] limited encodes equal to the prefix: %d\n", GetParam().c_str(), checked);
}

// Throughput on one core over mixed English / Chinese / code / emoji text
// (the corpus, concatenated to 4 MB). Printed for the record; the bound is
// loose because CI machines are shared.
TEST_P(TokenParityTest, Throughput) {
  if (!HaveReference()) return;
  const json& ref = Reference()["tokens"][GetParam()];
  const auto load_start = std::chrono::steady_clock::now();
  auto tok_or = Tokenizer::FromFile(ref["tokenizer_json"].get<std::string>());
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  ASSERT_TRUE(tok_or.ok()) << tok_or.status();
  const Tokenizer& tok = **tok_or;
  std::printf("[%s] tokenizer.json loaded in %.2f s (wall), vocabulary %d\n", GetParam().c_str(), load_seconds,
              tok.vocab_size());
  std::string text;
  while (text.size() < (4u << 20)) {
    for (const json& c : ref["cases"]) {
      text += absl::HexStringToBytes(c["input_hex"].get<std::string>());
      text += "\n";
    }
  }
  // Process CPU time: the machine is shared, and wall time would charge
  // other people's compiles to the tokenizer.
  auto seconds_of = [](auto fn) {
    const std::clock_t start = std::clock();
    fn();
    return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  };
  std::vector<int32_t> ids;
  const double cold = seconds_of([&] { ids = *tok.Encode(text); });
  const double warm = seconds_of([&] { ids = *tok.Encode(text); });
  std::string back;
  const double dec = seconds_of([&] { back = *tok.Decode(ids); });
  const double mb = text.size() / 1e6;
  std::printf("[%s] throughput on %.1f MB (%zu tokens): encode %.1f MB/s first pass, %.1f MB/s cached; "
              "decode %.1f MB/s (CPU time, one core)\n",
              GetParam().c_str(), mb, ids.size(), mb / cold, mb / warm, mb / dec);
  // A bound for optimized builds; under ASan (tools/sanitize.sh) the
  // numbers are only printed.
  if (!kAsanBuild) EXPECT_GT(mb / warm, 2.0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenParityTest, ::testing::Values("deepseek_v3", "qwen3", "glm_split", "glm_split_ignore_merges"));

TEST(ChatTemplateParityTest, RendersEqualHuggingFaceJinja) {
  if (!HaveReference()) return;
  const json& chat = Reference()["chat"];
  const std::string dir = chat["template_dir"].get<std::string>();
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::map<std::string, std::pair<int, int>> per_template;  // name -> (equal, total)
  int total = 0, equal = 0, failures = 0;
  for (const json& c : chat["cases"]) {
    const std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) {
      auto t = ChatTemplate::FromFile(absl::StrCat(dir, "/", name, ".jinja"));
      ASSERT_TRUE(t.ok()) << name << ": " << t.status();
      templates[name] = std::move(*t);
    }
    ++total;
    ++per_template[name].second;
    auto rendered = templates[name]->Render(c["context"]);
    bool ok;
    if (c.contains("error")) {
      ok = !rendered.ok();
    } else {
      ok = rendered.ok() && *rendered == c["rendered"].get<std::string>();
    }
    if (ok) {
      ++equal;
      ++per_template[name].first;
    } else if (++failures <= 10) {
      std::string detail;
      if (c.contains("error")) {
        detail = absl::StrCat("want an error (", c["error"].get<std::string>(), "), got a render");
      } else if (!rendered.ok()) {
        detail = rendered.status().ToString();
      } else {
        detail = FirstDifference(c["rendered"].get<std::string>(), *rendered);
      }
      ADD_FAILURE() << name << " " << c["name"].get<std::string>() << ": " << detail;
    }
  }
  for (const auto& [name, counts] : per_template) {
    std::printf("[chat %s] %d/%d renders equal\n", name.c_str(), counts.first, counts.second);
  }
  std::printf("[chat] %d/%d renders equal to @huggingface/jinja\n", equal, total);
  EXPECT_EQ(equal, total);
}

}  // namespace
}  // namespace spar
