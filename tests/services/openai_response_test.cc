// The OpenAI response layer: scheduler updates -> SSE chunks and response
// bodies in OpenAI's shapes (chat and completions, n > 1, several prompts,
// logprobs, echo, usage), with the tiny model's real tokenizer.
#include "services/http/openai_response.h"

#include <cmath>

#include "engine/tiny_tokenizer.h"
#include "gtest/gtest.h"

namespace spar::http {
namespace {

const Tokenizer& Tiny() {
  static const Tokenizer* t = [] {
    auto tok = Tokenizer::FromJson(TinyTokenizerJson());
    EXPECT_TRUE(tok.ok()) << tok.status();
    return tok->release();
  }();
  return *t;
}

std::vector<int32_t> Ids(const std::string& text) {
  auto ids = Tiny().Encode(text, false);
  EXPECT_TRUE(ids.ok());
  return *ids;
}

GenerationUpdate Update(int index, const std::string& text, std::vector<int32_t> ids) {
  GenerationUpdate u;
  u.request_id = "r";
  u.output.index = index;
  u.output.text = text;
  u.output.token_ids = std::move(ids);
  for (size_t i = 0; i < u.output.token_ids.size(); ++i) u.output.logprobs.push_back(-0.5f * (i + 1));
  return u;
}

FinishInfo Finish(SeqFinishReason reason, int tokens) {
  FinishInfo f;
  f.reason = reason;
  f.num_output_tokens = tokens;
  return f;
}

ResponseOptions Options(ApiKind kind, bool stream) {
  ResponseOptions o;
  o.kind = kind;
  o.id = kind == ApiKind::kChat ? "chatcmpl-1" : "cmpl-1";
  o.model = "tiny";
  o.created = 1700000000;
  o.stream = stream;
  return o;
}

TEST(OpenAiResponseTest, CompletionBodyWithTwoChoicesAndUsage) {
  ResponseOptions o = Options(ApiKind::kCompletion, false);
  o.n = 2;
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(o, &tokens);
  GenerationUpdate first = Update(1, "the", Ids("the"));
  first.prompt = PromptInfo{4, {}};
  EXPECT_TRUE(b.Add(0, first).empty());  // not streaming: no chunks
  GenerationUpdate a = Update(0, "and", Ids("and"));
  a.output.finish = Finish(SeqFinishReason::kLength, 1);
  b.Add(0, a);
  GenerationUpdate c = Update(1, "", {});
  c.output.finish = Finish(SeqFinishReason::kStop, 1);
  c.output.finish->stop_string = "\n";
  c.usage = UsageInfo{4, 2};
  b.Add(0, c);
  const Json r = b.Response();
  EXPECT_EQ(r["id"], "cmpl-1");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "tiny");
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], "and");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][1]["text"], "the");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][1]["stop_reason"], "\n");
  EXPECT_EQ(r["usage"], (Json{{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
}

TEST(OpenAiResponseTest, ChatStreamOpensWithTheRoleAndEndsWithFinishAndUsage) {
  ResponseOptions o = Options(ApiKind::kChat, true);
  o.include_usage = true;
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(o, &tokens);
  GenerationUpdate u1 = Update(0, "Hel", {72, 101, 108});
  u1.prompt = PromptInfo{9, {}};
  std::vector<Json> chunks = b.Add(0, u1);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(chunks[0]["usage"].is_null());  // present and null until the end, as OpenAI does
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
  // Tokens whose text is still held back make no chunk without logprobs.
  EXPECT_TRUE(b.Add(0, Update(0, "", {111})).empty());
  GenerationUpdate end = Update(0, "lo", {});
  end.output.finish = Finish(SeqFinishReason::kStop, 4);
  end.output.finish->eos_token_id = 300;
  end.usage = UsageInfo{9, 4};
  chunks = b.Add(0, end);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(chunks[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chunks[0]["choices"][0]["stop_reason"].is_null());  // EOS
  const Json usage = b.UsageChunk();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(usage["usage"]["total_tokens"], 13);
  // The same builder also holds the whole answer.
  EXPECT_EQ(b.Response()["choices"][0]["message"]["content"], "Hello");
}

TEST(OpenAiResponseTest, ChatLogprobsCarryTokensBytesAndAlternatives) {
  ResponseOptions o = Options(ApiKind::kChat, false);
  o.logprobs = true;
  o.top_logprobs = 2;
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(o, &tokens);
  const std::vector<int32_t> ids = Ids("é");  // byte-level: one or two tokens
  GenerationUpdate u = Update(0, "é", ids);
  const int32_t a = Ids("A")[0];
  for (size_t i = 0; i < ids.size(); ++i) u.output.top.push_back({{ids[i], -0.5f}, {a, -1.5f}});
  u.output.logprobs[0] = -INFINITY;
  u.output.finish = Finish(SeqFinishReason::kLength, static_cast<int>(ids.size()));
  b.Add(0, u);
  const Json content = b.Response()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), ids.size());
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (const Json& byte : content[i]["bytes"]) bytes.push_back(static_cast<char>(byte.get<int>()));
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[i]["top_logprobs"][1]["token"], "A");
    EXPECT_EQ(content[i]["top_logprobs"][1]["logprob"], -1.5);
    EXPECT_EQ(content[i]["top_logprobs"][1]["bytes"], Json::array({65}));
  }
  EXPECT_EQ(bytes, "é");  // the raw bytes reassemble the character
  EXPECT_EQ(content[0]["logprob"], -9999.0);  // -inf has no JSON form
}

