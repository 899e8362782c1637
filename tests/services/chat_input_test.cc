// The gRPC API's chat input renders the prompt the OpenAI API renders for
// the same conversation (services/scheduler/chat_input.h), with GLM-5's
// real chat template; bad chat inputs are INVALID_ARGUMENT naming the proto
// field.
#include "services/scheduler/chat_input.h"

#include <google/protobuf/text_format.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/common/status_field.h"
#include "services/http/openai_request.h"
#include "services/scheduler/generation_convert.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;

ApiLimits Limits() {
  ApiLimits l;
  l.vocab_size = 160000;
  l.max_model_len = 1 << 20;
  l.served_model_name = "glm5";
  return l;
}

std::unique_ptr<ChatTemplate> Glm5Template() {
  auto t = ChatTemplate::FromFile(testing::SourcePath("tests/text/data/templates/glm5.jinja"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

v1::GenerateRequest Request(const std::string& text_proto) {
  v1::GenerateRequest r;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text_proto, &r)) << text_proto;
  return r;
}

// The prompt /v1/chat/completions renders for `body`.
std::string HttpPrompt(const Json& body, const ChatTemplate* t) {
  auto request = http::ParseChatRequest(body.dump());
  EXPECT_TRUE(request.ok()) << request.status();
  if (!request.ok()) return "";
  auto params = http::BuildGenerateParams(*request, t, Limits());
  EXPECT_TRUE(params.ok()) << params.status();
  return params.ok() && params->size() == 1 ? *(*params)[0].text : "";
}

std::string GrpcPrompt(const v1::GenerateRequest& r, const ChatTemplate* t) {
  auto p = ParseGenerateRequest(r, Limits(), t);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() && p->text ? *p->text : "";
}

struct Conversation {
  const char* name;
  Json http;              // the /v1/chat/completions body
  std::string grpc;       // the same as a GenerateRequest (text format)
  std::vector<std::string> rendered;  // pieces the prompt must contain
};

TEST(ChatInputTest, RendersWhatTheHttpApiRendersForTheSameConversation) {
  auto t = Glm5Template();
  ASSERT_NE(t, nullptr);
  const Json weather_tool = {
      {"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"description", "Current weather of a city"},
        {"parameters",
         {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}};
  const std::vector<Conversation> conversations = {
      {"one user message",
       {{"messages", {{{"role", "user"}, {"content", "What is 6 times 7?"}}}}},
       R"pb(chat { messages { role: "user" content: "What is 6 times 7?" } })pb",
       {"What is 6 times 7?", "<|assistant|>"}},
      {"multi-turn with a system prompt, earlier reasoning and content parts",
       {{"messages",
         {{{"role", "system"}, {"content", "Answer briefly."}},
          {{"role", "user"}, {"content", "What is 2 plus 2?"}},
          {{"role", "assistant"}, {"content", "4"}, {"reasoning_content", "Two and two make four."}},
          {{"role", "user"},
           {"content", {{{"type", "text"}, {"text", "And times 3?"}}, {{"type", "text"}, {"text", "Be exact."}}}}}}}},
       R"pb(chat {
              messages { role: "system" content: "Answer briefly." }
              messages { role: "user" content: "What is 2 plus 2?" }
              messages { role: "assistant" content: "4" reasoning: "Two and two make four." }
              messages {
                role: "user"
                content_parts { type: "text" text: "And times 3?" }
                content_parts { type: "text" text: "Be exact." }
              }
            })pb",
       {"Answer briefly.", "And times 3?\nBe exact."}},
      {"tools, a tool call with its result, template kwargs",
       {{"messages",
         {{{"role", "user"}, {"content", "Weather in Paris?"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"reasoning_content", "Look it up."},
           {"tool_calls",
            {{{"id", "call_1"},
              {"type", "function"},
              {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C, sunny"}}}},
        {"tools", {weather_tool}},
        {"chat_template_kwargs", {{"enable_thinking", false}}}},
       R"pb(chat {
              messages { role: "user" content: "Weather in Paris?" }
              messages {
                role: "assistant"
                reasoning: "Look it up."
                tool_calls {
                  id: "call_1"
                  type: "function"
                  function { name: "get_weather" arguments: "{\"city\": \"Paris\"}" }
                }
              }
              messages { role: "tool" tool_call_id: "call_1" content: "18 C, sunny" }
              tools {
                type: "function"
                function {
                  name: "get_weather"
                  description: "Current weather of a city"
                  parameters_json: "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}"
                }
              }
              chat_template_kwargs_json: "{\"enable_thinking\": false}"
            })pb",
       {"Current weather of a city", "<think>Look it up.</think>", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>",
        "18 C, sunny"}},
      {"no generation prompt",
       {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello!"}}}},
        {"add_generation_prompt", false}},
       R"pb(chat {
              messages { role: "user" content: "Hi" }
              messages { role: "assistant" content: "Hello!" }
              add_generation_prompt: false
            })pb",
       {"Hello!"}},
  };
  for (const Conversation& c : conversations) {
    const std::string http = HttpPrompt(c.http, t.get());
    const std::string grpc = GrpcPrompt(Request(c.grpc), t.get());
    EXPECT_EQ(grpc, http) << c.name;
    for (const std::string& piece : c.rendered) {
      EXPECT_NE(grpc.find(piece), std::string::npos) << c.name << ": no \"" << piece << "\" in\n" << grpc;
    }
  }
  // The kwargs reach the template: thinking off closes the think block.
  EXPECT_NE(GrpcPrompt(Request(conversations[2].grpc), t.get()), GrpcPrompt(Request(R"pb(chat {
              messages { role: "user" content: "Weather in Paris?" }
            })pb"), t.get()));
}

TEST(ChatInputTest, BadChatInputsNameTheProtoField) {
  auto t = Glm5Template();
  ASSERT_NE(t, nullptr);
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"pb(chat {})pb", "chat.messages"},
      {R"pb(chat { messages { role: "robot" content: "hi" } })pb", "chat.messages[0].role"},
      {R"pb(chat { messages { role: "user" } })pb", "chat.messages[0].content"},
      {R"pb(chat { messages { role: "user" content: "a" content_parts { type: "text" text: "b" } } })pb",
       "chat.messages[0]"},
      {R"pb(chat { messages { role: "user" content_parts { type: "image_url" } } })pb",
       "chat.messages[0].content_parts[0].type"},
      {R"pb(chat { messages { role: "user" content: "hi" tool_calls { function { name: "f" } } } })pb",
       "chat.messages[0].tool_calls"},
      {R"pb(chat { messages { role: "user" content: "hi" reasoning: "hm" } })pb", "chat.messages[0].reasoning"},
      {R"pb(chat { messages { role: "user" content: "hi" tool_call_id: "x" } })pb", "chat.messages[0].tool_call_id"},
      {R"pb(chat {
              messages { role: "user" content: "hi" }
              messages { role: "assistant" tool_calls { function { name: "f" arguments: "not json" } } }
            })pb",
       "chat.messages[1].tool_calls[0].function.arguments"},
      {R"pb(chat {
              messages { role: "user" content: "hi" }
              messages { role: "assistant" tool_calls { type: "code" function { name: "f" } } }
            })pb",
       "chat.messages[1].tool_calls[0].type"},
      {R"pb(chat { messages { role: "user" content: "hi" } tools { type: "retrieval" function { name: "f" } } })pb",
       "chat.tools[0].type"},
      {R"pb(chat { messages { role: "user" content: "hi" } tools { function { description: "no name" } } })pb",
       "chat.tools[0].function.name"},
      {R"pb(chat { messages { role: "user" content: "hi" } tools { function { name: "f" parameters_json: "[1]" } } })pb",
       "chat.tools[0].function.parameters_json"},
      {"chat { messages { role: \"user\" content: \"hi\" } tools { function { name: \"f\" parameters_json: \"" + deep +
           "\" } } }",
       "chat.tools[0].function.parameters_json"},
      {R"pb(chat { messages { role: "user" content: "hi" } chat_template_kwargs_json: "{" })pb",
       "chat.chat_template_kwargs_json"},
      {R"pb(chat { messages { role: "user" content: "hi" } chat_template_kwargs_json: "true" })pb",
       "chat.chat_template_kwargs_json"},
  };
  for (const auto& [proto, field] : cases) {
    auto p = ParseGenerateRequest(Request(proto), Limits(), t.get());
    ASSERT_FALSE(p.ok()) << proto;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << proto << ": " << p.status();
    EXPECT_EQ(FieldOf(p.status()).value_or("(none)"), field) << proto << ": " << p.status();
    EXPECT_EQ(std::string(p.status().message()).rfind(field + " ", 0), 0u) << "the message starts with the field: "
                                                                           << p.status();
  }
}

