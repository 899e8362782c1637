#include "services/http/openai_server.h"

#include <signal.h>

#include <httplib.h>

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "services/common/status_field.h"
#include "services/http/api_error.h"
#include "services/http/connection_probe.h"
#include "services/http/listen_backlog.h"
#include "services/http/openai_request.h"
#include "services/http/openai_response.h"
#include "services/http/token_strings.h"
#include "services/http/update_streams.h"

namespace spar::http {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(ApiErrorJson(e), "application/json");
}

void SendStatus(httplib::Response& res, const absl::Status& s) { SendError(res, ApiErrorFromStatus(s)); }

ApiError Unavailable(std::string message, std::string code) {
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// 32 random hex digits: response ids ("chatcmpl-...") and, unless the
// client sends X-Request-Id, the scheduler's request ids.
std::string RandomId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32));
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

// Counts a generation request as active for as long as it is alive.
class ActiveGuard {
 public:
  explicit ActiveGuard(std::atomic<int>* active) : active_(active) { ++*active_; }
  ~ActiveGuard() { --*active_; }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;

 private:
  std::atomic<int>* active_;
};

// The state a streamed response shares between the handler and httplib's
// content provider (which runs after the handler returned).
struct Exchange {
  Scheduler* scheduler = nullptr;
  std::shared_ptr<UpdateStreams> streams;
  std::unique_ptr<ResponseBuilder> builder;
  std::vector<std::string> request_ids;
  std::optional<absl::Status> error;  // the first request that failed
  std::unique_ptr<ActiveGuard> active;

  // Feeds events to the builder; returns the chunks to stream.
  std::vector<Json> Consume(std::vector<UpdateStreams::Event> events) {
    std::vector<Json> chunks;
    for (UpdateStreams::Event& e : events) {
      if (e.update) {
        for (Json& c : builder->Add(e.source, *e.update)) chunks.push_back(std::move(c));
      } else if (e.closed && !e.closed->ok() && !error) {
        // One prompt failed: the response is an error, so stop the rest.
        error = *e.closed;
        CancelAll();
      }
    }
    return chunks;
  }
  void CancelAll() {
    for (const std::string& id : request_ids) scheduler->Cancel(id);
  }
  void Abandon() {
    streams->Abandon();
    CancelAll();
  }
};

bool Write(httplib::DataSink& sink, const std::string& text) { return sink.write(text.data(), text.size()); }

}  // namespace

OpenAiHttpServer::OpenAiHttpServer(Scheduler* scheduler, const ChatTemplate* chat_template, HttpServerOptions options)
    : scheduler_(scheduler),
      chat_template_(chat_template),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())),
      server_(options_.tls.cert.empty()
                  ? std::make_unique<httplib::Server>()
                  : std::make_unique<httplib::SSLServer>(
                        options_.tls.cert.c_str(), options_.tls.key.c_str(),
                        options_.tls.ca.empty() ? nullptr : options_.tls.ca.c_str())) {}

OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }

void OpenAiHttpServer::AddGet(const std::string& path, std::function<Reply()> handler) {
  extra_gets_.emplace_back(path, std::move(handler));
}

