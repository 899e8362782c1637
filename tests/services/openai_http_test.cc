// The OpenAI-compatible HTTP server in-process: a Scheduler over the local
// pipeline (3 real stage executors of the make-tiny GLM-5) behind
// OpenAiHttpServer on 127.0.0.1:0, called with cpp-httplib's client and raw
// sockets. Outputs equal the scheduler's own (the gRPC path) for the same
// request and seed; streamed equals non-streamed; errors have OpenAI's
// shape and status codes; a client that disconnects frees its KV blocks.
#include "services/http/openai_server.h"

#include "services/http/json_fields.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/make_tiny.h"
#include "engine/tiny_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/engine/shared_tiny_model.h"
#include "tests/engine/test_util.h"
#include "tests/services/collecting_sink.h"
#include "tests/services/local_pipeline.h"

namespace spar::http {
namespace {

const std::string& TinyModel() { return testing::SharedTinyModel("openai_http_model", MakeTinyOptions{.seed = 5}); }

struct Harness {
  testing::LocalPipeline* pipeline = nullptr;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<OpenAiHttpServer> server;
  int port = 0;

  ~Harness() {
    if (pipeline != nullptr) pipeline->Hold(false);
    if (scheduler) scheduler->Stop();
    if (server) server->Stop();
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
};

std::unique_ptr<Harness> Start(SchedulerOptions so = {}, OpenAiServerOptions ho = {}, bool start_scheduler = true) {
  auto h = std::make_unique<Harness>();
  auto config = LoadModelConfig(TinyModel() + "/config.json");
  EXPECT_TRUE(config.ok());
  auto tok = Tokenizer::FromFile(TinyModel() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok());
  auto p = testing::LocalPipeline::Create(TinyModel(), 3, 64);
  EXPECT_TRUE(p.ok()) << p.status();
  h->pipeline = p->get();
  so.served_model_name = "tiny";
  so.step_timeout = absl::Seconds(60);
  h->scheduler = std::make_unique<Scheduler>(so, *config, std::move(*tok), std::move(*p));
  if (start_scheduler) {
    EXPECT_TRUE(h->scheduler->Start().ok());
  }
  auto tmpl = ChatTemplate::FromTokenizerConfig(TinyTokenizerConfigJson());
  EXPECT_TRUE(tmpl.ok());
  h->chat_template = std::move(*tmpl);
  ho.http.host = "127.0.0.1";
  ho.http.port = 0;
  h->server = std::make_unique<OpenAiHttpServer>(h->scheduler.get(), h->chat_template.get(), ho);
  auto port = h->server->Start();
  EXPECT_TRUE(port.ok()) << port.status();
  h->port = port.value_or(0);
  return h;
}

Json ParseJson(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << body;
  return j;
}

// The "data: ..." payloads of an SSE body; the last must be [DONE].
std::vector<Json> SseEvents(const std::string& body) {
  std::vector<Json> out;
  std::vector<std::string> events = absl::StrSplit(body, "\n\n", absl::SkipEmpty());
  EXPECT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "data: [DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].rfind("data: ", 0), 0u) << events[i];
    out.push_back(ParseJson(events[i].substr(6)));
  }
  return out;
}

void ExpectError(const httplib::Result& r, int status, const std::string& type, const char* param = nullptr,
                 const char* code = nullptr) {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  Json j = ParseJson(r->body);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_EQ(j["error"]["type"], type) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  if (param != nullptr) {
    EXPECT_EQ(j["error"]["param"], param) << r->body;
  }
  if (code != nullptr) {
    EXPECT_EQ(j["error"]["code"], code) << r->body;
  }
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

TEST(OpenAiHttpTest, CompletionEqualsTheSchedulerForTheSameSeed) {
  auto h = Start();
  const std::vector<int32_t> prompt = {11, 42, 7, 99, 3, 250, 18};
  auto c = h->Client();
  Json body = {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0.8}, {"seed", 1234},
               {"ignore_eos", true}, {"logprobs", 0}, {"return_token_ids", true}, {"n", 2}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = ParseJson(r->body);

  GenerateParams p;
  p.prompt_ids = prompt;
  p.sampling.temperature = 0.8f;
  p.seed = 1234;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.n = 2;
  p.output_logprobs = true;
  auto sink = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(h->scheduler->Submit(p, sink).ok());
  ASSERT_TRUE(sink->Wait());
  auto seqs = sink->seqs();
  ASSERT_EQ(j["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const Json& choice = j["choices"][i];
    EXPECT_EQ(choice["token_ids"].get<std::vector<int32_t>>(), seqs[i].ids) << i;
    EXPECT_EQ(choice["text"], seqs[i].text) << i;
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(choice["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
    const Json& lps = choice["logprobs"]["token_logprobs"];
    ASSERT_EQ(lps.size(), seqs[i].logprobs.size());
    for (size_t k = 0; k < lps.size(); ++k) EXPECT_EQ(lps[k].get<double>(), seqs[i].logprobs[k]);  // exact
  }
  EXPECT_NE(seqs[0].ids, seqs[1].ids);  // sequence i uses seed + i
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["usage"]["total_tokens"], 24 + prompt.size());
  EXPECT_EQ(r->get_header_value("X-Request-Id").size(), 32u);
}

TEST(OpenAiHttpTest, StreamedChatEqualsNonStreamedAndEndsWithUsageAndDone) {
  auto h = Start();
  auto c = h->Client();
  Json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
               {"max_tokens", 10}, {"seed", 9}, {"n", 2}, {"ignore_eos", true}, {"logprobs", true},
               {"top_logprobs", 2}};
  auto plain = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const Json whole = ParseJson(plain->body);
  EXPECT_EQ(whole["object"], "chat.completion");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto streamed = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(streamed->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  const std::vector<Json> events = SseEvents(streamed->body);
  std::map<int, std::string> text;
  std::map<int, int> roles, finishes, logprob_tokens;
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const Json& ev = events[e];
    EXPECT_EQ(ev["object"], "chat.completion.chunk");
    EXPECT_TRUE(ev.contains("usage") && ev["usage"].is_null());
    ASSERT_EQ(ev["choices"].size(), 1u);
    const Json& ch = ev["choices"][0];
    const int i = ch["index"];
    if (ch["delta"].contains("role")) {
      EXPECT_EQ(text[i], "") << "the role comes first";
      ++roles[i];
    }
    if (ch["delta"].contains("content")) text[i] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) ++finishes[i];
    if (ch["logprobs"].is_object()) logprob_tokens[i] += static_cast<int>(ch["logprobs"]["content"].size());
  }
  const Json& usage_chunk = events.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1);
    EXPECT_EQ(finishes[i], 1);
    EXPECT_EQ(text[i], whole["choices"][i]["message"]["content"]) << i;
    EXPECT_EQ(logprob_tokens[i], 10);
    EXPECT_EQ(whole["choices"][i]["logprobs"]["content"].size(), 10u);
    EXPECT_EQ(whole["choices"][i]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  }
}

TEST(OpenAiHttpTest, ChatPromptIsTheRenderedTemplate) {
  auto h = Start();
  auto c = h->Client();
  const Json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}},
                         {{"role", "assistant"}, {"content", "Hello!"}},
                         {{"role", "user"}, {"content", "Again?"}}};
  auto r = c.Post("/v1/chat/completions", Json{{"messages", messages}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto prompt = h->chat_template->Apply(messages, {});
  ASSERT_TRUE(prompt.ok());
  auto ids = h->scheduler->tokenizer()->Encode(*prompt, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ParseJson(r->body)["usage"]["prompt_tokens"], ids->size());
}

TEST(OpenAiHttpTest, StopStringsCutTheText) {
  auto h = Start();
  auto c = h->Client();
  Json body = {{"prompt", "The capital of France is"}, {"max_tokens", 24}, {"seed", 4}, {"ignore_eos", true}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200);
  const std::string text = ParseJson(r->body)["choices"][0]["text"];
  // Stop at the seeded output's 3rd and 4th characters (whole UTF-8
  // characters: the random model writes any bytes): the text ends before.
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  ASSERT_GE(starts.size(), 5u) << text;
  const std::string stop = text.substr(starts[2], starts[4] - starts[2]);
  body["stop"] = {stop, "never-appears"};
  r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200);
  const Json j = ParseJson(r->body);
  EXPECT_EQ(j["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], stop);
}

TEST(OpenAiHttpTest, ErrorsAreOpenAiShaped) {
  OpenAiServerOptions ho;
  ho.http.max_body_bytes = 4096;
  auto h = Start({}, ho);
  auto c = h->Client();
  ExpectError(c.Post("/v1/completions", "{not json", "application/json"), 400, "invalid_request_error");
  ExpectError(c.Post("/v1/completions", R"({"prompt":"x","top_p":7})", "application/json"), 400,
              "invalid_request_error", "top_p");
  ExpectError(c.Post("/v1/completions", R"({"prompt":"x","max_tokens":100000})", "application/json"), 400,
              "invalid_request_error", "max_tokens");
  ExpectError(c.Post("/v1/chat/completions", R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})",
                     "application/json"),
              404, "invalid_request_error", "model", "model_not_found");
  ExpectError(c.Post("/v1/embeddings", "{}", "application/json"), 404, "invalid_request_error", nullptr,
              "unknown_url");
  ExpectError(c.Get("/v1/chat/completions"), 405, "invalid_request_error", nullptr, "method_not_allowed");
  ExpectError(c.Post("/v1/models", "{}", "application/json"), 405, "invalid_request_error");
  ExpectError(c.Post("/v1/completions", Json{{"prompt", std::string(5000, 'a')}}.dump(), "application/json"), 413,
              "invalid_request_error", nullptr, "request_too_large");
  ExpectError(c.Get("/v1/models/other"), 404, "invalid_request_error", "model", "model_not_found");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const Json m = ParseJson(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  auto one = c.Get("/v1/models/tiny");
  ASSERT_TRUE(one && one->status == 200);
  auto health = c.Get("/health");
  ASSERT_TRUE(health && health->status == 200);
  // The server is still fine after all that.
  auto ok = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
  ASSERT_TRUE(ok && ok->status == 200) << (ok ? ok->body : "");
}

TEST(OpenAiHttpTest, ApiKeyGuardsTheV1Routes) {
  auto keys = ApiKeys::FromList({"sk-test-key", "sk-second"});
  ASSERT_TRUE(keys.ok());
  OpenAiServerOptions ho;
  ho.api_keys = &*keys;
  auto h = Start({}, ho);
  auto c = h->Client();
  const std::string body = R"({"prompt":"x","max_tokens":2})";
  ExpectError(c.Post("/v1/completions", body, "application/json"), 401, "invalid_request_error", nullptr,
              "invalid_api_key");
  ExpectError(c.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, body, "application/json"), 401,
              "invalid_request_error", nullptr, "invalid_api_key");
  ExpectError(c.Get("/v1/models"), 401, "invalid_request_error");
  auto ok = c.Post("/v1/completions", {{"Authorization", "Bearer sk-test-key"}}, body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto second = c.Post("/v1/completions", {{"Authorization", "Bearer sk-second"}}, body, "application/json");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200) << second->body;
  auto health = c.Get("/health");  // probes need no key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(OpenAiHttpTest, AddedGetRoutesNeedNoKeyAndAnswerOnTheApiPort) {
  auto h = Start();
  auto keys = ApiKeys::FromList({"sk-test-key"});
  ASSERT_TRUE(keys.ok());
  OpenAiServerOptions ho;
  ho.http.host = "127.0.0.1";
  ho.api_keys = &*keys;
  OpenAiHttpServer server(h->scheduler.get(), h->chat_template.get(), ho);
  server.AddGet("/readyz", [] { return OpenAiHttpServer::Reply{503, "text/plain", "not ready: loading\n"}; });
  auto port = server.Start();
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto ready = c.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(ready->body, "not ready: loading\n");
  EXPECT_EQ(ready->get_header_value("Content-Type"), "text/plain");
  ExpectError(c.Post("/readyz", "{}", "application/json"), 405, "invalid_request_error", nullptr,
              "method_not_allowed");
  ExpectError(c.Get("/v1/models"), 401, "invalid_request_error", nullptr, "invalid_api_key");
  server.Stop();
}