TEST(OpenAiResponseTest, CompletionLogprobsAndEchoAcrossTwoPrompts) {
  ResponseOptions o = Options(ApiKind::kCompletion, true);
  o.num_prompts = 2;
  o.logprobs = true;
  o.echo = true;
  o.return_token_ids = true;
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(o, &tokens);
  b.SetEchoText(1, "Say: ");
  GenerationUpdate u = Update(0, "the cat", Ids("the cat"));
  u.prompt = PromptInfo{2, {7, 8}};
  u.output.finish = Finish(SeqFinishReason::kLength, static_cast<int>(u.output.token_ids.size()));
  std::vector<Json> chunks = b.Add(1, u);
  ASSERT_EQ(chunks.size(), 1u);
  const Json& choice = chunks[0]["choices"][0];
  EXPECT_EQ(choice["index"], 1);  // prompt 1, n = 1
  EXPECT_EQ(choice["text"], "Say: the cat");
  EXPECT_EQ(choice["prompt_token_ids"], Json::array({7, 8}));
  EXPECT_EQ(choice["token_ids"], Json(u.output.token_ids));
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), u.output.token_ids.size());
  std::string joined;
  for (const Json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "the cat");
  EXPECT_EQ(lp["text_offset"][0], 5);  // after the echoed "Say: "
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);  // logprobs: 0 -> the sampled token only
  const Json body = b.Response();
  EXPECT_EQ(body["choices"][1]["text"], "Say: the cat");
  EXPECT_EQ(body["choices"][0]["text"], "");
  EXPECT_TRUE(body["choices"][0]["finish_reason"].is_null());
}

TEST(OpenAiResponseTest, TokenStringsWithoutATokenizerUseIds) {
  TokenStrings none(nullptr);
  EXPECT_EQ(none.Text(42), "token_id:42");
  EXPECT_EQ(none.Bytes(42), "");
  TokenStrings tiny(&Tiny());
  EXPECT_EQ(tiny.Text(1 << 20), "token_id:1048576");
}

// ---- reasoning and tool calls (chat_output.h) ----

TEST(ChatOutputTest, ParserFlagsAndTheRequestDecideTheSyntax) {
  auto glm = ChatParsersFor("auto", "auto", "glm_moe_dsa");
  ASSERT_TRUE(glm.ok());
  EXPECT_TRUE(glm->reasoning && glm->tool_calls);
  auto ds = ChatParsersFor("auto", "auto", "deepseek_v32");
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE(ds->reasoning);
  EXPECT_TRUE(ds->tool_calls);
  EXPECT_EQ(ds->format, ToolCallFormat::kDsml);  // DeepSeek's DSML calls, not GLM's XML
  auto dsml = ChatParsersFor("none", "deepseek_v32", "glm_moe_dsa");
  ASSERT_TRUE(dsml.ok());
  EXPECT_EQ(dsml->format, ToolCallFormat::kDsml);
  auto off = ChatParsersFor("none", "none", "glm_moe_dsa");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->reasoning || off->tool_calls);
  auto bad = ChatParsersFor("hermes", "auto", "glm_moe_dsa");
  EXPECT_NE(std::string(bad.status().message()).find("--reasoning-parser"), std::string::npos) << bad.status();
  EXPECT_FALSE(ChatParsersFor("auto", "qwen", "glm_moe_dsa").ok());

  const ChatParsers both{true, true, ToolCallFormat::kGlm};
  const ChatOutputSyntax on = ChatSyntaxFor(both, true, false, "[gMASK]<sop><|user|>hi<|assistant|><think>");
  EXPECT_TRUE(on.reasoning && on.starts_in_reasoning && on.tool_calls);
  const ChatOutputSyntax thinking_off = ChatSyntaxFor(both, false, false, "<|user|>hi<|assistant|></think>");
  EXPECT_TRUE(thinking_off.reasoning);
  EXPECT_FALSE(thinking_off.starts_in_reasoning);
  EXPECT_FALSE(thinking_off.tool_calls);  // no tools in the request
  EXPECT_FALSE(ChatSyntaxFor(both, true, /*tool_choice_none=*/true, "<think>").tool_calls);
}

