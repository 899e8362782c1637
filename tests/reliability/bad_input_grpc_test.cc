// The bad-input matrix through the public gRPC API of a real cluster: every
// case ends with a clear status (INVALID_ARGUMENT naming the field for the
// request's content; gRPC's own codes for bytes that are not a request),
// and the server serves a valid request right after, unaffected.
// docs/reliability.md lists every case by its name here.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <cmath>
#include <functional>
#include <limits>

#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using testing::ReliabilityModel;
constexpr int kMaxModelLen = 512;

v1::GenerateRequest Valid() {
  v1::GenerateRequest r;
  r.set_text("The capital of France is");
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_tokens(4);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

struct Case {
  std::string name;
  std::function<void(v1::GenerateRequest*)> mutate;
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  std::string field;  // must appear in the error message
};

std::vector<Case> Cases() {
  using R = v1::GenerateRequest;
  std::vector<Case> c;
  auto add = [&](std::string name, std::function<void(R*)> m, std::string field,
                 grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT) {
    c.push_back({std::move(name), std::move(m), code, std::move(field)});
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  add("no_prompt", [](R* r) { r->clear_text(); }, "prompt is missing");
  add("empty_text", [](R* r) { r->set_text(""); }, "text is empty");
  add("empty_token_ids", [](R* r) { r->mutable_token_ids(); }, "token_ids.ids is empty");
  add("token_id_negative", [](R* r) { r->mutable_token_ids()->add_ids(-1); }, "token_ids.ids[0]");
  add("token_id_beyond_vocab", [](R* r) { for (int id : {5, 320}) r->mutable_token_ids()->add_ids(id); },
      "token_ids.ids[1]");
  add("token_ids_longer_than_max_model_len",
      [](R* r) { for (int i = 0; i < kMaxModelLen; ++i) r->mutable_token_ids()->add_ids(7); }, "token_ids.ids");
  add("text_longer_than_max_model_len", [](R* r) {
        std::string t;
        for (int i = 0; i < kMaxModelLen; ++i) t += " x";
        r->set_text(t);
      }, "the prompt has");
  add("prompt_plus_max_tokens_beyond_context", [](R* r) {
        for (int i = 0; i < 400; ++i) r->mutable_token_ids()->add_ids(7);
        r->mutable_stopping()->set_max_tokens(200);
      }, "stopping.max_tokens");
  add("max_tokens_zero", [](R* r) { r->mutable_stopping()->set_max_tokens(0); }, "stopping.max_tokens");
  add("max_tokens_at_context", [](R* r) { r->mutable_stopping()->set_max_tokens(kMaxModelLen); },
      "stopping.max_tokens");
  add("max_tokens_huge", [](R* r) { r->mutable_stopping()->set_max_tokens(4000000000u); }, "stopping.max_tokens");
  add("temperature_negative", [](R* r) { r->mutable_sampling()->set_temperature(-0.5f); }, "sampling.temperature");
  add("temperature_too_high", [](R* r) { r->mutable_sampling()->set_temperature(101); }, "sampling.temperature");
  add("temperature_nan", [=](R* r) { r->mutable_sampling()->set_temperature(nan); }, "sampling.temperature");
  add("temperature_inf", [=](R* r) { r->mutable_sampling()->set_temperature(inf); }, "sampling.temperature");
  add("top_p_zero", [](R* r) { r->mutable_sampling()->set_top_p(0); }, "sampling.top_p");
  add("top_p_above_one", [](R* r) { r->mutable_sampling()->set_top_p(1.5f); }, "sampling.top_p");
  add("top_p_nan", [=](R* r) { r->mutable_sampling()->set_top_p(nan); }, "sampling.top_p");
  add("top_k_below_minus_one", [](R* r) { r->mutable_sampling()->set_top_k(-2); }, "sampling.top_k");
  add("min_p_above_one", [](R* r) { r->mutable_sampling()->set_min_p(1.01f); }, "sampling.min_p");
  add("min_p_negative", [](R* r) { r->mutable_sampling()->set_min_p(-0.1f); }, "sampling.min_p");
  add("repetition_penalty_zero", [](R* r) { r->mutable_sampling()->set_repetition_penalty(0); },
      "sampling.repetition_penalty");
  add("frequency_penalty_above_two", [](R* r) { r->mutable_sampling()->set_frequency_penalty(2.5f); },
      "sampling.frequency_penalty");
  add("presence_penalty_below_minus_two", [](R* r) { r->mutable_sampling()->set_presence_penalty(-3); },
      "sampling.presence_penalty");
  add("n_zero", [](R* r) { r->mutable_sampling()->set_n(0); }, "sampling.n");
  add("n_too_large", [](R* r) { r->mutable_sampling()->set_n(17); }, "sampling.n");
  add("unknown_model", [](R* r) { r->set_model("gpt-4"); }, "model \"gpt-4\"");
  add("too_many_stop_strings", [](R* r) { for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop_strings("x"); },
      "stopping.stop_strings");
  add("stop_string_too_long", [](R* r) { r->mutable_stopping()->add_stop_strings(std::string(257, 'a')); },
      "stopping.stop_strings[0]");
  add("stop_string_empty", [](R* r) { r->mutable_stopping()->add_stop_strings(""); }, "stopping.stop_strings[0]");
  add("too_many_stop_token_ids", [](R* r) { for (int i = 0; i < 65; ++i) r->mutable_stopping()->add_stop_token_ids(1); },
      "stopping.stop_token_ids");
  add("stop_token_id_beyond_vocab", [](R* r) { r->mutable_stopping()->add_stop_token_ids(320); },
      "stopping.stop_token_ids[0]");
  add("top_logprobs_too_many", [](R* r) { r->mutable_response()->set_top_logprobs(21); }, "response.top_logprobs");
  add("request_id_too_long", [](R* r) { r->set_request_id(std::string(257, 'r')); }, "request_id");
  // Chat inputs (rendered by the model's chat template): each bad message
  // names its proto field.
  auto user = [](R* r) -> v1::ChatCompletionMessage* {
    v1::ChatCompletionMessage* m = r->mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("hi");
    return m;
  };
  add("chat_no_messages", [](R* r) { r->mutable_chat(); }, "chat.messages must hold at least one message");
  add("chat_unknown_role", [=](R* r) { user(r)->set_role("robot"); }, "chat.messages[0].role");
  add("chat_user_without_content", [=](R* r) { user(r)->clear_content(); }, "chat.messages[0].content is required");
  add("chat_content_and_content_parts", [=](R* r) { user(r)->add_content_parts()->set_type("text"); },
      "chat.messages[0] sets both content and content_parts");
  add("chat_image_content_part", [=](R* r) {
        v1::ChatCompletionMessage* m = user(r);
        m->clear_content();
        m->add_content_parts()->set_type("image_url");
      }, "chat.messages[0].content_parts[0].type");
  add("chat_tool_calls_on_a_user_message", [=](R* r) { user(r)->add_tool_calls()->mutable_function()->set_name("f"); },
      "chat.messages[0].tool_calls");
  add("chat_tool_call_arguments_not_json", [=](R* r) {
        user(r);
        v1::ChatCompletionMessage* a = r->mutable_chat()->add_messages();
        a->set_role("assistant");
        a->add_tool_calls()->mutable_function()->set_arguments("{not json");
      }, "chat.messages[1].tool_calls[0].function.arguments");
  add("chat_tool_without_name", [=](R* r) { user(r); r->mutable_chat()->add_tools()->mutable_function(); },
      "chat.tools[0].function.name");
  add("chat_tool_parameters_not_an_object", [=](R* r) {
        user(r);
        v1::FunctionDefinition* f = r->mutable_chat()->add_tools()->mutable_function();
        f->set_name("f");
        f->set_parameters_json("[1, 2]");
      }, "chat.tools[0].function.parameters_json");
  add("chat_template_kwargs_not_an_object", [=](R* r) { user(r); r->mutable_chat()->set_chat_template_kwargs_json("1"); },
      "chat.chat_template_kwargs_json");
  add("chat_longer_than_max_model_len", [=](R* r) {
        std::string t;
        for (int i = 0; i < kMaxModelLen; ++i) t += " x";
        user(r)->set_content(t);
      }, "chat.messages: the prompt has");
  return c;
}

// One Generate call with raw request bytes (what a broken or hostile client
// sends): status only.
grpc::Status RawGenerate(const std::shared_ptr<grpc::Channel>& channel, const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/spar.v1.Generation/Generate", &cq);
  void* tag;
  bool ok;
  auto step = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (step(1)) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->Write(request, reinterpret_cast<void*>(2));
    if (step(2)) {
      call->WritesDone(reinterpret_cast<void*>(3));
      step(3);
      grpc::ByteBuffer response;
      for (;;) {
        call->Read(&response, reinterpret_cast<void*>(4));
        if (!step(4)) break;
      }
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

class BadInputGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = testing::TestCluster::Start({.model = ReliabilityModel(),
                                            .stages = 2,
                                            .num_blocks = 64,
                                            .scheduler_flags = {"--max-model-len", absl::StrCat(kMaxModelLen),
                                                                "--served-model-name", "tiny"}},
                                           "bad_input")
                   .release();
  }
  static void TearDownTestSuite() { delete cluster_; }

  void ExpectServing(v1::Generation::Stub* stub, const std::string& after) {
    testing::StreamRecord ok = testing::Stream(stub, Valid(), absl::Seconds(30));
    EXPECT_TRUE(ok.status.ok()) << "after " << after << ": " << ok.status.error_message();
    EXPECT_EQ(ok.ids.size(), 4u) << "after " << after;
    EXPECT_TRUE(cluster_->scheduler()->Running()) << "after " << after;
  }

  static testing::TestCluster* cluster_;
};
testing::TestCluster* BadInputGrpcTest::cluster_ = nullptr;

TEST_F(BadInputGrpcTest, EveryFieldCaseIsRejectedNamingTheField) {
  ASSERT_NE(cluster_, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster_->address()));
  ExpectServing(stub.get(), "start");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    v1::GenerateRequest req = Valid();
    c.mutate(&req);
    const testing::StreamRecord r = testing::Stream(stub.get(), req, absl::Seconds(20));
    EXPECT_EQ(r.status.error_code(), c.code) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find(c.field), std::string::npos)
        << "the message does not name " << c.field << ": " << r.status.error_message();
    EXPECT_EQ(r.messages, 0);
  }
  ExpectServing(stub.get(), "the field cases");
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(1)), absl::Seconds(1));
}