TEST(OpenAiHttpTest, NotReadyAndDrainingAre503AndAFullQueueIs429) {
  {
    auto h = Start({}, {}, /*start_scheduler=*/false);
    auto c = h->Client();
    ExpectError(c.Post("/v1/completions", R"({"prompt":"x"})", "application/json"), 503, "server_error", nullptr,
                "not_ready");
  }
  SchedulerOptions so;
  so.limits.max_running = 1;
  so.max_waiting = 1;
  auto h = Start(so);
  h->pipeline->Hold(true);
  const std::string body = R"({"prompt":"x","max_tokens":3})";
  std::vector<std::thread> clients;
  std::vector<int> statuses(2, 0);
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      auto c = h->Client();
      auto r = c.Post("/v1/completions", body, "application/json");
      statuses[i] = r ? r->status : -1;
    });
  }
  // One sequence running (held in the pipeline), one waiting: the queue is full.
  ASSERT_TRUE(WaitFor([&] {
    const LoadInfo l = h->scheduler->Load();
    return l.running_requests == 1 && l.waiting_requests == 1;
  }));
  auto c = h->Client();
  ExpectError(c.Post("/v1/completions", body, "application/json"), 429, "rate_limit_error", nullptr, "queue_full");
  h->server->set_draining(true);
  ExpectError(c.Post("/v1/completions", body, "application/json"), 503, "server_error", nullptr, "draining");
  // A request stops counting when its answer is destroyed, which may be a
  // moment after its client read the response (the refused ones' too).
  EXPECT_TRUE(WaitFor([&] { return h->server->active_requests() == 2; })) << h->server->active_requests();
  h->pipeline->Hold(false);
  for (auto& t : clients) t.join();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200}));  // draining lets running requests finish
  EXPECT_TRUE(WaitFor([&] { return h->server->active_requests() == 0; })) << h->server->active_requests();
}

