// The OpenAI request layer: JSON bodies -> validated GenerateParams. Every
// bad field is an INVALID_ARGUMENT naming it (message and param), with the
// gRPC API's rules applied under the OpenAI field names.
#include "services/http/openai_request.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "engine/tiny_tokenizer.h"
#include "gtest/gtest.h"
#include "services/common/status_field.h"
#include "services/http/api_error.h"

namespace spar::http {
namespace {

ApiLimits Limits() {
  ApiLimits l;
  l.vocab_size = 320;
  l.max_model_len = 4096;
  l.served_model_name = "tiny";
  return l;
}

std::unique_ptr<ChatTemplate> TinyTemplate() {
  auto t = ChatTemplate::FromTokenizerConfig(TinyTokenizerConfigJson());
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::unique_ptr<ChatTemplate> Glm5Template() {
  auto t = ChatTemplate::FromFile(std::string(SPAR_SOURCE_DIR) + "/tests/text/data/templates/glm5.jinja");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

absl::StatusOr<std::vector<GenerateParams>> Build(bool chat, const std::string& body) {
  auto r = chat ? ParseChatRequest(body) : ParseCompletionRequest(body);
  if (!r.ok()) return r.status();
  auto tmpl = TinyTemplate();
  return BuildGenerateParams(*r, tmpl.get(), Limits());
}

TEST(OpenAiRequestTest, CompletionDefaultsAreOpenAis) {
  auto r = ParseCompletionRequest(R"({"model":"tiny","prompt":"hello"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kind, ApiKind::kCompletion);
  EXPECT_EQ(r->text_prompts, std::vector<std::string>{"hello"});
  EXPECT_EQ(*r->params.max_tokens, 16);  // the legacy completions default
  EXPECT_EQ(r->params.n, 1);
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
}

TEST(OpenAiRequestTest, CompletionFieldsMapOntoGenerateParams) {
  auto r = ParseCompletionRequest(R"({"prompt":[[5,6,7],[8]],"max_tokens":9,"temperature":0.5,"top_p":0.9,
      "top_k":-1,"min_p":0.1,"repetition_penalty":1.1,"frequency_penalty":0.5,"presence_penalty":-0.5,"n":2,
      "best_of":2,"seed":-1,"stop":"\n","logprobs":3,"stream":true,"stream_options":{"include_usage":true},
      "ignore_eos":true,"stop_token_ids":[7],"include_stop_str_in_output":true,"skip_special_tokens":false,
      "return_token_ids":true,"user":"u","logit_bias":{},"suffix":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->id_prompts.size(), 2u);
  EXPECT_EQ(r->id_prompts[0], (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(r->stream && r->include_usage && r->logprobs && r->return_token_ids);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(*r->params.seed, ~uint64_t{0});  // OpenAI's signed seed, same bits
  EXPECT_EQ(r->params.stop_strings, std::vector<std::string>{"\n"});
  auto tmpl = TinyTemplate();
  auto ps = BuildGenerateParams(*r, tmpl.get(), Limits());
  ASSERT_TRUE(ps.ok()) << ps.status();
  ASSERT_EQ(ps->size(), 2u);
  const GenerateParams& p = (*ps)[1];
  EXPECT_EQ(p.prompt_ids, std::vector<int32_t>{8});
  EXPECT_EQ(p.sampling.top_k, 0);  // -1 = off
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(*p.max_tokens, 9);
  EXPECT_TRUE(p.ignore_eos && p.include_stop_strings && !p.skip_special_tokens && p.output_logprobs);
  EXPECT_EQ(p.top_logprobs, 3);
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(p.echo_prompt_ids);
  EXPECT_EQ(p.prompt_field, "prompt[1]");
}

TEST(OpenAiRequestTest, ChatRendersTheTemplateWithEveryTurn) {
  const std::string body = R"({"model":"tiny","messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]},
      {"role":"assistant","content":"Hello!","refusal":null},
      {"role":"user","content":"Again?"}],
      "max_completion_tokens":7,"max_tokens":99,"logprobs":true,"top_logprobs":2})";
  auto ps = Build(true, body);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ASSERT_EQ(ps->size(), 1u);
  const GenerateParams& p = (*ps)[0];
  EXPECT_EQ(*p.text,
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi\nthere<|assistant|>\nHello!<|user|>\nAgain?"
            "<|assistant|>\n<think></think>\n");
  EXPECT_EQ(*p.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(p.max_tokens_field, "max_completion_tokens");
  EXPECT_EQ(p.prompt_field, "messages");
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_FALSE(p.echo_prompt_ids);
}

TEST(OpenAiRequestTest, ChatWithoutGenerationPromptEndsAfterTheLastTurn) {
  auto ps = Build(true, R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false})");
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(*(*ps)[0].text, "[gMASK]<sop><|user|>\nx");
}

TEST(OpenAiRequestTest, ChatToolsToolCallsAndTemplateKwargsReachTheGlm5Template) {
  auto r = ParseChatRequest(R"({"messages":[
      {"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"22C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
      "tool_choice":"auto","chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_TRUE(r.ok()) << r.status();
  // Arguments arrive as a JSON string and reach the template as an object.
  EXPECT_EQ(r->messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  auto tmpl = Glm5Template();
  auto ps = BuildGenerateParams(*r, tmpl.get(), Limits());
  ASSERT_TRUE(ps.ok()) << ps.status();
  const std::string& prompt = *(*ps)[0].text;
  auto direct = tmpl->Apply(r->messages, r->template_options);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(prompt, *direct);
  for (const char* part : {"get_weather", "Weather now", "<tool_call>get_weather", "<arg_key>city</arg_key>",
                           "<arg_value>Paris</arg_value>", "<|observation|>", "22C"}) {
    EXPECT_NE(prompt.find(part), std::string::npos) << part << " missing from:\n" << prompt;
  }
  // enable_thinking=false: the generation prompt closes the thinking block.
  EXPECT_TRUE(absl::EndsWith(prompt, "<|assistant|></think>")) << prompt;
  auto thinking = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(thinking.ok());
  auto ps2 = BuildGenerateParams(*thinking, tmpl.get(), Limits());
  ASSERT_TRUE(ps2.ok());
  EXPECT_EQ((*ps2)[0].text->find("</think>"), std::string::npos);
}

TEST(OpenAiRequestTest, EveryBadFieldIsNamed) {
  struct Case {
    bool chat;
    std::string body;
    std::string param;
  };
  const std::string msg = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<Case> cases = {
      {false, R"({"prompt":"x","foo":1})", "foo"},
      {false, R"({"model":5,"prompt":"x"})", "model"},
      {false, R"({})", "prompt"},
      {false, R"({"prompt":""})", "prompt"},
      {false, R"({"prompt":[]})", "prompt"},
      {false, R"({"prompt":{"a":1}})", "prompt"},
      {false, R"({"prompt":[1, 320]})", "prompt[1]"},
      {false, R"({"prompt":[1.5]})", "prompt[0]"},
      {false, R"({"prompt":["a", 3]})", "prompt[1]"},
      {false, R"({"prompt":[[1],[2,-4]]})", "prompt[1][1]"},
      {false, R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {false, R"({"prompt":"x","max_tokens":5000})", "max_tokens"},
      {false, R"({"prompt":"x","max_tokens":"5"})", "max_tokens"},
      {false, R"({"prompt":"x","temperature":-1})", "temperature"},
      {false, R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {false, R"({"prompt":"x","top_p":0})", "top_p"},
      {false, R"({"prompt":"x","top_p":1.5})", "top_p"},
      {false, R"({"prompt":"x","top_k":-2})", "top_k"},
      {false, R"({"prompt":"x","min_p":2})", "min_p"},
      {false, R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty"},
      {false, R"({"prompt":"x","frequency_penalty":3})", "frequency_penalty"},
      {false, R"({"prompt":"x","presence_penalty":-3})", "presence_penalty"},
      {false, R"({"prompt":"x","n":0})", "n"},
      {false, R"({"prompt":"x","n":17})", "n"},
      {false, R"({"prompt":"x","n":2,"best_of":3})", "best_of"},
      {false, R"({"prompt":"x","seed":"1"})", "seed"},
      {false, R"({"prompt":"x","seed":18446744073709551615})", "seed"},
      {false, R"({"prompt":"x","stop":""})", "stop[0]"},
      {false, R"({"prompt":"x","stop":[1]})", "stop[0]"},
      {false, R"({"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "stop"},
      {false, R"({"prompt":"x","stop_token_ids":[999]})", "stop_token_ids[0]"},
      {false, R"({"prompt":"x","logprobs":21})", "logprobs"},
      {false, R"({"prompt":"x","logprobs":true})", "logprobs"},
      {false, R"({"prompt":"x","echo":true,"logprobs":1})", "echo"},
      {false, R"({"prompt":"x","suffix":"y"})", "suffix"},
      {false, R"({"prompt":"x","stream":"yes"})", "stream"},
      {false, R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {false, R"({"prompt":"x","stream":true,"stream_options":{"x":1}})", "stream_options.x"},
      {false, R"({"prompt":"x","logit_bias":{"5":1}})", "logit_bias"},
      {false, R"({"prompt":"x","min_tokens":3})", "min_tokens"},
      {false, R"({"prompt":"x","ignore_eos":1})", "ignore_eos"},
      {true, R"({"prompt":"x",)" + msg + "}", "prompt"},
      {true, R"({})", "messages"},
      {true, R"({"messages":[]})", "messages"},
      {true, R"({"messages":"hi"})", "messages"},
      {true, R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {true, R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {true, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {true, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       "messages[0].content[0].type"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text"},
      {true, R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})", "messages[0].tool_calls"},
      {true, R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {true, R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {true, R"({"messages":[{"role":"user","content":"x","tool_call_id":"a"}]})", "messages[0].tool_call_id"},
      {true, R"({"messages":[{"role":"user","content":"x","frobnicate":1}]})", "messages[0].frobnicate"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"text","text":"x","colour":"red"}]}]})",
       "messages[0].content[0].colour"},
      {true, R"({)" + msg + R"(,"logprobs":3})", "logprobs"},
      {true, R"({)" + msg + R"(,"top_logprobs":2})", "top_logprobs"},
      {true, R"({)" + msg + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {true, R"({)" + msg + R"(,"max_completion_tokens":0})", "max_completion_tokens"},
      {true, R"({)" + msg + R"(,"max_tokens":-5})", "max_tokens"},
      {true, R"({)" + msg + R"(,"tools":{}})", "tools"},
      {true, R"({)" + msg + R"(,"tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {true, R"({)" + msg + R"(,"tools":[{"type":"code"}]})", "tools[0].type"},
      {true, R"({)" + msg + R"(,"tool_choice":"required"})", "tool_choice"},
      {true, R"({)" + msg + R"(,"response_format":{"type":"xml"}})", "response_format.type"},
      {true, R"({)" + msg + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":[1]}}})",
       "response_format.json_schema.schema"},
      {true, R"({)" + msg + R"(,"response_format":{"type":"json_schema","json_schema":{"colour":1}}})",
       "response_format.json_schema.colour"},
      {true, R"({)" + msg + R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice.function.name"},
      {true, R"({)" + msg + R"(,"tool_choice":"sometimes"})", "tool_choice"},
      {true, R"({)" + msg + R"(,"reasoning_effort":3})", "reasoning_effort"},
      {true, R"({)" + msg + R"(,"chat_template_kwargs":[1]})", "chat_template_kwargs"},
      {true, R"({)" + msg + R"(,"echo":true})", "echo"},
      {true, R"({)" + msg + R"(,"temperature":101})", "temperature"},
  };
  for (const Case& c : cases) {
    auto r = Build(c.chat, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body << ": " << r.status();
    EXPECT_EQ(FieldOf(r.status()).value_or("<none>"), c.param) << c.body << ": " << r.status();
    EXPECT_NE(std::string(r.status().message()).find(c.param), std::string::npos)
        << "expected \"" << c.param << "\" in: " << r.status().message();
    const ApiError e = ApiErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param.value_or(""), c.param);
  }
}

TEST(OpenAiRequestTest, MessageFieldsOfOpenAiAndVllmAreAccepted) {
  // What clients send, and echo back of an earlier answer (OpenAI's
  // message object; vLLM's reasoning_content).
  auto r = ParseChatRequest(R"({"messages":[
      {"role":"system","content":"s","name":"sys"},
      {"role":"user","content":[{"type":"text","text":"q"}],"name":"alice"},
      {"role":"assistant","content":null,"refusal":null,"annotations":[],"audio":null,"function_call":null,
       "reasoning_content":"thought","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"r"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[2]["reasoning_content"], "thought");
  EXPECT_FALSE(r->messages[2].contains("refusal"));  // accepted, not passed to the template
}

TEST(OpenAiRequestTest, BodiesThatAreNotJsonObjects) {
  for (const char* body : {"", "{", "[1,2]", "\"text\"", "{\"prompt\":\"x\"} trailing", "\xff\xfe"}) {
    auto r = ParseCompletionRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(OpenAiRequestTest, ChatWithoutTemplateIsAClearError) {
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(r.ok());
  auto ps = BuildGenerateParams(*r, nullptr, Limits());
  ASSERT_FALSE(ps.ok());
  EXPECT_EQ(ApiErrorFromStatus(ps.status()).http_status, 400);
  EXPECT_NE(std::string(ps.status().message()).find("chat template"), std::string::npos);
}

TEST(ApiErrorTest, StatusCodesMapOntoHttp) {
  EXPECT_EQ(ApiErrorFromStatus(absl::ResourceExhaustedError("queue full")).http_status, 429);
  EXPECT_EQ(ApiErrorFromStatus(absl::ResourceExhaustedError("queue full")).type, "rate_limit_error");
  // A request that can never fit is not retryable: 400, not 429.
  EXPECT_EQ(ApiErrorFromStatus(WithField(absl::ResourceExhaustedError("too big"), "max_tokens")).http_status, 400);
  EXPECT_EQ(ApiErrorFromStatus(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ApiErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(absl::InternalError("x")).http_status, 500);
  EXPECT_EQ(ApiErrorFromStatus(absl::InternalError("x")).type, "server_error");
  EXPECT_EQ(ApiErrorFromStatus(absl::DeadlineExceededError("x")).http_status, 504);
  const std::string body = ApiErrorJson(InvalidRequest("bad \xff byte", "top_p"));
  auto j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_TRUE(j["error"].contains("message"));
}

}  // namespace
}  // namespace spar::http
