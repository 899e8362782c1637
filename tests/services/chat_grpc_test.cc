// Chat over the gRPC API on a real cluster (2 worker processes and the
// scheduler, on the trained tiny GLM-5 with its chat template): the same
// conversation sent as a spar.v1 chat input and to /v1/chat/completions
// gets the same prompt tokens and, greedily, the same completion; a bad
// message is INVALID_ARGUMENT naming the field; `spar generate --server
// --chat` answers.
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/common/daemon.h"
#include "spar/v1/generation.grpc.pb.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;

struct Completion {
  grpc::Status status;
  std::vector<int32_t> prompt_ids, output_ids;
  std::string text;
};

Completion GrpcChat(const std::string& address, const v1::ChatInput& chat) {
  auto stub = v1::Generation::NewStub(CreatePublicChannel(address));
  v1::GenerateRequest r;
  *r.mutable_chat() = chat;
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_tokens(16);
  r.mutable_response()->set_prompt_token_ids(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, r);
  Completion c;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_prompt_info()) c.prompt_ids.assign(resp.prompt_info().prompt_token_ids().begin(),
                                                    resp.prompt_info().prompt_token_ids().end());
    c.output_ids.insert(c.output_ids.end(), resp.output().token_ids().begin(), resp.output().token_ids().end());
    c.text += resp.output().text();
  }
  c.status = reader->Finish();
  return c;
}

Completion HttpChat(const std::string& http_address, Json body) {
  body["temperature"] = 0;
  body["max_tokens"] = 16;
  body["return_token_ids"] = true;
  const std::string host = http_address.substr(0, http_address.rfind(':'));
  httplib::Client client(host, std::stoi(http_address.substr(http_address.rfind(':') + 1)));
  client.set_read_timeout(60);
  auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  Completion c;
  EXPECT_TRUE(res) << "no HTTP response";
  if (!res) return c;
  EXPECT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices")) return c;
  const Json& choice = j["choices"][0];
  c.prompt_ids = choice["prompt_token_ids"].get<std::vector<int32_t>>();
  c.output_ids = choice["token_ids"].get<std::vector<int32_t>>();
  if (choice["message"]["content"].is_string()) c.text = choice["message"]["content"].get<std::string>();
  return c;
}

v1::ChatCompletionMessage Message(const std::string& role, const std::string& content) {
  v1::ChatCompletionMessage m;
  m.set_role(role);
  m.set_content(content);
  return m;
}

class ChatGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = testing::TestCluster::Start(
                   {.model = testing::SourcePath("models/tiny-glm5-chat/bf16"), .stages = 2}, "chat_grpc")
                   .release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static testing::TestCluster* cluster_;
};
testing::TestCluster* ChatGrpcTest::cluster_ = nullptr;

TEST_F(ChatGrpcTest, SameConversationSameTokensOverBothApis) {
  ASSERT_NE(cluster_, nullptr);
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, std::string>> turns;
    const char* answer;
  };
  const std::vector<Case> cases = {
      {"one question", {{"user", "What is 6 times 7?"}}, "42"},
      {"a follow-up", {{"user", "What is 12 plus 7?"}, {"assistant", "19"}, {"user", "And minus 4?"}}, nullptr},
      {"a system prompt", {{"system", "Answer with a number."}, {"user", "What is 3 plus 5?"}}, nullptr},
  };
  for (const Case& c : cases) {
    v1::ChatInput chat;
    Json messages = Json::array();
    for (const auto& [role, content] : c.turns) {
      *chat.add_messages() = Message(role, content);
      messages.push_back({{"role", role}, {"content", content}});
    }
    const Completion grpc = GrpcChat(cluster_->address(), chat);
    ASSERT_TRUE(grpc.status.ok()) << c.name << ": " << grpc.status.error_message();
    const Completion http = HttpChat(cluster_->http_address(), {{"messages", messages}});
    EXPECT_FALSE(grpc.prompt_ids.empty()) << c.name;
    EXPECT_EQ(grpc.prompt_ids, http.prompt_ids) << c.name;
    EXPECT_FALSE(grpc.output_ids.empty()) << c.name;
    EXPECT_EQ(grpc.output_ids, http.output_ids) << c.name;
    EXPECT_EQ(grpc.text, http.text) << c.name;
    if (c.answer != nullptr) EXPECT_EQ(grpc.text, c.answer) << c.name;
  }
}

TEST_F(ChatGrpcTest, BadMessagesAreInvalidArgumentNamingTheField) {
  ASSERT_NE(cluster_, nullptr);
  v1::ChatInput chat;
  *chat.add_messages() = Message("user", "hi");
  *chat.add_messages() = Message("robot", "beep");
  const Completion c = GrpcChat(cluster_->address(), chat);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(c.status.error_message().rfind("chat.messages[1].role ", 0), 0u) << c.status.error_message();
  v1::ChatInput kwargs;
  *kwargs.add_messages() = Message("user", "hi");
  kwargs.set_chat_template_kwargs_json("[]");
  const Completion k = GrpcChat(cluster_->address(), kwargs);
  EXPECT_EQ(k.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(k.status.error_message().rfind("chat.chat_template_kwargs_json ", 0), 0u) << k.status.error_message();
}

TEST_F(ChatGrpcTest, SparGenerateChatsWithAServer) {
  ASSERT_NE(cluster_, nullptr);
  const std::string out = absl::StrCat(cluster_->dir(), "/generate.out");
  auto child = ChildProcess::Spawn({SPAR_BIN, "generate", "--server", cluster_->address(), "--chat", "--prompt",
                                    "What is 12 plus 7?", "--max-tokens", "16"},
                                   {out});
  ASSERT_TRUE(child.ok()) << child.status();
  for (int i = 0; i < 600 && (*child)->Running(); ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE((*child)->Running());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ((*child)->ExitDescription(), "exited with status 0") << text.str();
  // The prompt, then the answer on its own line, then the summary.
  EXPECT_NE(text.str().find("What is 12 plus 7?\n19\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("finish: stop]"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace spar