TEST_F(BadInputGrpcTest, DuplicateActiveRequestIdIsAlreadyExists) {
  ASSERT_NE(cluster_, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster_->address()));
  v1::GenerateRequest longreq = Valid();
  longreq.set_request_id("dup");
  longreq.mutable_stopping()->set_max_tokens(400);
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, longreq);
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  const testing::StreamRecord r = testing::Stream(stub.get(), longreq, absl::Seconds(10));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(r.status.error_message().find("request_id \"dup\""), std::string::npos) << r.status.error_message();
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  reader->Finish();
  ExpectServing(stub.get(), "the duplicate id");
}

// Bytes that are not a valid GenerateRequest (malformed protobuf, a string
// field that is not UTF-8, which proto3 forbids) are an INVALID_ARGUMENT
// saying so; oversized messages are refused before being read
// (RESOURCE_EXHAUSTED, the 64 MiB public limit). A wire type that does not
// match its field makes it an unknown field (protobuf's rule) and unknown
// fields are ignored (forward compatibility), so such a request is judged
// without them.
TEST_F(BadInputGrpcTest, MalformedAndHugeMessagesAreRefusedAndTheServerIsUnaffected) {
  ASSERT_NE(cluster_, nullptr);
  auto channel = CreatePublicChannel(cluster_->address());
  auto stub = v1::Generation::NewStub(channel);
  struct Raw {
    std::string name, bytes;
    grpc::StatusCode code;
    std::string text;
  };
  const std::string kNotProto = "not a valid spar.v1.GenerateRequest";
  std::string valid, huge;
  ASSERT_TRUE(Valid().SerializeToString(&valid));
  v1::GenerateRequest huge_req = Valid();
  huge_req.set_text(std::string(65 << 20, 'x'));
  ASSERT_TRUE(huge_req.SerializeToString(&huge));
  const std::vector<Raw> raws = {
      {"truncated_protobuf", valid.substr(0, valid.size() - 3), grpc::StatusCode::INVALID_ARGUMENT, kNotProto},
      {"json_instead_of_protobuf", R"({"text": "hi"})", grpc::StatusCode::INVALID_ARGUMENT, kNotProto},
      {"invalid_utf8_text", std::string("\x1a\x03\xff\xfe\xfd", 5), grpc::StatusCode::INVALID_ARGUMENT, kNotProto},
      {"invalid_utf8_stop_string", valid + std::string("\x32\x05\x1a\x03\xc3\x28\xa0", 7),
       grpc::StatusCode::INVALID_ARGUMENT, kNotProto},
      {"varint_where_text_belongs", std::string("\x18\x05", 2), grpc::StatusCode::INVALID_ARGUMENT,
       "prompt is missing"},
      {"unknown_field_ignored", valid + std::string("\xf8\x06\x01", 3), grpc::StatusCode::OK, ""},
      {"huge_message", huge, grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
  };
  for (const Raw& raw : raws) {
    SCOPED_TRACE(raw.name);
    const grpc::Status s = RawGenerate(channel, raw.bytes);
    EXPECT_EQ(s.error_code(), raw.code) << s.error_message();
    if (!raw.text.empty()) {
      EXPECT_NE(s.error_message().find(raw.text), std::string::npos) << s.error_message();
    }
    std::cout << "[raw] " << raw.name << ": " << s.error_code() << " " << s.error_message() << "\n";
    ExpectServing(stub.get(), raw.name);
  }
}

}  // namespace
}  // namespace spar
