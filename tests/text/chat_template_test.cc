#include "text/chat_template.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/mapped_file.h"
#include "engine/tiny_tokenizer.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

using json = nlohmann::ordered_json;

std::string Render(absl::string_view src, const json& ctx = json::object(), ChatTemplateLimits limits = {}) {
  auto t = ChatTemplate::Parse(src, limits);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  auto out = (*t)->Render(ctx);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

absl::Status RenderStatus(absl::string_view src, const json& ctx = json::object(), ChatTemplateLimits limits = {}) {
  auto t = ChatTemplate::Parse(src, limits);
  if (!t.ok()) return t.status();
  return (*t)->Render(ctx).status();
}

TEST(ChatTemplateTest, ExpressionsAndPythonSemantics) {
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}"),
            "7 3 -4 1 2 1024 3.5");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1, 2] + [3] }}"), "a1|ababab|[1, 2, 3]");
  EXPECT_EQ(Render("{{ true }} {{ {'k': 'v', 'n': none} }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 2.0 }}"),
            "True {'k': 'v', 'n': None} 0.30000000000000004 1e+20 2.0");
  EXPECT_EQ(Render("{{ 'x' if a else 'y' }}{{ 'z' if b }}", json{{"a", false}}), "y");
  EXPECT_EQ(Render("{{ a or 'dflt' }} {{ a and 'no' }} {{ not a }}", json{{"a", ""}}), "dflt  True");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(Render("{{ 1 == 1.0 }} {{ [1, [2]] == [1, [2]] }} {{ 'a' < 'b' }} {{ 2 >= 3 }}"), "True True True False");
}

TEST(ChatTemplateTest, StringMethodsWorkOnCodePoints) {
  const json ctx = {{"s", "  你好, World!  "}};
  EXPECT_EQ(Render("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip(' !') }}]", ctx),
            "[你好, World!][你好, World!  ][  你好, World]");
  EXPECT_EQ(Render("{{ s | trim | length }} {{ s.strip()[0] }} {{ s.strip()[-1] }} {{ s.strip()[:2] }} {{ s.strip()[::-1] }}",
                   ctx),
            "10 你 ! 你好 !dlroW ,好你");
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.split('-', 1) }} {{ 'a-b-c'.rsplit('-', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b-c'] ['a-b', 'c']");
  EXPECT_EQ(Render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'bc')) }} {{ 'aaa'.replace('a', 'b', 2) }}"),
            "True True bba");
  EXPECT_EQ(Render("{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "Hello World Hello ABab");
  EXPECT_EQ(Render("{{ '</think>x'.split('</think>')[-1] }} {{ 'a\\nb'.splitlines() }} {{ '-'.join(['a', 'b']) }}"),
            "x ['a', 'b'] a-b");
}

TEST(ChatTemplateTest, ControlFlowLoopsAndScoping) {
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
                   json{{"xs", {"a", "b", "c"}}}),
            "1a,2b,3c");
  EXPECT_EQ(Render("{% for x in xs if x > 1 %}{{ loop.index0 }}:{{ x }}/{{ loop.length }} {% else %}none{% endfor %}",
                   json{{"xs", {1, 2, 3}}}),
            "0:2/2 1:3/2 ");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", json{{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(Render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "013");
  // set inside a loop stays in the loop; namespace attributes escape it.
  EXPECT_EQ(Render("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set x = 5 %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "1 3");
  EXPECT_EQ(Render("{% if a %}A{% elif b %}B{% else %}C{% endif %}", json{{"a", false}, {"b", true}}), "B");
  EXPECT_EQ(Render("{% set s %}captured {{ 1 + 1 }}{% endset %}[{{ s }}]"), "[captured 2]");
  EXPECT_EQ(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} "
                   "{{ greet('B', punct='?') }}"),
            "Hi A! Hi B?");
  EXPECT_EQ(Render("{% set xs = [] %}{% set _ = xs.append(1) %}{% set _ = xs.append(2) %}{{ xs | length }}{{ xs }}"),
            "2[1, 2]");
}