TEST(ChatOutputTest, ArgumentsAreTypedByTheToolsSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"zip": {"type": "string"}, "n": {"type": "integer"},
      "opts": {"type": "object"}, "maybe": {"type": ["string", "null"]}}}}}])");
  ToolCallText call;
  call.name = "f";
  call.args = {{"zip", "01234"}, {"n", "7"}, {"opts", R"({"a": [1, true]})"}, {"maybe", "null"},
               {"free", "3.5"}, {"words", "not json"}};
  const Json j = ToolCallJson(call, tools, "call_1");
  EXPECT_EQ(j["id"], "call_1");
  EXPECT_EQ(j["type"], "function");
  EXPECT_EQ(j["function"]["name"], "f");
  const Json args = Json::parse(j["function"]["arguments"].get<std::string>());
  EXPECT_EQ(args["zip"], "01234");  // a string parameter stays a string
  EXPECT_EQ(args["n"], 7);
  EXPECT_EQ(args["opts"], Json::parse(R"({"a": [1, true]})"));
  EXPECT_TRUE(args["maybe"].is_null());  // string or null: the JSON it spells
  EXPECT_EQ(args["free"], 3.5);          // not in the schema: JSON when it parses
  EXPECT_EQ(args["words"], "not json");  // else the text
  // Keys keep the model's order.
  EXPECT_EQ(j["function"]["arguments"].get<std::string>().rfind("{\"zip\":", 0), 0u);
}

TEST(ChatOutputTest, DsmlStringFlagsDecideOverTheSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}}}])");
  ToolCallText call;
  call.name = "f";
  call.args = {{"n", "7"}, {"s", "[1]"}, {"j", "{\"a\": 1}"}, {"bad", "not json"}, {"free", "2"}};
  call.arg_string = {true, false, false, false, std::nullopt};
  const Json args = Json::parse(ToolCallJson(call, tools, "c")["function"]["arguments"].get<std::string>());
  EXPECT_EQ(args["n"], "7");             // string="true" wins over the schema's integer
  EXPECT_EQ(args["s"], Json::parse("[1]"));  // string="false": the JSON
  EXPECT_EQ(args["j"], Json::parse(R"({"a": 1})"));
  EXPECT_EQ(args["bad"], "not json");    // string="false" but not JSON: kept as text
  EXPECT_EQ(args["free"], 2);            // no flag: as GLM
}

ResponseOptions ToolChat(bool stream) {
  ResponseOptions o = Options(ApiKind::kChat, stream);
  o.chat_syntax = ChatOutputSyntax{.reasoning = true, .starts_in_reasoning = true, .tool_calls = true};
  o.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  return o;
}

// The model's text in pieces that cut every tag.
const std::vector<std::string> kToolTurn = {"Need the ", "weather</th", "ink>Checking.", "<tool_",
                                            "call>get_weather<arg_key>city</arg_key><arg_value>Par",
                                            "is</arg_value></tool_call>"};

TEST(ChatOutputTest, StreamSendsReasoningContentAndToolCallsAsTheyComplete) {
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(ToolChat(true), &tokens);
  std::string reasoning, content;
  Json calls = Json::array();
  Json last;
  for (size_t i = 0; i < kToolTurn.size(); ++i) {
    GenerationUpdate u = Update(0, kToolTurn[i], {65});
    u.output.logprobs.clear();
    if (i + 1 == kToolTurn.size()) u.output.finish = Finish(SeqFinishReason::kStop, 6);
    for (const Json& chunk : b.Add(0, u)) {
      const Json& d = chunk["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const Json& c : d["tool_calls"]) calls.push_back(c);
      }
      EXPECT_EQ(d.dump().find("</th"), std::string::npos) << d;  // never half a tag
      last = chunk;
    }
  }
  EXPECT_EQ(reasoning, "Need the weather");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["id"], "call_1_0_0");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatOutputTest, BodyHoldsTheSameMessage) {
  TokenStrings tokens(&Tiny());
  ResponseBuilder b(ToolChat(false), &tokens);
  std::string all;
  for (const std::string& piece : kToolTurn) all += piece;
  GenerationUpdate u = Update(0, all, {65});
  u.output.finish = Finish(SeqFinishReason::kStop, 6);
  b.Add(0, u);
  const Json choice = b.Response()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"], "Need the weather");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["id"], "call_1_0_0");
  EXPECT_FALSE(choice["message"]["tool_calls"][0].contains("index"));

  // Only a tool call (whitespace around it): content null, as OpenAI sends.
  ResponseBuilder only(ToolChat(false), &tokens);
  GenerationUpdate v = Update(0, "</think>\n<tool_call>get_weather</tool_call>\n", {65});
  v.output.finish = Finish(SeqFinishReason::kStop, 3);
  only.Add(0, v);
  const Json m = only.Response()["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null()) << m;
  EXPECT_TRUE(m["reasoning_content"].is_null()) << m;
  // Cut off by the length limit inside a call: the text is kept, finish "length".
  ResponseBuilder cut(ToolChat(false), &tokens);
  GenerationUpdate w = Update(0, "</think>ok <tool_call>get_weather<arg_key>ci", {65});
  w.output.finish = Finish(SeqFinishReason::kLength, 3);
  cut.Add(0, w);
  const Json c = cut.Response()["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["message"]["content"], "ok <tool_call>get_weather<arg_key>ci");
  EXPECT_TRUE(c["message"]["tool_calls"].empty());
}

}  // namespace
}  // namespace spar::http
