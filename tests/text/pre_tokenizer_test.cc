// PreTokenizer streams words a window at a time: the words must be exactly
// those of splitting the whole text at once, whatever the window, for every
// step kind and split behavior. The oracle is the plain algorithm (every
// step over all pieces, each piece searched in full), as spar ran it before
// the stream existed.
#include "text/pre_tokenizer.h"

#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace spar {
namespace {

PreTokenizerStep Split(const std::string& regex, SplitBehavior behavior = SplitBehavior::kIsolated,
                       bool invert = false) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kSplit;
  auto re = Regex::Compile(regex);
  EXPECT_TRUE(re.ok()) << re.status();
  step.regex = std::move(*re);
  step.behavior = behavior;
  step.invert = invert;
  return step;
}

PreTokenizerStep Digits(bool individual) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kDigits;
  step.individual_digits = individual;
  return step;
}

PreTokenizerStep ByteLevel(bool add_prefix_space, bool use_regex) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kByteLevel;
  step.add_prefix_space = add_prefix_space;
  if (use_regex) {
    step.regex = std::move(
        *Regex::Compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"));
  }
  return step;
}

// --- the oracle ----------------------------------------------------------------

struct Part {
  size_t begin, end;
  bool delim;
};

std::vector<std::pair<size_t, size_t>> FindAll(const Regex& re, absl::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t offset = 0;
  while (offset <= text.size()) {
    auto found = re.Find(text, offset, /*more_may_follow=*/false);
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok() || found->kind != Regex::Search::kMatch) break;
    if (found->end > found->begin) {
      out.emplace_back(found->begin, found->end);
      offset = found->end;
    } else {
      if (found->begin >= text.size()) break;
      size_t next = found->begin + 1;
      while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
      offset = next;
    }
  }
  return out;
}

std::vector<std::string> ReferenceWords(const std::vector<const PreTokenizerStep*>& steps, absl::string_view text) {
  std::deque<std::string> arena;
  std::vector<absl::string_view> pieces{text};
  for (const PreTokenizerStep* step : steps) {
    if (step->kind == PreTokenizerStep::Kind::kByteLevel && step->add_prefix_space) {
      for (absl::string_view& p : pieces) {
        if (!p.empty() && p[0] != ' ') {
          arena.push_back(" " + std::string(p));
          p = arena.back();
        }
      }
    }
    if (step->kind == PreTokenizerStep::Kind::kByteLevel && step->regex == nullptr) continue;
    std::vector<absl::string_view> next;
    for (absl::string_view p : pieces) {
      std::vector<Part> parts;
      if (step->kind == PreTokenizerStep::Kind::kDigits) {
        size_t i = 0;
        while (i < p.size()) {
          char32_t cp = 0;
          size_t len = DecodeUtf8At(p, i, &cp);
          if (len == 0) len = 1;
          parts.push_back({i, i + len, IsUnicodeNumeric(cp)});
          i += len;
        }
      } else {
        size_t pos = 0;
        for (const auto& [b, e] : FindAll(*step->regex, p)) {
          if (b > pos) parts.push_back({pos, b, false});
          parts.push_back({b, e, true});
          pos = e;
        }
        if (pos < p.size()) parts.push_back({pos, p.size(), false});
      }
      if (step->kind == PreTokenizerStep::Kind::kSplit && step->invert) {
        for (Part& part : parts) part.delim = !part.delim;
      }
      SplitBehavior behavior = SplitBehavior::kIsolated;
      if (step->kind == PreTokenizerStep::Kind::kSplit) behavior = step->behavior;
      if (step->kind == PreTokenizerStep::Kind::kDigits && !step->individual_digits) {
        behavior = SplitBehavior::kContiguous;
      }
      auto emit = [&](size_t b, size_t e) {
        if (e > b) next.push_back(p.substr(b, e - b));
      };
      size_t start = 0;
      switch (behavior) {
        case SplitBehavior::kIsolated:
          for (const Part& part : parts) emit(part.begin, part.end);
          break;
        case SplitBehavior::kRemoved:
          for (const Part& part : parts) {
            if (!part.delim) emit(part.begin, part.end);
          }
          break;
        case SplitBehavior::kMergedWithPrevious:
          for (const Part& part : parts) {
            if (part.delim) {
              emit(start, part.end);
              start = part.end;
            }
          }
          emit(start, p.size());
          break;
        case SplitBehavior::kMergedWithNext:
          for (const Part& part : parts) {
            if (part.delim) {
              emit(start, part.begin);
              start = part.begin;
            }
          }
          emit(start, p.size());
          break;
        case SplitBehavior::kContiguous:
          for (size_t k = 0; k < parts.size();) {
            size_t e = k;
            while (e + 1 < parts.size() && parts[e + 1].delim == parts[k].delim) ++e;
            emit(parts[k].begin, parts[e].end);
            k = e + 1;
          }
          break;
      }
    }
    pieces.swap(next);
  }
  std::vector<std::string> words;
  for (absl::string_view p : pieces) {
    if (!p.empty()) words.emplace_back(p);
  }
  return words;
}

// --- the stream ----------------------------------------------------------------

struct Config {
  std::string name;
  std::vector<PreTokenizerStep> steps;
};

std::vector<std::string> StreamWords(const PreTokenizer& pre, absl::string_view text, size_t window,
                                     size_t stop_after = SIZE_MAX) {
  std::vector<std::string> words;
  absl::Status s = pre.ForEachWord(text, window, [&](absl::string_view w) {
    words.emplace_back(w);
    return words.size() < stop_after;
  });
  EXPECT_TRUE(s.ok()) << s;
  return words;
}

