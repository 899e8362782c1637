// The bad-input matrix through the OpenAI-compatible HTTP API of a real
// cluster (issue 9's server on spar-scheduler): every case is a 4xx with an
// OpenAI-shaped error naming the field (error.param, or the message where a
// body has no field to name), nothing is generated, and the server serves
// a valid request right after. docs/reliability.md lists every case by its
// name here.
#include <httplib.h>

#include <functional>
#include <optional>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/common/daemon.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;
using testing::ReliabilityModel;
constexpr int kMaxModelLen = 512;
constexpr int kMaxBodyBytes = 1 << 20;  // room for the 100 KB deep bodies; huge_body exceeds it

Json ValidCompletion() {
  return {{"model", "tiny"}, {"prompt", "The capital of France is"}, {"max_tokens", 4}, {"temperature", 0}};
}
Json ValidChat() {
  return {{"model", "tiny"},
          {"messages", Json::array({{{"role", "user"}, {"content", "What is 2+2?"}}})},
          {"max_tokens", 4},
          {"temperature", 0}};
}

// n levels of [ ... ] around "x".
std::string Nested(int n) { return std::string(n, '[') + "\"x\"" + std::string(n, ']'); }

struct Case {
  std::string name;
  bool chat = false;
  std::string body;           // sent as is
  int status = 400;
  std::string param;          // expected error.param ("" = not checked)
  std::string message;        // expected in error.message ("" = not checked)
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  auto with = [](Json base, const std::function<void(Json*)>& edit) {
    edit(&base);
    return base.dump();
  };
  auto completion = [&](std::string name, std::function<void(Json*)> edit, std::string param, int status = 400) {
    c.push_back({std::move(name), false, with(ValidCompletion(), edit), status, std::move(param), ""});
  };
  auto chat = [&](std::string name, std::function<void(Json*)> edit, std::string param, int status = 400) {
    c.push_back({std::move(name), true, with(ValidChat(), edit), status, std::move(param), ""});
  };
  c.push_back({"malformed_json", false, "{\"prompt\": \"x\",", 400, "", "not valid JSON"});
  c.push_back({"body_not_an_object", false, "[1, 2]", 400, "", "must be a JSON object"});
  c.push_back({"invalid_utf8", false, "{\"prompt\": \"\xff\xfe\"}", 400, "", "not valid JSON"});
  c.push_back({"deeply_nested_body", false, "{\"prompt\":\"x\",\"user\":" + Nested(50000) + "}", 400, "",
               "more than 64 levels deep"});
  c.push_back({"huge_body", false, ValidCompletion().dump() + std::string(kMaxBodyBytes, ' '), 413, "", ""});
  completion("unknown_field", [](Json* j) { (*j)["frobnicate"] = 1; }, "frobnicate");
  completion("wrong_type_prompt", [](Json* j) { (*j)["prompt"] = 5; }, "prompt");
  completion("wrong_type_temperature", [](Json* j) { (*j)["temperature"] = "hot"; }, "temperature");
  completion("wrong_type_max_tokens", [](Json* j) { (*j)["max_tokens"] = "4"; }, "max_tokens");
  completion("wrong_type_stop", [](Json* j) { (*j)["stop"] = 7; }, "stop");
  completion("empty_prompt", [](Json* j) { (*j)["prompt"] = Json::array(); }, "prompt");
  completion("prompt_longer_than_max_model_len", [](Json* j) {
        std::string t;
        for (int i = 0; i < kMaxModelLen; ++i) t += " x";
        (*j)["prompt"] = t;
      }, "prompt");
  completion("token_ids_longer_than_max_model_len",
             [](Json* j) { (*j)["prompt"] = Json(std::vector<int>(kMaxModelLen, 7)); }, "prompt");
  completion("token_id_beyond_vocab", [](Json* j) { (*j)["prompt"] = Json::array({5, 320}); }, "prompt[1]");
  completion("token_id_negative", [](Json* j) { (*j)["prompt"] = Json::array({-1}); }, "prompt[0]");
  completion("max_tokens_zero", [](Json* j) { (*j)["max_tokens"] = 0; }, "max_tokens");
  completion("max_tokens_negative", [](Json* j) { (*j)["max_tokens"] = -5; }, "max_tokens");
  completion("max_tokens_beyond_context", [](Json* j) { (*j)["max_tokens"] = kMaxModelLen; }, "max_tokens");
  completion("temperature_negative", [](Json* j) { (*j)["temperature"] = -1; }, "temperature");
  completion("temperature_too_high", [](Json* j) { (*j)["temperature"] = 101; }, "temperature");
  completion("top_p_zero", [](Json* j) { (*j)["top_p"] = 0; }, "top_p");
  completion("top_p_above_one", [](Json* j) { (*j)["top_p"] = 1.5; }, "top_p");
  completion("top_k_below_minus_one", [](Json* j) { (*j)["top_k"] = -2; }, "top_k");
  completion("min_p_above_one", [](Json* j) { (*j)["min_p"] = 1.5; }, "min_p");
  completion("repetition_penalty_zero", [](Json* j) { (*j)["repetition_penalty"] = 0; }, "repetition_penalty");
  completion("frequency_penalty_above_two", [](Json* j) { (*j)["frequency_penalty"] = 3; }, "frequency_penalty");
  completion("presence_penalty_below_minus_two", [](Json* j) { (*j)["presence_penalty"] = -3; },
             "presence_penalty");
  completion("n_zero", [](Json* j) { (*j)["n"] = 0; }, "n");
  completion("n_too_large", [](Json* j) { (*j)["n"] = 17; }, "n");
  completion("unknown_model", [](Json* j) { (*j)["model"] = "gpt-4"; }, "model", 404);
  completion("too_many_stop_strings", [](Json* j) { (*j)["stop"] = Json(std::vector<std::string>(17, "x")); }, "stop");
  completion("stop_string_too_long", [](Json* j) { (*j)["stop"] = std::string(257, 'a'); }, "stop[0]");
  completion("stop_token_id_beyond_vocab", [](Json* j) { (*j)["stop_token_ids"] = Json::array({320}); },
             "stop_token_ids[0]");
  completion("logprobs_too_many", [](Json* j) { (*j)["logprobs"] = 21; }, "logprobs");
  chat("chat_messages_missing", [](Json* j) { j->erase("messages"); }, "messages");
  chat("chat_message_not_an_object", [](Json* j) { (*j)["messages"] = Json::array({"hi"}); }, "messages[0]");
  chat("chat_role_unknown", [](Json* j) { (*j)["messages"][0]["role"] = "wizard"; }, "messages[0].role");
  chat("chat_content_wrong_type", [](Json* j) { (*j)["messages"][0]["content"] = 5; }, "messages[0].content");
  chat("chat_message_unknown_field", [](Json* j) { (*j)["messages"][0]["frobnicate"] = 1; }, "messages[0].frobnicate");
  chat("chat_content_part_unknown_field", [](Json* j) {
        (*j)["messages"][0]["content"] = Json::array({{{"type", "text"}, {"text", "hi"}, {"colour", "red"}}});
      }, "messages[0].content[0].colour");
  chat("chat_top_logprobs_too_many", [](Json* j) {
        (*j)["logprobs"] = true;
        (*j)["top_logprobs"] = 21;
      }, "top_logprobs");
  chat("chat_tool_arguments_not_json", [](Json* j) {
        (*j)["messages"].push_back({{"role", "assistant"},
                                    {"content", nullptr},
                                    {"tool_calls", Json::array({{{"type", "function"},
                                                                 {"function", {{"name", "f"}, {"arguments", "{oops"}}}}})}});
      }, "messages[1].tool_calls[0].function.arguments");
  chat("chat_deeply_nested_tool_arguments", [](Json* j) {
        (*j)["messages"].push_back(
            {{"role", "assistant"},
             {"content", nullptr},
             {"tool_calls", Json::array({{{"type", "function"},
                                          {"function", {{"name", "f"}, {"arguments", "{\"a\":" + Nested(50000) + "}"}}}}})}});
      }, "");
  c.back().message = "more than 64 levels deep";
  // Built as text: nlohmann would recurse building it.
  std::string kwargs = ValidChat().dump();
  kwargs.pop_back();
  kwargs += ",\"chat_template_kwargs\":{\"x\":" + Nested(50000) + "}}";
  c.push_back({"chat_deeply_nested_kwargs", true, kwargs, 400, "", "more than 64 levels deep"});
  return c;
}

class BadInputHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = testing::TestCluster::Start({.model = ReliabilityModel(),
                                            .stages = 2,
                                            .num_blocks = 64,
                                            .scheduler_flags = {"--max-model-len", absl::StrCat(kMaxModelLen),
                                                                "--served-model-name", "tiny", "--max-body-bytes",
                                                                absl::StrCat(kMaxBodyBytes)}},
                                           "bad_input_http")
                   .release();
  }
  static void TearDownTestSuite() { delete cluster_; }

  static httplib::Client Client() {
    const std::string& a = cluster_->http_address();
    httplib::Client c(a.substr(0, a.rfind(':')), std::stoi(a.substr(a.rfind(':') + 1)));
    c.set_read_timeout(30, 0);
    return c;
  }

  void ExpectServing(const std::string& after) {
    auto c = Client();
    auto r = c.Post("/v1/completions", ValidCompletion().dump(), "application/json");
    ASSERT_TRUE(r) << "no answer after " << after;
    EXPECT_EQ(r->status, 200) << "after " << after << ": " << r->body;
    EXPECT_TRUE(cluster_->scheduler()->Running()) << "after " << after;
  }

  static testing::TestCluster* cluster_;
};
testing::TestCluster* BadInputHttpTest::cluster_ = nullptr;

TEST_F(BadInputHttpTest, EveryCaseIsAFourHundredNamingTheField) {
  ASSERT_NE(cluster_, nullptr);
  ExpectServing("start");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto client = Client();
    auto r = client.Post(c.chat ? "/v1/chat/completions" : "/v1/completions", c.body, "application/json");
    ASSERT_TRUE(r) << "no answer";
    EXPECT_EQ(r->status, c.status) << r->body.substr(0, 400);
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body.substr(0, 400);
    ASSERT_TRUE(j.contains("error")) << r->body.substr(0, 400);
    const Json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e.contains("type"));
    if (!c.param.empty()) {
      EXPECT_EQ(e.value("param", Json()), c.param) << r->body.substr(0, 400);
    }
    if (!c.message.empty()) {
      EXPECT_NE(e["message"].get<std::string>().find(c.message), std::string::npos) << r->body.substr(0, 400);
    }
    std::cout << "[http] " << c.name << ": " << r->status << " " << e.value("param", Json()).dump() << " "
              << e["message"].get<std::string>().substr(0, 120) << "\n";
  }
  ExpectServing("every case");
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster_->address()));
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(2)), absl::Seconds(2));
}

TEST_F(BadInputHttpTest, WrongMethodAndUnknownRoute) {
  ASSERT_NE(cluster_, nullptr);
  auto c = Client();
  auto get = c.Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405) << get->body;
  auto unknown = c.Post("/v1/embeddings", "{}", "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404) << unknown->body;
  ExpectServing("the wrong routes");
}

}  // namespace
}  // namespace spar
