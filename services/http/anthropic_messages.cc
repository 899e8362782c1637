#include "services/http/anthropic_messages.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "services/http/anthropic_request.h"
#include "services/http/anthropic_response.h"
#include "services/http/api_error.h"
#include "services/http/chat_messages.h"
#include "services/http/generation_relay.h"
#include "services/http/request_id.h"

namespace spar::http {
namespace {

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return http_status < 500 ? "invalid_request_error" : "api_error";
  }
}

// Before the request runs: the checks HandleGenerate makes, answered in
// Anthropic's shape. Returns the params, or sends the error and nullopt.
struct Prepared {
  AnthropicRequest request;
  GenerateParams params;
  ChatOutputSyntax syntax;
  std::string request_id;
};

std::optional<Prepared> Prepare(const GenerateContext& ctx, HttpRequest& req, HttpResponder& out, bool count_tokens) {
  Scheduler* const scheduler = ctx.scheduler;
  if ((ctx.draining != nullptr && *ctx.draining) || scheduler->draining()) {
    out.Send(AnthropicErrorResponse(503, "the server is draining (shutting down); retry on another replica"));
    return std::nullopt;
  }
  auto client_id = ClientRequestId(req.headers.Get("X-Request-Id"));
  if (!client_id.ok()) {
    out.Send(AnthropicErrorResponse(client_id.status()));
    return std::nullopt;
  }
  auto request = ParseAnthropicRequest(req.body, count_tokens);
  req.body = std::string();
  if (!request.ok()) {
    out.Send(AnthropicErrorResponse(request.status()));
    return std::nullopt;
  }
  const ApiLimits& limits = scheduler->limits();
  if (request->model != limits.served_model_name) {
    out.Send(AnthropicErrorResponse(
        404, absl::StrCat("model: `", request->model, "` does not exist (this server serves `", limits.served_model_name,
                          "`)")));
    return std::nullopt;
  }
  Prepared p;
  if (count_tokens) {
    auto prompt = RenderChatPrompt(ctx.chat_template, request->messages, request->template_options, "messages",
                                   "this API needs one");
    if (!prompt.ok()) {
      out.Send(AnthropicErrorResponse(prompt.status()));
      return std::nullopt;
    }
    p.params.text = std::move(*prompt);
  } else {
    auto params = BuildAnthropicParams(*request, ctx.chat_template, limits);
    if (!params.ok()) {
      out.Send(AnthropicErrorResponse(params.status()));
      return std::nullopt;
    }
    p.params = std::move(*params);
    const Json& tools = request->template_options.tools;
    p.syntax = ChatSyntaxFor(ctx.chat_parsers, tools.is_array() && !tools.empty(), request->tool_choice_none,
                             p.params.text.value_or(""));
    if (p.syntax.active()) p.params.skip_special_tokens = false;  // the parsers read the tags
    if (request->constraint) {
      absl::Status s = ApplyOutputConstraint(*request->constraint, p.syntax, &p.params);
      if (!s.ok()) {
        out.Send(AnthropicErrorResponse(s));
        return std::nullopt;
      }
    }
  }
  p.request = std::move(*request);
  p.request_id = client_id->empty() ? RandomRequestId() : *client_id;
  return p;
}

// What the relay's callbacks share (touched only on the connection's strand).
struct Answer {
  Answer(std::atomic<int>* active, std::string id, std::string model, ChatOutputSyntax syntax, Json tools)
      : guard(active), tools(std::move(tools)), builder(std::move(id), std::move(model), syntax, &this->tools) {}
  ActiveRequestGuard guard;
  Json tools;
  AnthropicMessageBuilder builder;
  std::optional<absl::Status> error;
  std::string request_id;
  bool stream = false;
  bool started = false;  // message_start sent

