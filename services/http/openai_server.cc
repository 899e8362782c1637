#include "services/http/openai_server.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/http/anthropic_messages.h"
#include "services/http/api_error.h"
#include "services/http/json_fields.h"
#include "services/http/openai_generate.h"

namespace spar::http {

OpenAiHttpServer::OpenAiHttpServer(Scheduler* scheduler, const ChatTemplate* chat_template, OpenAiServerOptions options)
    : scheduler_(scheduler),
      chat_template_(chat_template),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())) {}

OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }

void OpenAiHttpServer::AddGet(const std::string& path, std::function<Reply()> handler) {
  extra_gets_.emplace_back(path, std::move(handler));
}

absl::StatusOr<int> OpenAiHttpServer::Start() {
  HttpRouter router;
  if (const ApiKeys* keys = options_.api_keys; keys != nullptr && keys->enabled()) {
    router.AddGuard("/v1/", [keys](const HttpRequest& req) -> std::optional<HttpResponse> {
      // Anthropic's clients send the key as x-api-key, OpenAI's as a Bearer:
      // the Messages API takes either, the OpenAI endpoints only the Bearer
      // (as vLLM's), so each API keeps its own documented rule.
      const bool anthropic = absl::StartsWith(req.path, "/v1/messages");
      const std::string x_api_key = anthropic ? std::string(req.headers.Get("x-api-key")) : std::string();
      if (!x_api_key.empty() && keys->Matches(x_api_key)) return std::nullopt;
      absl::Status ok = keys->CheckAuthorization(req.headers.Get("Authorization"));
      if (ok.ok()) return std::nullopt;
      if (!x_api_key.empty()) ok = absl::UnauthenticatedError("invalid x-api-key");
      HttpResponse r = anthropic ? AnthropicErrorResponse(ok) : StatusResponse(ok);
      r.headers.Add("WWW-Authenticate", "Bearer");
      return r;
    });
  }
  GenerateContext ctx{scheduler_, chat_template_, options_.max_prompts, options_.chat_parsers, &draining_, &active_};
  for (const bool chat : {false, true}) {
    router.Handle(
        "POST", chat ? "/v1/chat/completions" : "/v1/completions",
        [ctx, chat](HttpRequest req, std::shared_ptr<HttpResponder> out) {
          HandleGenerate(ctx, chat, std::move(req), std::move(out));
        },
        RunOn::kWorkers);  // parsing, the chat template and tokenizing may take a while
  }
  // The Anthropic Messages API on the same port (anthropic_messages.h).
  router.Handle(
      "POST", "/v1/messages",
      [ctx](HttpRequest req, std::shared_ptr<HttpResponder> out) { HandleAnthropicMessages(ctx, std::move(req), std::move(out)); },
      RunOn::kWorkers);
  router.Handle(
      "POST", "/v1/messages/count_tokens",
      [ctx](HttpRequest req, std::shared_ptr<HttpResponder> out) {
        HandleAnthropicCountTokens(ctx, std::move(req), std::move(out));
      },
      RunOn::kWorkers);
  router.HandleSimple("GET", "/v1/models", [this](const HttpRequest& req) { return Models(req); });
  router.HandleSimple("GET", "/v1/models/*", [this](const HttpRequest& req) { return Models(req); });
  router.HandleSimple("GET", "/health", [](const HttpRequest&) { return MakeResponse(200, "{\"status\":\"ok\"}"); });
  for (const auto& [path, handler] : extra_gets_) {
    router.HandleSimple("GET", path, [h = handler](const HttpRequest&) {
      Reply r = h();
      return MakeResponse(r.status, std::move(r.body), r.content_type);
    });
  }
  HttpServer::Options http = options_.http;
  http.error_response = ServerErrorResponse;
  http.name = "HTTP API";
  server_ = std::make_unique<HttpServer>(std::move(http), std::move(router));
  return server_->Start();
}

void OpenAiHttpServer::Stop() {
  if (server_) server_->Stop();
}

HttpResponse OpenAiHttpServer::Models(const HttpRequest& req) const {
  const ModelInfo info = scheduler_->Info();
  Json model = {{"id", info.served_model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "spar"},
                {"root", info.model_path},
                {"parent", nullptr},
                {"max_model_len", info.max_model_len}};
  auto dump = [](const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); };
  if (!req.path_rest.empty()) {
    if (req.path_rest != info.served_model_name) {
      ApiError e = InvalidRequest(absl::StrCat("The model `", req.path_rest, "` does not exist"), "model");
      e.http_status = 404;
      e.code = "model_not_found";
      return ApiErrorResponse(e);
    }
    return MakeResponse(200, dump(model));
  }
  return MakeResponse(200, dump(Json{{"object", "list"}, {"data", Json::array({model})}}));
}

}  // namespace spar::http
