// Token masks from the precomputed state tables equal the brute-force
// answer (probe every token's bytes against the matcher), at every position
// of many walks through several grammars; with a budget the mask only
// allows tokens after which the output can still be finished in time, and
// following it always finishes.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/json_rules.h"
#include "grammar/json_schema.h"
#include "grammar/state_masks.h"
#include "grammar/token_mask.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"

namespace spar::grammar {
namespace {

using testing::MustCompile;
using testing::TestVocab;

std::shared_ptr<const CompiledGrammar> SchemaGrammar(const char* schema_text, bool tag_safe = false) {
  Grammar g;
  JsonRules json(&g, tag_safe ? JsonFamily::Glm() : JsonFamily::Plain());
  const Json schema = Json::parse(schema_text);
  JsonSchemaCompiler c(&g, &json, schema, "schema");
  auto root = c.CompileRoot();
  EXPECT_TRUE(root.ok()) << root.status();
  g.set_root(g.Add("root", Seq({json.Ws(), *root})));
  return MustCompile(g);
}

std::vector<std::shared_ptr<const CompiledGrammar>> Grammars() {
  std::vector<std::shared_ptr<const CompiledGrammar>> out;
  {
    Grammar g;
    JsonRules json(&g, JsonFamily::Plain());
    g.set_root(g.Add("root", json.Object()));
    out.push_back(MustCompile(g));
  }
  out.push_back(SchemaGrammar(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 4}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 3]}, "maxItems": 3},
      "score": {"type": ["number", "null"]}}, "required": ["age"]})"));
  out.push_back(SchemaGrammar(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "boolean"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
      "$ref": "#/$defs/node"})"));
  out.push_back(SchemaGrammar(R"({"anyOf": [{"type": "string"}, {"type": "object",
      "additionalProperties": {"type": "number"}}]})", /*tag_safe=*/true));
  {
    Grammar g;
    JsonRules json(&g, JsonFamily::Plain());
    const int reasoning = g.Add("reasoning", Automaton(TextUntil("</think>", {"<tool_call>"})), "test.reasoning");
    g.set_root(g.Add("root", Seq({Call(reasoning), json.Ws(), json.Array()})));
    out.push_back(MustCompile(g));
  }
  return out;
}

// Tokens whose bytes the matcher accepts here (and, with a budget, after
// which the output can be finished in `remaining` more one-byte tokens).
std::vector<uint32_t> BruteForce(const TokenVocab& vocab, const GrammarMatcher& m, int64_t remaining,
                                 const std::vector<int32_t>& end_ids) {
  std::vector<uint32_t> words(vocab.mask_words(), 0);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.matchable(id) || std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end()) continue;
    const auto o = m.Probe(vocab.bytes(id));
    if (o.ok && (remaining < 0 || o.min_cost <= remaining)) words[id >> 5] |= 1u << (id & 31);
  }
  if (m.accepting()) {
    for (int32_t id : end_ids) words[id >> 5] |= 1u << (id & 31);
  }
  return words;
}

std::string Describe(const TokenVocab& vocab, const std::vector<uint32_t>& want, const std::vector<uint32_t>& got) {
  std::string s;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const bool a = MaskAllows(want.data(), id), b = MaskAllows(got.data(), id);
    if (a != b) absl::StrAppend(&s, a ? " missing " : " extra ", id, "=", std::string(vocab.bytes(id)), ";");
  }
  return s;
}

