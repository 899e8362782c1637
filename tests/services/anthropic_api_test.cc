// The Anthropic Messages API's pure layers: request bodies -> the chat
// request model (messages for the template, tools, thinking, tool_choice,
// sampling), with errors naming the field; generation updates -> the
// documented event sequence and the Message, which agree.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/common/status_field.h"
#include "services/http/anthropic_request.h"
#include "services/http/anthropic_response.h"

namespace spar::http {
namespace {

TEST(AnthropicRequestTest, MessagesBecomeTheChatModel) {
  auto r = ParseAnthropicRequest(R"({"model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
      "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5, "metadata": {"user_id": "u"},
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object",
                 "properties": {"city": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}],
      "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool", "signature": "s"},
                                          {"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21C"}]},
                                     {"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral"}}]}]})",
                                 false);
  ASSERT_TRUE(r.ok()) << r.status();
  const Json& m = r->messages;
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["reasoning_content"], "use the tool");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(m[3]["content"], "21C");
  EXPECT_EQ(m[4]["content"], "Thanks");
  EXPECT_EQ(r->template_options.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r->template_options.kwargs["enable_thinking"], false);  // Anthropic's default
  EXPECT_EQ(r->params.stop_strings, std::vector<std::string>{"END"});
  EXPECT_EQ(*r->params.max_tokens, 64);
  EXPECT_EQ(r->params.sampling.top_k, 5);
  EXPECT_FALSE(r->constraint);
}

TEST(AnthropicRequestTest, ThinkingAndToolChoices) {
  const std::string base = R"("model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "a", "input_schema": {"type": "object"}}, {"name": "b", "input_schema": {"type": "object"}}])";
  auto on = ParseAnthropicRequest("{" + base + R"(, "thinking": {"type": "enabled", "budget_tokens": 2048}})", false);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->template_options.kwargs["enable_thinking"], true);
  auto any = ParseAnthropicRequest("{" + base + R"(, "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})", false);
  ASSERT_TRUE(any.ok());
  ASSERT_TRUE(any->constraint);
  EXPECT_EQ(any->constraint->spec.tools.size(), 2u);
  EXPECT_FALSE(any->constraint->spec.parallel);
  auto tool = ParseAnthropicRequest("{" + base + R"(, "tool_choice": {"type": "tool", "name": "b"}})", false);
  ASSERT_TRUE(tool.ok());
  ASSERT_EQ(tool->constraint->spec.tools.size(), 1u);
  EXPECT_EQ(tool->constraint->spec.tools[0].path, "tools[1].input_schema");
  auto none = ParseAnthropicRequest("{" + base + R"(, "tool_choice": {"type": "none"}})", false);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tool_choice_none);
  auto count = ParseAnthropicRequest(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", true);
  EXPECT_TRUE(count.ok()) << count.status();
}

TEST(AnthropicRequestTest, BadRequestsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})", "model"},
      {R"({"model": "m", "max_tokens": 5, "messages": []})", "messages"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role"},
      {R"({"model": "m", "max_tokens": 5, "frobnicate": 1, "messages": [{"role": "user", "content": "x"}]})", "frobnicate"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
       "tools[0].type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})",
       "tools[0].input_schema"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}})",
       "tool_choice"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "on"}})",
       "thinking.type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "END"})",
       "stop_sequences"},
  };
  for (const auto& [body, field] : cases) {
    auto r = ParseAnthropicRequest(body, false);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(FieldOf(r.status()).value_or("<none>"), field) << body << ": " << r.status();
  }
}

GenerationUpdate Update(const std::string& text, int tokens, std::optional<FinishInfo> finish = std::nullopt) {
  GenerationUpdate u;
  u.output.text = text;
  u.output.token_ids.assign(tokens, 1);
  u.output.finish = std::move(finish);
  return u;
}

std::vector<std::string> Types(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const SseEvent& e : events) {
    EXPECT_EQ(e.data["type"], e.name);
    std::string t = e.name;
    if (e.name == "content_block_delta") t += ":" + e.data["delta"]["type"].get<std::string>();
    if (e.name == "content_block_start") t += ":" + e.data["content_block"]["type"].get<std::string>();
    out.push_back(t);
  }
  return out;
}