std::vector<Config> Configs() {
  // The real tokenizers' pre-tokenizers (tests/npm/reference.js), GPT-2's,
  // and every split behavior with and without invert over patterns that
  // look ahead, look behind, match empty strings or span newlines.
  const std::string deepseek_main =
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
  const std::string qwen =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+";
  const std::string glm =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  std::vector<Config> configs;
  {
    Config c{"deepseek_v3", {}};
    c.steps.push_back(Split("\\p{N}{1,3}"));
    c.steps.push_back(Split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"));
    c.steps.push_back(Split(deepseek_main));
    c.steps.push_back(ByteLevel(false, false));
    configs.push_back(std::move(c));
  }
  for (const auto& [name, regex] : {std::pair<std::string, std::string>{"qwen3", qwen}, {"glm", glm}}) {
    Config c{name, {}};
    c.steps.push_back(Split(regex));
    c.steps.push_back(ByteLevel(false, false));
    configs.push_back(std::move(c));
  }
  {
    Config c{"gpt2_prefix_space", {}};
    c.steps.push_back(ByteLevel(true, true));
    configs.push_back(std::move(c));
  }
  const std::pair<const char*, SplitBehavior> behaviors[] = {{"isolated", SplitBehavior::kIsolated},
                                                             {"removed", SplitBehavior::kRemoved},
                                                             {"merged_previous", SplitBehavior::kMergedWithPrevious},
                                                             {"merged_next", SplitBehavior::kMergedWithNext},
                                                             {"contiguous", SplitBehavior::kContiguous}};
  const char* patterns[] = {"\\s+", "\\s+(?!\\S)|\\s", "(?<=a)b+|x", "\\bab", "a*", "^a|\\n", "[,.]\\p{N}*", "(?=b)"};
  for (const auto& [bname, behavior] : behaviors) {
    for (bool invert : {false, true}) {
      for (const char* pattern : patterns) {
        Config c{absl::StrCat(bname, invert ? "_inverted" : "", " /", pattern, "/"), {}};
        c.steps.push_back(Split(pattern, behavior, invert));
        c.steps.push_back(Digits(behavior == SplitBehavior::kIsolated));
        c.steps.push_back(ByteLevel(/*add_prefix_space=*/invert, /*use_regex=*/false));
        configs.push_back(std::move(c));
      }
    }
  }
  {
    Config c{"digits_then_split", {}};
    c.steps.push_back(Digits(false));
    c.steps.push_back(Split("\\s+", SplitBehavior::kMergedWithNext));
    c.steps.push_back(ByteLevel(true, true));
    configs.push_back(std::move(c));
  }
  return configs;
}

std::string RandomText(std::mt19937& rng, size_t max_len) {
  static const char* kAtoms[] = {"a", "b", "x", "ab", "é", "中文", "の", "1", "23", "٣", " ", "  ", "\n", "\r\n", "\t",
                                 ",", ".", "'s", "'S", "!", "?!", "😀", "e\u0301", "\u00a0", "_", "-"};
  std::uniform_int_distribution<size_t> len(0, max_len), atom(0, std::size(kAtoms) - 1);
  std::string s;
  const size_t n = len(rng);
  while (s.size() < n) s += kAtoms[atom(rng)];
  return s;
}

TEST(PreTokenizerTest, StreamedWordsEqualTheWholeSplitForEveryWindow) {
  std::mt19937 rng(20240531);
  int compared = 0;
  for (Config& config : Configs()) {
    std::vector<const PreTokenizerStep*> steps;
    for (const PreTokenizerStep& step : config.steps) steps.push_back(&step);
    PreTokenizer pre;
    for (PreTokenizerStep& step : config.steps) {
      PreTokenizerStep copy;
      copy.kind = step.kind;
      if (step.regex != nullptr) copy.regex = std::move(*Regex::Compile(step.regex->pattern()));
      copy.behavior = step.behavior;
      copy.invert = step.invert;
      copy.individual_digits = step.individual_digits;
      copy.add_prefix_space = step.add_prefix_space;
      pre.AddStep(std::move(copy));
    }
    for (int iter = 0; iter < 120; ++iter) {
      const std::string text = RandomText(rng, iter < 100 ? 40 : 400);
      const std::vector<std::string> want = ReferenceWords(steps, text);
      ASSERT_EQ(StreamWords(pre, text, 0), want) << config.name << " text: " << text;
      for (size_t window : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{8}, size_t{13}}) {
        ASSERT_EQ(StreamWords(pre, text, window), want) << config.name << " window " << window << " text: " << text;
        ++compared;
      }
      // Stopping early yields a prefix of the words.
      const size_t stop = want.size() / 2 + 1;
      const std::vector<std::string> head = StreamWords(pre, text, 4, stop);
      ASSERT_EQ(head, std::vector<std::string>(want.begin(), want.begin() + std::min(stop, want.size())))
          << config.name << " text: " << text;
    }
  }
  EXPECT_GT(compared, 50000);
}

TEST(PreTokenizerTest, NoStepsMeansOneWord) {
  PreTokenizer pre;
  EXPECT_EQ(StreamWords(pre, "a b", 1), std::vector<std::string>({"a b"}));
  EXPECT_TRUE(StreamWords(pre, "", 1).empty());
}

}  // namespace
}  // namespace spar