TEST(ChatTemplateTest, FiltersAndTests) {
  const json ctx = {{"msgs", {{{"role", "user"}, {"content", "hi"}}, {{"role", "tool"}, {"content", "x"}}}},
                    {"obj", {{"b", "é"}, {"a", {1, 2.5, nullptr, true}}}}};
  EXPECT_EQ(Render("{{ obj | tojson }}", ctx), R"({"b": "é", "a": [1, 2.5, null, true]})");
  EXPECT_EQ(Render("{{ obj | tojson(ensure_ascii=True) }}", ctx), R"({"b": "\u00e9", "a": [1, 2.5, null, true]})");
  EXPECT_EQ(Render("{{ obj | tojson(indent=2, sort_keys=True) }}", ctx),
            "{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"b\": \"é\"\n}");
  EXPECT_EQ(Render("{{ msgs | selectattr('role', 'equalto', 'tool') | list | length }} "
                   "{{ msgs | map(attribute='role') | join(',') }} {{ msgs | rejectattr('role', 'eq', 'user') | first }}",
                   ctx),
            "1 user,tool {'role': 'tool', 'content': 'x'}");
  EXPECT_EQ(Render("{{ undefined_thing | default('d') }} {{ '' | default('e', true) }} {{ [3, 1, 2] | sort }} "
                   "{{ [1, 2, 2] | unique | list }} {{ [1, 2] | sum }} {{ 'x' | upper }} {{ 2.567 | round(1) }}"),
            "d e [1, 2, 3] [1, 2] 3 X 2.6");
  EXPECT_EQ(Render("{{ '%s has %d items (%r) 100%%' | format('cart', 3, 'x') }}"), "cart has 3 items ('x') 100%");
  EXPECT_EQ(Render("{{ x is defined }} {{ y is none }} {{ 's' is string }} {{ {} is mapping }} {{ [] is iterable }} "
                   "{{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ false is false }} {{ 1 is number }} {{ x is not defined }}",
                   json{{"y", nullptr}}),
            "False True True True True True True True True True");
  EXPECT_EQ(Render("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
}

TEST(ChatTemplateTest, WhitespaceControlAndTransformersTrimming) {
  // trim_blocks + lstrip_blocks: block lines vanish entirely.
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(Render("{{- ' x ' -}}\n\n{# comment #}\n{{ 'y' }}"), " x y");
  EXPECT_EQ(Render("{{ '%}' }}{{ {'a': {'b': 1}}['a']['b'] }}"), "%}1");
  EXPECT_EQ(Render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(ChatTemplateTest, ErrorsNameTheLine) {
  absl::Status s = RenderStatus("line one\n{% if %}\n");
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s;
  s = RenderStatus("a\nb\n{{ raise_exception('bad role') }}");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("line 3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bad role"), std::string::npos) << s;
  s = RenderStatus("{{ x | no_such_filter }}");
  EXPECT_NE(s.message().find("no_such_filter"), std::string::npos) << s;
  s = RenderStatus("{% for x in xs %}");
  EXPECT_FALSE(s.ok());
  s = RenderStatus("{{ 'a' + 1 }}");
  EXPECT_NE(s.message().find("line 1"), std::string::npos) << s;
  s = RenderStatus("{% set d = {} %}{% set d.x = 1 %}");
  EXPECT_NE(s.message().find("namespace"), std::string::npos) << s;
  s = RenderStatus("{{ 'unterminated }}");
  EXPECT_FALSE(s.ok());
  s = RenderStatus("{% include 'other.jinja' %}");
  EXPECT_NE(s.message().find("include"), std::string::npos) << s;
  // A separator that is not a string is Python's TypeError, not a loop
  // that splits forever.
  for (const char* call : {"'a b'.split(1)", "'a b'.rsplit(true, 1)", "'a b'.split(sep=[' '])"}) {
    s = RenderStatus(absl::StrCat("\n{{ ", call, " }}"));
    EXPECT_NE(s.message().find("line 2"), std::string::npos) << call << ": " << s;
    EXPECT_NE(s.message().find("separator must be a string or None"), std::string::npos) << call << ": " << s;
  }
  EXPECT_EQ(Render("{{ 'a b'.split(none) }} {{ 'a,b,c'.rsplit(',', 1) }}"), "['a', 'b'] ['a,b', 'c']");
}

TEST(ChatTemplateTest, ResourceLimitsStopHostileTemplates) {
  ChatTemplateLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 16;
  small.max_call_depth = 16;
  const auto start = std::chrono::steady_clock::now();
  // Nested loops far beyond the step budget.
  absl::Status s = RenderStatus("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                                json::object(), small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // Output growth.
  s = RenderStatus("{% for i in range(10000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", json::object(), small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // String blow-up without output.
  s = RenderStatus("{% set s = 'x' * 1000000000000 %}", json::object(), small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  s = RenderStatus("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                   json::object(), small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // Unbounded recursion.
  s = RenderStatus("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", json::object(), small);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recursion"), std::string::npos) << s;
  // Re-reading a huge message in a loop is bounded too.
  const json big = {{"content", std::string(1 << 20, 'x')}};
  s = RenderStatus("{% for i in range(100000) %}{% if content %}{% endif %}{% endfor %}", big, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  s = RenderStatus("{% for i in range(100000) %}{{ content[i] }}{% endfor %}", big, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // A huge range is refused up front rather than allocated.
  s = RenderStatus("{{ range(1000000000000) | length }}", json::object(), small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // Deeply nested expressions in the template source.
  s = RenderStatus("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  EXPECT_FALSE(s.ok());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
}

TEST(ChatTemplateTest, MessageContentIsNeverTemplateCode) {
  const json ctx = {{"messages", {{{"role", "user"}, {"content", "{{ 7 * 7 }} {% raw %} {# c #}"}}}}};
  EXPECT_EQ(Render("{% for m in messages %}{{ m.content }}{% endfor %}", ctx), "{{ 7 * 7 }} {% raw %} {# c #}");
}

// Copying or converting JSON recurses: 50,000 levels of "[" in a message
// overflowed the stack inside Apply (chat_messages_fuzzer regression
// deep_messages_overflowed_the_stack). Deep input is refused instead.
TEST(ChatTemplateTest, DeeplyNestedInputIsRefusedNotRecursedInto) {
  auto t = ChatTemplate::Parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  auto nested = [](int depth) {
    json v = "x";
    for (int i = 0; i < depth; ++i) v = json::array({std::move(v)});
    return v;
  };
  json ok = json::array({{{"role", "user"}, {"content", nested(ChatTemplate::kMaxJsonDepth - 2)}}});
  EXPECT_TRUE((*t)->Apply(ok, {}).ok());
  // Built by moves only: a copy of it would recurse as deep.
  json message = json::object();
  message["role"] = "user";
  message["content"] = nested(50000);
  json deep = json::array();
  deep.push_back(std::move(message));
  auto r = (*t)->Apply(deep, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("messages nest more than"), absl::string_view::npos) << r.status();
  ChatTemplateOptions tools;
  tools.tools = json::array({nested(100)});
  EXPECT_NE((*t)->Apply(ok, tools).status().message().find("tools nest"), absl::string_view::npos);
  EXPECT_FALSE((*t)->Render({{"x", nested(100)}}).ok());
}

TEST(ChatTemplateTest, TinyTokenizerConfigTemplate) {
  // The template make-tiny ships, read the way the scheduler reads it.
  auto t = ChatTemplate::FromTokenizerConfig(TinyTokenizerConfigJson());
  ASSERT_TRUE(t.ok()) << t.status();
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "2+2?"}}};
  ChatTemplateOptions opts;
  auto out = (*t)->Apply(messages, opts);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[gMASK]<sop><|system|>\nBe brief.<|user|>\n2+2?<|assistant|>\n<think></think>\n");
  opts.add_generation_prompt = false;
  out = (*t)->Apply(messages, opts);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "[gMASK]<sop><|system|>\nBe brief.<|user|>\n2+2?");
  EXPECT_EQ((*t)->eos_token(), "<|endoftext|>");
  // The copy under tests/text/data/templates (used by the parity test) is
  // the same template.
  auto file = ReadFileToString(std::string(SPAR_SOURCE_DIR) + "/tests/text/data/templates/tiny.jinja");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, (*t)->source());
}

TEST(ChatTemplateTest, Glm5TemplateThinkingAndTools) {
  auto t = ChatTemplate::FromFile(std::string(SPAR_SOURCE_DIR) + "/tests/text/data/templates/glm5.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  const json messages = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Q"}}};
  ChatTemplateOptions opts;
  auto on = (*t)->Apply(messages, opts);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(*on, "[gMASK]<sop><|system|>S<|user|>Q<|assistant|><think>");
  opts.kwargs = {{"enable_thinking", false}};
  auto off = (*t)->Apply(messages, opts);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, "[gMASK]<sop><|system|>S<|user|>Q<|assistant|></think>");
  opts.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}])");
  auto tools = (*t)->Apply(messages, opts);
  ASSERT_TRUE(tools.ok());
  // Key order is the client's, not sorted.
  EXPECT_NE(tools->find(R"({"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}})"),
            std::string::npos)
      << *tools;
}

}  // namespace
}  // namespace spar