TEST(AnthropicResponseTest, ThinkingTextAndToolUseInTheDocumentedOrder) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  const ChatOutputSyntax syntax{.reasoning = true, .starts_in_reasoning = true, .tool_calls = true};
  AnthropicMessageBuilder b("msg_abc", "tiny", syntax, &tools);
  std::vector<SseEvent> all = b.Start(12);
  for (const std::string& piece : {std::string("I should"), std::string(" check.</think>Let me look."),
                                   std::string("\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"),
                                   std::string("</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>")}) {
    for (SseEvent& e : b.Add(Update(piece, 2))) all.push_back(std::move(e));
  }
  FinishInfo f;
  f.reason = SeqFinishReason::kStop;
  for (SseEvent& e : b.Add(Update("", 0, f))) all.push_back(std::move(e));
  const std::vector<std::string> want = {
      "message_start", "ping",
      "content_block_start:thinking", "content_block_delta:thinking_delta", "content_block_delta:thinking_delta",
      "content_block_stop",
      "content_block_start:text", "content_block_delta:text_delta", "content_block_stop",
      "content_block_start:tool_use", "content_block_delta:input_json_delta", "content_block_stop",
      "message_delta", "message_stop"};
  EXPECT_EQ(Types(all), want);
  EXPECT_EQ(all[0].data["message"]["usage"]["input_tokens"], 12);
  const Json m = b.Message();
  ASSERT_EQ(m["content"].size(), 3u) << m.dump();
  EXPECT_EQ(m["content"][0]["thinking"], "I should check.");
  EXPECT_EQ(m["content"][1]["text"], "Let me look.");
  EXPECT_EQ(m["content"][2]["name"], "get_weather");
  EXPECT_EQ(m["content"][2]["input"], Json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(m["content"][2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"]["output_tokens"], 8);
  const SseEvent& delta = all[all.size() - 2];
  EXPECT_EQ(delta.data["delta"]["stop_reason"], "tool_use");
  for (const SseEvent& e : all) {
    if (e.name == "content_block_delta" && e.data["delta"]["type"] == "input_json_delta") {
      EXPECT_EQ(Json::parse(e.data["delta"]["partial_json"].get<std::string>()), m["content"][2]["input"]);
    }
  }
}

TEST(AnthropicResponseTest, ThinkingOnAlwaysOpensWithAThinkingBlock) {
  const Json tools = Json::array();
  const ChatOutputSyntax syntax{.reasoning = true, .starts_in_reasoning = true};
  AnthropicMessageBuilder b("msg_t", "tiny", syntax, &tools);
  b.Start(3);
  std::vector<SseEvent> all = b.Add(Update("</think>42", 2));
  FinishInfo f;
  f.reason = SeqFinishReason::kStop;
  for (SseEvent& e : b.Add(Update("", 0, f))) all.push_back(std::move(e));
  EXPECT_EQ(Types(all), (std::vector<std::string>{"content_block_start:thinking", "content_block_stop",
                                                  "content_block_start:text", "content_block_delta:text_delta",
                                                  "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(b.Message()["content"][0]["thinking"], "");
  EXPECT_EQ(b.Message()["content"][1]["text"], "42");
}

TEST(AnthropicResponseTest, StopReasons) {
  const Json tools = Json::array();
  struct Case {
    FinishInfo finish;
    const char* reason;
  };
  FinishInfo length;
  length.reason = SeqFinishReason::kLength;
  FinishInfo seq;
  seq.reason = SeqFinishReason::kStop;
  seq.stop_string = "END";
  FinishInfo eos;
  eos.reason = SeqFinishReason::kStop;
  eos.eos_token_id = 0;
  for (const Case& c : {Case{length, "max_tokens"}, Case{seq, "stop_sequence"}, Case{eos, "end_turn"}}) {
    AnthropicMessageBuilder b("msg_x", "tiny", ChatOutputSyntax(), &tools);
    b.Start(1);
    b.Add(Update("hello", 1));
    const auto events = b.Add(Update("", 0, c.finish));
    EXPECT_EQ(b.Message()["stop_reason"], c.reason);
    EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_reason"], c.reason);
    if (c.finish.stop_string) EXPECT_EQ(b.Message()["stop_sequence"], "END");
    EXPECT_EQ(b.Message()["content"][0]["text"], "hello");
  }
}

}  // namespace
}  // namespace spar::http