TEST(ChatInputTest, ATemplateThatFailsNamesTheMessagesAndNoTemplateIsAPrecondition) {
  auto raising = ChatTemplate::Parse("{{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(raising.ok());
  const v1::GenerateRequest r = Request(R"pb(chat { messages { role: "user" content: "hi" } })pb");
  auto p = ParseGenerateRequest(r, Limits(), raising->get());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(p.status()).value_or(""), "chat.messages");
  EXPECT_NE(std::string(p.status().message()).find("roles must alternate"), std::string::npos) << p.status();

  auto none = ParseGenerateRequest(r, Limits(), nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(none.status().message()).find("send text or token_ids"), std::string::npos) << none.status();
}

TEST(ChatInputTest, TheRenderedPromptIsValidatedAsTheChatMessages) {
  // A template that renders nothing: the prompt check names chat.messages.
  auto empty = ChatTemplate::Parse("{% for m in messages %}{% endfor %}");
  ASSERT_TRUE(empty.ok());
  auto p = ParseGenerateRequest(Request(R"pb(chat { messages { role: "user" content: "hi" } })pb"), Limits(),
                                empty->get());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(FieldOf(p.status()).value_or(""), "chat.messages") << p.status();
  auto ok = ParseGenerateRequest(Request(R"pb(chat { messages { role: "user" content: "hi" } })pb"), Limits(),
                                 Glm5Template().get());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->prompt_field, "chat.messages");
}

}  // namespace
}  // namespace spar