// A raw HTTP/1.1 client: sends one request and can hang up at any point.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~RawClient() { Close(); }
  void Send(const std::string& path, const std::string& body) {
    const std::string req = absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                                         "Content-Length: ", body.size(), "\r\n\r\n", body);
    ASSERT_EQ(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  // Reads until `marker` arrived (or 20 s).
  bool ReadUntil(const std::string& marker) {
    const absl::Time until = absl::Now() + absl::Seconds(20);
    timeval tv{0, 100000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    while (absl::Now() < until && received_.find(marker) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) break;
      if (n > 0) received_.append(buf, static_cast<size_t>(n));
    }
    return received_.find(marker) != std::string::npos;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

TEST(OpenAiHttpTest, ClientDisconnectAbortsTheRequestAndFreesItsBlocks) {
  auto h = Start();
  auto idle = [&] {
    const LoadInfo l = h->scheduler->Load();
    return l.running_requests == 0 && l.waiting_requests == 0 && l.core.used_blocks == 0;
  };
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    ASSERT_TRUE(WaitFor(idle));
    h->pipeline->Hold(true);  // the request stays in the scheduler until the client leaves
    RawClient client(h->port);
    Json body = {{"prompt", "a long story"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", stream}};
    client.Send("/v1/completions", body.dump());
    if (stream) {
      ASSERT_TRUE(client.ReadUntil("\r\n\r\n"));  // the 200 and headers went out
    }
    ASSERT_TRUE(WaitFor([&] { return h->scheduler->Load().core.used_blocks > 0; }));
    client.Close();
    EXPECT_TRUE(WaitFor([&] { return h->scheduler->Load().running_requests == 0; }))
        << "the request outlived its client";
    EXPECT_EQ(h->scheduler->Load().core.used_blocks, 0);
    h->pipeline->Hold(false);
    EXPECT_TRUE(WaitFor([&] { return h->server->active_requests() == 0; }));
  }
  // And the server still serves.
  auto c = h->Client();
  auto r = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
  ASSERT_TRUE(r && r->status == 200);
}

}  // namespace
}  // namespace spar::http
