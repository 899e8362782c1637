// Grammars, their compilation (left recursion, dead ends, distances) and
// the pushdown matcher on JSON.
#include <string>

#include "grammar/compiled_grammar.h"
#include "grammar/json_rules.h"
#include "grammar/matcher.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"

namespace spar::grammar {
namespace {

using testing::Accepts;
using testing::IsPrefix;
using testing::MustCompile;

std::shared_ptr<const CompiledGrammar> JsonValueGrammar() {
  Grammar g;
  JsonRules json(&g, JsonFamily::Plain());
  g.set_root(g.Add("root", json.Value()));
  return MustCompile(g);
}

TEST(MatcherTest, JsonValues) {
  const auto g = JsonValueGrammar();
  for (const char* ok : {"{}", "[]", R"({"a": [1, 2.5, -3e+2, true, null, "x"], "b": {"c": {}}})", "\"s\"", "0",
                         "[ ]", "[\n  {\"k\" :\t\"v\"}\n]", "false"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {"{", "[1,]", "{\"a\"}", "{'a': 1}", "[1 2]", "tru", "nul", "01", "{\"a\":1,}"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  EXPECT_TRUE(IsPrefix(g, "{\"a\": [1, {\"b\""));
  EXPECT_FALSE(IsPrefix(g, "{\"a\": ]"));
}

TEST(MatcherTest, RejectedAdvanceLeavesStateUnchanged) {
  GrammarMatcher m(JsonValueGrammar());
  ASSERT_TRUE(m.Advance("[1"));
  EXPECT_FALSE(m.Advance(",]"));
  EXPECT_TRUE(m.Advance("]"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.terminated());
}

TEST(MatcherTest, MinCostIsTheShortestCompletion) {
  GrammarMatcher m(JsonValueGrammar());
  EXPECT_EQ(m.min_cost(), 1);  // "0"
  ASSERT_TRUE(m.Advance("{\"ab"));
  EXPECT_EQ(m.min_cost(), 4);  // "\":0}"
  ASSERT_TRUE(m.Advance("\": [[["));
  EXPECT_EQ(m.min_cost(), 4);  // "]]]}"
  const auto probe = m.Probe("]]]}");
  EXPECT_TRUE(probe.ok);
  EXPECT_TRUE(probe.terminated);
  EXPECT_EQ(probe.min_cost, 0);
  EXPECT_FALSE(m.Probe("}").ok);
  EXPECT_EQ(m.min_cost(), 4);  // Probe changes nothing
}

TEST(MatcherTest, AcceptingButNotTerminatedAfterANumber) {
  Grammar g;
  JsonRules json(&g, JsonFamily::Plain());
  g.set_root(g.Add("root", json.Number()));
  GrammarMatcher m(MustCompile(g));
  ASSERT_TRUE(m.Advance("12"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.terminated());
}

TEST(CompileTest, RefusesLeftRecursionAndUnsatisfiableRoots) {
  {
    Grammar g;
    const int a = g.Declare("a");
    g.Define(a, Alt({Seq({Call(a), Lit("x")}), Lit("y")}));
    g.set_root(a);
    auto c = CompiledGrammar::Compile(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("left recursion"), std::string::npos) << c.status();
  }
  {
    Grammar g;
    const int a = g.Declare("a");
    g.Define(a, Seq({Lit("("), Call(a), Lit(")")}));  // never ends
    g.set_root(a);
    auto c = CompiledGrammar::Compile(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("no output"), std::string::npos) << c.status();
  }
}

TEST(CompileTest, RecursionAndDeadBranchesArePruned) {
  Grammar g;
  const int a = g.Declare("parens");
  const int never = g.Declare("never");
  g.Define(never, Seq({Lit("!"), Call(never)}));
  g.Define(a, Alt({Seq({Lit("("), Call(a), Lit(")")}), Lit("x"), Seq({Lit("?"), Call(never)})}));
  g.set_root(a);
  const auto c = MustCompile(g);
  EXPECT_TRUE(Accepts(c, "((x))"));
  EXPECT_FALSE(Accepts(c, "((x)"));
  // "?" leads only into a rule that cannot finish: refused at once.
  EXPECT_FALSE(IsPrefix(c, "?"));
}

TEST(CompileTest, NullableCallsAndRepeats) {
  Grammar g;
  const int ws = g.Add("ws", Star(Lit(" ")));
  const int item = g.Add("item", Seq({Call(ws), Lit("a"), Call(ws)}));
  g.set_root(g.Add("root", Seq({Lit("["), Repeat(Call(item), 2, 3), Lit("]")})));
  const auto c = MustCompile(g);
  EXPECT_TRUE(Accepts(c, "[aa]"));
  EXPECT_TRUE(Accepts(c, "[ a  a a ]"));
  EXPECT_FALSE(Accepts(c, "[a]"));
  EXPECT_FALSE(Accepts(c, "[aaaa]"));
}

}  // namespace
}  // namespace spar::grammar