TEST(TokenMaskTest, EqualsBruteForceAlongRandomWalks) {
  const auto vocab = TestVocab(600, 3);
  const std::vector<int32_t> end_ids = {vocab->size() - 1};  // an id with no bytes, as EOS often is
  auto shared = std::make_shared<SharedTableCache>(vocab);
  std::mt19937 rng(11);
  int positions = 0;
  for (const auto& g : Grammars()) {
    StateMasks tables(g, shared);
    for (int walk = 0; walk < 6; ++walk) {
      GrammarMatcher m(g);
      for (int step = 0; step < 60 && !m.terminated(); ++step) {
        std::vector<uint32_t> got(vocab->mask_words());
        MaskOptions opt;
        opt.end_ids = end_ids;
        FillTokenMask(tables, m, opt, got.data());
        const auto want = BruteForce(*vocab, m, -1, end_ids);
        ASSERT_EQ(got, want) << "walk " << walk << " step " << step << ":" << Describe(*vocab, want, got);
        ++positions;
        // Next: a random allowed token (end tokens end the walk).
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (MaskAllows(got.data(), id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty());
        const int32_t pick = allowed[rng() % allowed.size()];
        if (pick == end_ids[0]) break;
        ASSERT_TRUE(m.Advance(vocab->bytes(pick)));
      }
    }
  }
  EXPECT_GT(positions, 500);
}

TEST(TokenMaskTest, BudgetedWalksAlwaysFinishInTime) {
  const auto vocab = TestVocab(600, 5);
  const std::vector<int32_t> end_ids = {vocab->size() - 1};
  auto shared = std::make_shared<SharedTableCache>(vocab);
  std::mt19937 rng(13);
  for (const auto& g : Grammars()) {
    StateMasks tables(g, shared);
    for (int max_tokens : {12, 25, 40}) {
      for (int walk = 0; walk < 8; ++walk) {
        GrammarMatcher m(g);
        if (m.min_cost() > max_tokens) continue;
        std::string text;
        bool ended = false;
        for (int step = 0; step < max_tokens && !m.terminated(); ++step) {
          const int64_t remaining = max_tokens - step - 1;
          std::vector<uint32_t> got(vocab->mask_words());
          MaskOptions opt;
          opt.end_ids = end_ids;
          opt.remaining = remaining;
          const MaskStats stats = FillTokenMask(tables, m, opt, got.data());
          EXPECT_FALSE(stats.budget_dropped) << text;
          const auto loose = BruteForce(*vocab, m, remaining, end_ids);
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->size(); ++id) {
            if (!MaskAllows(got.data(), id)) continue;
            // Never more than the budget allows.
            ASSERT_TRUE(MaskAllows(loose.data(), id)) << text << " + " << std::string(vocab->bytes(id));
            allowed.push_back(id);
          }
          ASSERT_FALSE(allowed.empty()) << text;
          // Prefer long tokens, which use up the budget fastest.
          std::sort(allowed.begin(), allowed.end(),
                    [&](int32_t a, int32_t b) { return vocab->bytes(a).size() > vocab->bytes(b).size(); });
          const int32_t pick = allowed[rng() % std::min<size_t>(allowed.size(), 4)];
          if (pick == end_ids[0]) {
            ended = true;
            break;
          }
          text += std::string(vocab->bytes(pick));
          ASSERT_TRUE(m.Advance(vocab->bytes(pick)));
        }
        EXPECT_TRUE(ended || m.accepting()) << "max_tokens " << max_tokens << ": " << text;
      }
    }
  }
}

TEST(TokenMaskTest, SharedTablesAreComputedOncePerVocabulary) {
  const auto vocab = TestVocab(100, 1);
  auto shared = std::make_shared<SharedTableCache>(vocab);
  const auto a = SchemaGrammar(R"({"type": "object", "properties": {"x": {"type": "string"}}})");
  const auto b = SchemaGrammar(R"({"type": "array", "items": {"type": "string"}})");
  StateMasks ta(a, shared), tb(b, shared);
  std::vector<uint32_t> words(vocab->mask_words());
  GrammarMatcher ma(a);
  ASSERT_TRUE(ma.Advance(R"({"x": "he)"));
  FillTokenMask(ta, ma, MaskOptions(), words.data());
  EXPECT_GT(shared->size(), 0u);
  // Inside a string, grammar b's only stack is in the shared string rule:
  // its table comes from the cache, nothing is computed.
  GrammarMatcher mb(b);
  ASSERT_TRUE(mb.Advance(R"(["he)"));
  FillTokenMask(tb, mb, MaskOptions(), words.data());
  EXPECT_EQ(tb.computed(), 0);
  EXPECT_TRUE(MaskAllows(words.data(), 'x'));
}

TEST(TokenMaskTest, SpecialTokensOnlyWhereAllowed) {
  std::vector<std::optional<std::string>> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.push_back(std::string("<tool_call>"));  // 256, special
  pieces.push_back(std::string("<|user|>"));     // 257, special
  const auto vocab = TokenVocab::FromPieces(pieces, {256, 257});
  Grammar g;
  g.set_root(g.Add("root", Seq({Star(ByteRange('<', '|')), Lit(">")})));  // both specials spell valid text here
  const auto c = MustCompile(g);
  StateMasks tables(c, std::make_shared<SharedTableCache>(vocab));
  GrammarMatcher m(c);
  std::vector<uint32_t> words(vocab->mask_words());
  MaskOptions opt;
  opt.allowed_special = {256};
  FillTokenMask(tables, m, opt, words.data());
  EXPECT_FALSE(MaskAllows(words.data(), 257));
  EXPECT_TRUE(MaskAllows(words.data(), '<'));
}

}  // namespace
}  // namespace spar::grammar
