// Constrained decoding end to end, in-process: the trained tiny GLM-5
// (models/tiny-glm5-chat/bf16, which knows no JSON) behind a Scheduler over
// the local pipeline (3 real stage executors: the last one masks) and the
// OpenAI HTTP server with GLM's parsers. Whatever the model prefers, the
// answers parse: response_format json_object / json_schema give JSON that
// meets the schema, tool_choice required / named give a well-formed call in
// GLM's syntax whose arguments meet the tool's schema, streamed or not,
// greedy or sampled, thinking on or off; a schema the grammar refuses is a
// 400 naming it. (The npm tests check many more schemas with ajv against a
// running cluster: tests/npm/constrained_outputs.js.)
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "services/http/json_fields.h"
#include "services/http/openai_server.h"
#include "tests/services/local_pipeline.h"
#include "text/chat_template.h"

namespace spar::http {
namespace {

const std::string kModel = std::string(SPAR_SOURCE_DIR) + "/models/tiny-glm5-chat/bf16";

struct Harness {
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<OpenAiHttpServer> server;
  int port = 0;
  ~Harness() {
    if (scheduler) scheduler->Stop();
    if (server) server->Stop();
  }
};

Harness* Shared() {
  static Harness* h = [] {
    auto* h = new Harness();
    auto config = LoadModelConfig(kModel + "/config.json");
    EXPECT_TRUE(config.ok()) << config.status();
    auto tok = Tokenizer::FromFile(kModel + "/tokenizer.json");
    EXPECT_TRUE(tok.ok());
    auto p = testing::LocalPipeline::Create(kModel, 3, 256);
    EXPECT_TRUE(p.ok()) << p.status();
    SchedulerOptions so;
    so.served_model_name = "tiny";
    so.step_timeout = absl::Seconds(120);
    h->scheduler = std::make_unique<Scheduler>(so, *config, std::move(*tok), std::move(*p));
    EXPECT_TRUE(h->scheduler->Start().ok());
    auto cfg = ReadFileToString(kModel + "/tokenizer_config.json");
    EXPECT_TRUE(cfg.ok());
    auto tmpl = ChatTemplate::FromTokenizerConfig(*cfg);
    EXPECT_TRUE(tmpl.ok()) << tmpl.status();
    h->chat_template = std::move(*tmpl);
    OpenAiServerOptions ho;
    ho.http.host = "127.0.0.1";
    ho.http.port = 0;
    ho.chat_parsers = ChatParsersFor("auto", "auto", "glm_moe_dsa").value();
    h->server = std::make_unique<OpenAiHttpServer>(h->scheduler.get(), h->chat_template.get(), ho);
    h->port = h->server->Start().value_or(0);
    return h;
  }();
  return h;
}

Json Post(const Json& body, int* status = nullptr) {
  httplib::Client c("127.0.0.1", Shared()->port);
  c.set_read_timeout(120, 0);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return Json();
  if (status != nullptr) *status = r->status;
  Json j = Json::parse(r->body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->body;
  return j;
}

Json Chat(const std::string& question, bool thinking, int max_tokens, double temperature, uint64_t seed) {
  return {{"model", "tiny"},
          {"messages", Json::array({{{"role", "user"}, {"content", question}}})},
          {"max_tokens", max_tokens},
          {"temperature", temperature},
          {"seed", seed},
          {"chat_template_kwargs", {{"enable_thinking", thinking}}}};
}

const char* kQuestions[] = {"What is 6 times 7?", "The password of KEY7 is BLUE. What is the password of KEY7?",
                            "Hello!", "List three colours as JSON."};

TEST(ConstrainedHttpTest, JsonObjectAlwaysParses) {
  int n = 0;
  for (const char* q : kQuestions) {
    for (const bool thinking : {false, true}) {
      for (const double temperature : {0.0, 1.0}) {
        Json body = Chat(q, thinking, thinking ? 60 : 40, temperature, 17 + n++);
        body["response_format"] = {{"type", "json_object"}};
        const Json r = Post(body);
        const Json& m = r["choices"][0]["message"];
        ASSERT_TRUE(m["content"].is_string()) << r.dump();
        const Json parsed = Json::parse(m["content"].get<std::string>(), nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << q << " thinking=" << thinking << ": " << r.dump();
        if (thinking) {
          EXPECT_TRUE(m["reasoning_content"].is_string() || m["reasoning_content"].is_null()) << r.dump();
        }
      }
    }
  }
}

TEST(ConstrainedHttpTest, JsonSchemaIsMet) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "answer": {"type": "integer", "minimum": 0, "maximum": 99},
      "unit": {"enum": ["apples", "pears"]},
      "notes": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2}},
      "required": ["answer", "unit"]})");
  for (int i = 0; i < 6; ++i) {
    Json body = Chat(kQuestions[i % 4], i % 2 == 1, 80, i < 3 ? 0.0 : 1.2, 100 + i);
    body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", schema}}}};
    const Json r = Post(body);
    const Json v = Json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(v.is_object()) << r.dump();
    ASSERT_TRUE(v["answer"].is_number_integer()) << v.dump();
    EXPECT_GE(v["answer"].get<int>(), 0);
    EXPECT_LE(v["answer"].get<int>(), 99);
    EXPECT_TRUE(v["unit"] == "apples" || v["unit"] == "pears") << v.dump();
    if (v.contains("notes")) {
      ASSERT_TRUE(v["notes"].is_array());
      EXPECT_LE(v["notes"].size(), 2u);
    }
  }
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
                   "unit": {"enum": ["c", "f"]}}, "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "note", "parameters": {"type": "object",
    "properties": {"text": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["text"]}}}])");