absl::StatusOr<int> OpenAiHttpServer::Start() {
  // A client that disconnects makes the next write raise SIGPIPE, which
  // would kill the daemon; httplib 0.11 writes without MSG_NOSIGNAL.
  ::signal(SIGPIPE, SIG_IGN);
  httplib::Server& s = *server_;
  if (!s.is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot serve HTTPS with --tls-cert ", options_.tls.cert,
                                                   " and --tls-key ", options_.tls.key));
  }
  const int threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_tcp_nodelay(true);  // token chunks are small and latency matters

  const ApiKeys* keys = options_.api_keys;
  s.set_pre_routing_handler([keys](const httplib::Request& req, httplib::Response& res) {
    if (keys == nullptr || !keys->enabled() || !absl::StartsWith(req.path, "/v1/")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    absl::Status ok = keys->CheckAuthorization(req.get_header_value("Authorization"));
    if (ok.ok()) return httplib::Server::HandlerResponse::Unhandled;
    SendStatus(res, ok);
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib produces itself (unknown route, body too large,
  // malformed request) get OpenAI-shaped bodies too.
  const size_t max_body = options_.max_body_bytes;
  s.set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
    switch (res.status) {
      case 404:
        e.message = absl::StrCat("Invalid URL (", req.method, " ", req.path, ")");
        e.code = "unknown_url";
        break;
      case 413:
        e.message = absl::StrCat("the request body exceeds the server's limit of ", max_body,
                                 " bytes (--max-body-bytes)");
        e.code = "request_too_large";
        break;
      default:
        e.message = absl::StrCat("HTTP ", res.status, " for ", req.method, " ", req.path);
        break;
    }
    res.set_content(ApiErrorJson(e), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SPAR_LOG(ERROR) << "http handler failed: " << what;
    SendStatus(res, absl::InternalError(absl::StrCat("internal error: ", what)));
  });

  auto method_not_allowed = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      ApiError e;
      e.http_status = 405;
      e.type = "invalid_request_error";
      e.message = absl::StrCat("method ", req.method, " is not allowed on ", req.path, " (use ", allowed, ")");
      e.code = "method_not_allowed";
      SendError(res, e);
      res.set_header("Allow", allowed);
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = std::string(path) == "/v1/chat/completions";
    s.Post(path, [this, chat](const httplib::Request& req, httplib::Response& res) { HandleGenerate(chat, req, res); });
    s.Get(path, method_not_allowed("POST"));
    s.Put(path, method_not_allowed("POST"));
    s.Patch(path, method_not_allowed("POST"));
    s.Delete(path, method_not_allowed("POST"));
  }
  std::vector<std::string> get_paths = {"/v1/models", R"(/v1/models/(.+))", "/health"};
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { HandleModels(req, res); });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { HandleModels(req, res); });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  for (auto& [path, handler] : extra_gets_) {
    auto h = handler;
    s.Get(path, [h](const httplib::Request&, httplib::Response& res) {
      Reply r = h();
      res.status = r.status;
      res.set_content(r.body, r.content_type);
    });
    get_paths.push_back(path);
  }
  for (const std::string& path : get_paths) {
    s.Post(path, method_not_allowed("GET"));
    s.Put(path, method_not_allowed("GET"));
    s.Patch(path, method_not_allowed("GET"));
    s.Delete(path, method_not_allowed("GET"));
  }

  int port = options_.port;
  if (port == 0) {
    port = s.bind_to_any_port(options_.host);
    if (port < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, " (HTTP)"));
  } else if (!s.bind_to_port(options_.host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":", port, " (HTTP)"));
  }
  // httplib listens with a backlog of 5: bursts of connections would be
  // dropped (listen_backlog.h).
  if (absl::Status st = RaiseListenBacklog(port, 4096); !st.ok()) {
    SPAR_LOG(WARNING) << "HTTP accept backlog stays at httplib's 5: " << st;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return port;
}

void OpenAiHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

void OpenAiHttpServer::HandleModels(const httplib::Request& req, httplib::Response& res) {
  const ModelInfo info = scheduler_->Info();
  Json model = {{"id", info.served_model_name}, {"object", "model"},          {"created", created_},
                {"owned_by", "spar"},           {"root", info.model_path},    {"parent", nullptr},
                {"max_model_len", info.max_model_len}};
  if (req.matches.size() > 1) {
    const std::string wanted = req.matches[1];
    if (wanted != info.served_model_name) {
      ApiError e = InvalidRequest(absl::StrCat("The model `", wanted, "` does not exist"), "model");
      e.http_status = 404;
      e.code = "model_not_found";
      SendError(res, e);
      return;
    }
    res.set_content(Dump(model), "application/json");
    return;
  }
  res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}), "application/json");
}

