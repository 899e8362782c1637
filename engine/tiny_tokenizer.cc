#include "engine/tiny_tokenizer.h"

#include <string_view>
#include <utility>

#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

// GPT-2's reversible byte -> printable code point map.
std::string ByteSymbol(int b) {
  static const std::vector<int> map = [] {
    std::vector<int> cp(256, -1);
    for (int c = '!'; c <= '~'; ++c) cp[c] = c;
    for (int c = 0xA1; c <= 0xAC; ++c) cp[c] = c;
    for (int c = 0xAE; c <= 0xFF; ++c) cp[c] = c;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      if (cp[c] < 0) cp[c] = 256 + n++;
    }
    return cp;
  }();
  const int c = map[b];
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return out;
}

// Merges as (left, right) over byte symbols; "Ġ" is the space symbol.
const std::vector<std::pair<std::string, std::string>>& Merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"o", "n"}, {"r", "e"}, {"Ġt", "he"},
      {"Ġ", "s"}, {"a", "t"}, {"e", "n"}, {"Ġ", "w"}, {"o", "r"}, {"Ġ", "o"}, {"i", "s"}, {"e", "s"},
      {"Ġ", "c"}, {"i", "t"}, {"a", "n"}, {"Ġ", "b"}, {"Ġ", "f"}, {"a", "l"}, {"Ġ", "p"}, {"in", "g"},
      {"Ġ", "i"}, {"e", "d"}, {"o", "u"}, {"Ġ", "m"}, {"l", "e"}, {"Ġ", "d"}, {"a", "r"}, {"Ġo", "f"},
  };
  return merges;
}

const std::vector<std::string>& Specials() {
  static const std::vector<std::string> specials = {
      "<|endoftext|>", "[MASK]",  "[gMASK]",         "[sMASK]", "<sop>",   "<eop>",
      "<|system|>",    "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
  };
  return specials;
}

}  // namespace

TinyTokenizerSpec TinyTokenizerLayout() {
  TinyTokenizerSpec spec;
  spec.specials = Specials();
  spec.first_special_id = 256 + static_cast<int64_t>(Merges().size());
  spec.num_tokens = spec.first_special_id + static_cast<int64_t>(spec.specials.size());
  spec.eos_id = spec.first_special_id + 0;
  spec.user_id = spec.first_special_id + 7;
  spec.observation_id = spec.first_special_id + 9;
  return spec;
}

std::string TinyTokenizerJson() {
  const TinyTokenizerSpec spec = TinyTokenizerLayout();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSymbol(b)] = b;
  json merges = json::array();
  int64_t id = 256;
  for (const auto& [l, r] : Merges()) {
    vocab[l + r] = id++;
    merges.push_back({l, r});
  }
  json added = json::array();
  for (size_t i = 0; i < spec.specials.size(); ++i) {
    added.push_back({{"id", spec.first_special_id + static_cast<int64_t>(i)},
                     {"content", spec.specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json split = {
      {"type", "Split"},
      {"pattern",
       {{"Regex",
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
      {"behavior", "Isolated"},
      {"invert", false}};
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return tok.dump(2) + "\n";
}

std::string TinyTokenizerConfigJson() {
  const TinyTokenizerSpec spec = TinyTokenizerLayout();
  // A GLM-style chat template: [gMASK]<sop>, role tags, and an assistant tag
  // to start generation; thinking is off (an empty <think></think> block).
  const std::string chat_template =
      "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
      "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n<think></think>\n{% endif %}";
  json added_decoder = json::object();
  for (size_t i = 0; i < spec.specials.size(); ++i) {
    added_decoder[std::to_string(spec.first_special_id + static_cast<int64_t>(i))] = {
        {"content", spec.specials[i]}, {"lstrip", false}, {"normalized", false},
        {"rstrip", false},             {"single_word", false}, {"special", true}};
  }
  json cfg = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"model_max_length", 1 << 20},
      {"eos_token", "<|endoftext|>"},
      {"pad_token", "<|endoftext|>"},
      {"clean_up_tokenization_spaces", false},
      {"do_lower_case", false},
      {"added_tokens_decoder", added_decoder},
      {"chat_template", chat_template},
  };
  return cfg.dump(2) + "\n";
}

}  // namespace spar