  std::string Consume(GenerationRelay& relay, std::vector<UpdateStreams::Event> events) {
    std::string sse;
    for (UpdateStreams::Event& e : events) {
      if (e.update) {
        std::vector<SseEvent> out;
        if (!started) {
          started = true;
          out = builder.Start(e.update->prompt ? e.update->prompt->num_prompt_tokens : 0);
        }
        for (SseEvent& ev : builder.Add(*e.update)) out.push_back(std::move(ev));
        if (stream) {
          for (const SseEvent& ev : out) sse += SseText(ev);
        }
      } else if (e.closed && !e.closed->ok() && !error) {
        error = *e.closed;
        relay.CancelAll();
      }
    }
    return sse;
  }

  void Finish(HttpResponder& out) {
    if (!stream) {
      HttpResponse res = error ? AnthropicErrorResponse(*error)
                               : MakeResponse(200, builder.Message().dump(-1, ' ', false, Json::error_handler_t::replace));
      res.headers.Add("X-Request-Id", request_id);
      out.Send(std::move(res));
      return;
    }
    if (error) {
      const ApiError e = ApiErrorFromStatus(*error);
      out.Write(absl::StrCat("event: error\ndata: ", AnthropicErrorJson(e.http_status, e.message), "\n\n"));
    }
    out.EndStream();
  }
};

}  // namespace

std::string AnthropicErrorJson(int http_status, const std::string& message) {
  const Json j = {{"type", "error"}, {"error", {{"type", ErrorType(http_status)}, {"message", message}}}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

HttpResponse AnthropicErrorResponse(int http_status, const std::string& message) {
  return MakeResponse(http_status, AnthropicErrorJson(http_status, message));
}

HttpResponse AnthropicErrorResponse(const absl::Status& status) {
  const ApiError e = ApiErrorFromStatus(status);
  return AnthropicErrorResponse(e.http_status, e.message);
}

void HandleAnthropicMessages(const GenerateContext& ctx, HttpRequest req, std::shared_ptr<HttpResponder> out) {
  std::optional<Prepared> p = Prepare(ctx, req, *out, /*count_tokens=*/false);
  if (!p) return;
  Scheduler* const scheduler = ctx.scheduler;
  if (!scheduler->ready()) {
    return out->Send(AnthropicErrorResponse(503, "not ready: the pipeline of workers is not connected"));
  }
  const std::string id = absl::StrCat("msg_", p->request_id);
  auto answer = std::make_shared<Answer>(ctx.active, id, scheduler->limits().served_model_name, p->syntax,
                                         p->request.template_options.tools);
  answer->request_id = p->request_id;
  answer->stream = p->request.stream;
  p->params.request_id = p->request_id;
  auto relay = GenerationRelay::Create(scheduler, out, 1);
  std::vector<GenerateParams> params;
  params.push_back(std::move(p->params));
  if (absl::Status s = relay->Submit(std::move(params)); !s.ok()) return out->Send(AnthropicErrorResponse(s));
  if (answer->stream) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.Add("X-Request-Id", p->request_id);
    head.headers.Add("Cache-Control", "no-cache");
    head.headers.Add("X-Accel-Buffering", "no");
    out->StartStream(std::move(head));
  }
  relay->Start(
      [answer](GenerationRelay& r, std::vector<UpdateStreams::Event> events) {
        std::string sse = answer->Consume(r, std::move(events));
        if (!sse.empty()) r.responder().Write(std::move(sse));
      },
      [answer](GenerationRelay& r) { answer->Finish(r.responder()); });
}

void HandleAnthropicCountTokens(const GenerateContext& ctx, HttpRequest req, std::shared_ptr<HttpResponder> out) {
  std::optional<Prepared> p = Prepare(ctx, req, *out, /*count_tokens=*/true);
  if (!p) return;
  const Tokenizer* tokenizer = ctx.scheduler->tokenizer();
  if (tokenizer == nullptr) return out->Send(AnthropicErrorResponse(400, "this server has no tokenizer.json"));
  auto ids = tokenizer->Encode(*p->params.text, /*allow_special=*/true);
  if (!ids.ok()) return out->Send(AnthropicErrorResponse(ids.status()));
  const Json body = {{"input_tokens", ids->size()}};
  out->Send(MakeResponse(200, body.dump()));
}

}  // namespace spar::http