void OpenAiHttpServer::HandleGenerate(bool chat, const httplib::Request& req, httplib::Response& res) {
  if (draining_ || scheduler_->draining()) {
    SendError(res, Unavailable("the server is draining (shutting down); retry on another replica", "draining"));
    return;
  }
  auto request = chat ? ParseChatRequest(req.body) : ParseCompletionRequest(req.body, options_.max_prompts);
  if (!request.ok()) return SendStatus(res, request.status());
  const ApiLimits& limits = scheduler_->limits();
  if (!request->model.empty() && request->model != limits.served_model_name) {
    ApiError e = InvalidRequest(absl::StrCat("The model `", request->model, "` does not exist (this server serves `",
                                             limits.served_model_name, "`)"),
                                "model");
    e.http_status = 404;
    e.code = "model_not_found";
    return SendError(res, e);
  }
  auto params = BuildGenerateParams(*request, chat_template_, limits);
  if (!params.ok()) return SendStatus(res, params.status());
  if (!scheduler_->ready()) {
    return SendError(res, Unavailable("not ready: the pipeline of workers is not connected", "not_ready"));
  }

  const std::string client_id = req.get_header_value("X-Request-Id");
  const std::string base_id = client_id.empty() ? RandomId() : client_id;
  auto ex = std::make_shared<Exchange>();
  ex->scheduler = scheduler_;
  ex->active = std::make_unique<ActiveGuard>(&active_);
  ex->streams = UpdateStreams::Create(static_cast<int>(params->size()));
  ResponseOptions ro = ResponseOptions::For(*request, absl::StrCat(chat ? "chatcmpl-" : "cmpl-", base_id),
                                            limits.served_model_name, absl::ToUnixSeconds(absl::Now()));
  if (chat) {
    const Json& tools = request->template_options.tools;
    ro.chat_syntax = ChatSyntaxFor(options_.chat_parsers, tools.is_array() && !tools.empty(),
                                   request->tool_choice_none, (*params)[0].text.value_or(""));
    // The parsers read the tags (<think>, <tool_call>, …), special tokens
    // that skip_special_tokens would drop from the text (as vLLM's do).
    if (ro.chat_syntax.active()) (*params)[0].skip_special_tokens = false;
  }
  auto tokens = std::make_shared<TokenStrings>(scheduler_->tokenizer());
  ex->builder = std::make_unique<ResponseBuilder>(ro, tokens.get());
  for (size_t p = 0; p < params->size(); ++p) {
    GenerateParams& gp = (*params)[p];
    if (request->echo) {
      std::string text;
      if (gp.text) {
        text = *gp.text;
      } else if (scheduler_->tokenizer() != nullptr) {
        text = scheduler_->tokenizer()->Decode(gp.prompt_ids).value_or("");
      }
      ex->builder->SetEchoText(static_cast<int>(p), std::move(text));
    }
    gp.request_id = params->size() > 1 ? absl::StrCat(base_id, "-", p) : base_id;
    auto id = scheduler_->Submit(std::move(gp), ex->streams->Sink(static_cast<int>(p)));
    if (!id.ok()) {
      for (size_t q = p; q < params->size(); ++q) ex->streams->Forget(static_cast<int>(q));
      ex->Abandon();
      return SendStatus(res, id.status());
    }
    ex->request_ids.push_back(*id);
  }
  res.set_header("X-Request-Id", base_id);
  const absl::Duration poll = options_.poll_interval;

  if (request->stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the stream back
    const bool include_usage = request->include_usage;
    res.set_chunked_content_provider(
        "text/event-stream",
        [ex, tokens, poll, include_usage](size_t, httplib::DataSink& sink) {
          for (;;) {
            for (const Json& chunk : ex->Consume(ex->streams->Wait(poll))) {
              if (!Write(sink, absl::StrCat("data: ", Dump(chunk), "\n\n"))) return false;
            }
            if (ex->streams->Done()) break;
            if (!sink.is_writable()) return false;  // the client left: the releaser cancels
          }
          if (ex->error) {
            // After the 200 went out, an error travels as an event the
            // OpenAI clients raise as APIError (vLLM does the same).
            const ApiError e = ApiErrorFromStatus(*ex->error);
            Json body = Json::parse(ApiErrorJson(e), nullptr, false);
            if (!Write(sink, absl::StrCat("data: ", Dump(body), "\n\n"))) return false;
          } else if (include_usage) {
            if (!Write(sink, absl::StrCat("data: ", Dump(ex->builder->UsageChunk()), "\n\n"))) return false;
          }
          if (!Write(sink, "data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        [ex](bool success) {
          if (!success || !ex->streams->Done()) ex->Abandon();
          ex->active.reset();
        });
    return;
  }

  // Not streamed: wait here, watching the client.
  auto probe = ConnectionProbe::Find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  while (!ex->streams->Done()) {
    ex->Consume(ex->streams->Wait(poll));
    if (probe && probe->PeerGone()) {
      ex->Abandon();
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return;
    }
  }
  if (ex->error) return SendStatus(res, *ex->error);
  res.set_content(Dump(ex->builder->Response()), "application/json");
}

}  // namespace spar::http