void ExpectValidCalls(const Json& message, const char* only = nullptr) {
  ASSERT_TRUE(message["tool_calls"].is_array()) << message.dump();
  ASSERT_FALSE(message["tool_calls"].empty()) << message.dump();
  for (const Json& c : message["tool_calls"]) {
    const std::string name = c["function"]["name"];
    if (only != nullptr) {
      EXPECT_EQ(name, only);
    }
    const Json args = Json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << c.dump();
    if (name == "get_weather") {
      ASSERT_TRUE(args["city"].is_string()) << args.dump();
      ASSERT_TRUE(args["days"].is_number_integer()) << args.dump();
      EXPECT_GE(args["days"].get<int>(), 1);
      EXPECT_LE(args["days"].get<int>(), 7);
      if (args.contains("unit")) {
        EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
      }
    } else {
      ASSERT_EQ(name, "note");
      ASSERT_TRUE(args["text"].is_string()) << args.dump();
      if (args.contains("tags")) {
        EXPECT_TRUE(args["tags"].is_array());
      }
    }
  }
}

TEST(ConstrainedHttpTest, RequiredAndNamedToolChoicesAlwaysCall) {
  for (int i = 0; i < 4; ++i) {
    Json body = Chat(kQuestions[i % 4], i == 3, 70, i % 2 ? 1.0 : 0.0, 300 + i);
    body["tools"] = kTools;
    body["tool_choice"] = "required";
    const Json r = Post(body);
    ExpectValidCalls(r["choices"][0]["message"]);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
  }
  for (const char* name : {"get_weather", "note"}) {
    Json body = Chat("Use the tool.", false, 60, 0.7, 9);
    body["tools"] = kTools;
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    const Json r = Post(body);
    ExpectValidCalls(r["choices"][0]["message"], name);
    EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u);
  }
}

TEST(ConstrainedHttpTest, StreamedToolCallArrives) {
  Json body = Chat("Weather?", false, 60, 0.0, 1);
  body["tools"] = kTools;
  body["tool_choice"] = "required";
  body["stream"] = true;
  httplib::Client c("127.0.0.1", Shared()->port);
  c.set_read_timeout(120, 0);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  int calls = 0;
  std::string finish;
  for (absl::string_view ev : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
    if (ev == "data: [DONE]") continue;
    const Json j = Json::parse(ev.substr(6));
    for (const Json& ch : j["choices"]) {
      if (ch["delta"].contains("tool_calls")) calls += static_cast<int>(ch["delta"]["tool_calls"].size());
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    }
  }
  EXPECT_GE(calls, 1) << r->body;
  EXPECT_EQ(finish, "tool_calls") << r->body;
}

TEST(ConstrainedHttpTest, RefusedSchemasAre400sNamingThem) {
  Json body = Chat("x", false, 10, 0, 1);
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}};
  int status = 0;
  Json r = Post(body, &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "response_format.json_schema.schema.pattern") << r.dump();
  body = Chat("x", false, 10, 0, 1);
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "missing"}}}};
  r = Post(body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "tool_choice.function.name") << r.dump();
}

}  // namespace
}  // namespace spar::http
